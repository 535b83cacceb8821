"""The incremental stop-regex matcher: Python ``re``'s earliest match, in work linear in the text,
fed piece by piece; and the patterns it refuses (too large, or not expressible)."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from radixlm.runtime.sampling_params import SamplingParams
from radixlm.runtime.stop_regex import (
    MAX_STOP_REGEX_PROGRAM,
    MAX_STOP_REGEX_TOTAL,
    StopRegexError,
    StopRegexMatcher,
    check_stop_regexes,
    compile_stop_regex,
)

pytestmark = pytest.mark.unit  # pure Python: no engine, no server, no model forward

ATOMS = ["a", "b", "c", ".", "[ab]", "[^a]", r"\d", r"\s", r"\w", "(ab)", "(a|b)", "(a*)", "(b|)", "(?:a|ab)"]
QUANTIFIERS = ["", "", "*", "+", "?", "*?", "+?", "??", "{2}", "{1,3}", "{0,2}?"]


@st.composite
def patterns(draw) -> str:
    parts = []
    for _ in range(draw(st.integers(1, 4))):
        atom = draw(st.sampled_from(ATOMS))
        parts.append(atom + draw(st.sampled_from(QUANTIFIERS)))
    pattern = "".join(parts)
    if draw(st.booleans()):
        pattern = pattern + "|" + draw(st.sampled_from(ATOMS))
    return ("^" if draw(st.integers(0, 5)) == 0 else "") + pattern


def feed_in_pieces(patterns_: list[str], text: str, cuts: list[int]) -> tuple[tuple[int, str] | None, str]:
    """Feed ``text`` growing by the pieces ``cuts`` gives, as the stop checker does; stop at the first
    match. Returns the match and the text fed until then."""
    matcher, end = StopRegexMatcher(patterns_), 0
    for cut in [*sorted(cuts), len(text)]:
        end = max(end, min(cut, len(text)))
        found = matcher.search(text[:end])
        if found is not None:
            return found, text[:end]
    return None, text


def earliest(patterns_: list[str], text: str) -> tuple[int, str] | None:
    best = None
    for p in patterns_:
        m = re.search(p, text)
        if m is not None and (best is None or m.start() < best[0]):
            best = (m.start(), m.group(0))
    return best


@settings(max_examples=400, deadline=None, derandomize=True)
@given(st.lists(patterns(), min_size=1, max_size=3), st.text("abc 1\n", max_size=16),
       st.lists(st.integers(0, 16), max_size=6))
def test_the_incremental_match_is_re_search_on_the_text_so_far(pats, text, cuts):
    found, fed = feed_in_pieces(pats, text, cuts)
    assert found == earliest(pats, fed)
    if found is None:
        assert fed == text


def test_no_match_is_reported_before_the_text_has_one():
    matcher = StopRegexMatcher([r"\d{3}", "END"])
    assert matcher.search("ab 12") is None and matcher.search("ab 12 E") is None
    assert matcher.search("ab 12 EN 345") == (9, "345")


def test_the_pathological_pattern_costs_linear_work():
    """``(a*)*b`` over a run of ``a``: Python's ``re`` backtracks exponentially; the matcher's work
    per character is bounded by its program size, however long the run."""
    program = len(compile_stop_regex("(a*)*b"))
    for n in (500, 2000):
        matcher = StopRegexMatcher(["(a*)*b"])
        for i in range(1, n + 1):  # one token at a time, as the engine feeds it
            assert matcher.search("a" * i) is None
        assert matcher.steps <= 4 * program * n
    assert matcher.search("a" * n + "b") == (0, "a" * n + "b")


def test_the_work_of_one_step_is_the_new_text_only():
    matcher = StopRegexMatcher(["x[0-9]+y"])
    matcher.search("q" * 1000)
    before = matcher.steps
    matcher.search("q" * 1001)
    assert matcher.steps - before <= 4 * len(compile_stop_regex("x[0-9]+y"))


def test_safe_len_holds_back_only_a_match_in_progress():
    matcher = StopRegexMatcher(["END[0-9]"])
    assert matcher.search("hello EN") is None
    assert matcher.safe_len() == len("hello ")
    assert matcher.search("hello ENx more") is None and matcher.safe_len() == len("hello ENx more")


@pytest.mark.parametrize("pattern, words", [
    (r"(a)\1", "backreference"), ("a(?=b)", "assert"), ("(?<!a)b", "assert_not"), ("end$", "at"),
    (r"\bword", "at"), ("(?i)stop", "flag"), ("a*+", "possessive"), ("(?>ab)", "atomic"),
    (f"a{{{MAX_STOP_REGEX_PROGRAM}}}", "too large"), ("(ab|cd){200}", "too large"), ("x" * 5000, "longer"),
    ("(?:){1000000000}", "too large"), ("(" * 600 + ")" * 600, "stop_regex"), ("(unclosed", "not a valid"),
])
def test_unsupported_or_oversized_patterns_are_refused(pattern, words):
    with pytest.raises(StopRegexError, match=words):
        check_stop_regexes([pattern])
    with pytest.raises(ValueError, match="stop_regex"):
        SamplingParams(stop_regex=[pattern])


def test_the_pattern_count_has_a_ceiling_before_any_compile():
    with pytest.raises(ValueError, match="stop_regex has 100000 patterns"):
        SamplingParams(stop_regex=[f"x{i}" for i in range(100_000)])


def test_the_patterns_of_a_request_have_a_total_size_bound():
    size = len(compile_stop_regex("a{400}"))
    fits = MAX_STOP_REGEX_TOTAL // size
    SamplingParams(stop_regex=[f"{c}{{400}}" for c in "abcdefgh"[:fits]])
    with pytest.raises(ValueError, match="stop_regex patterns total"):
        SamplingParams(stop_regex=[f"{c}{{400}}" for c in "abcdefgh"[:fits + 1]])


def test_the_matcher_reads_no_private_regex_parser():
    import inspect

    import radixlm.runtime.stop_regex as module
    source = inspect.getsource(module)
    assert "re._parser" not in source and "sre_parse" not in source and "sre_compile" not in source


@pytest.mark.parametrize("pattern, text, found", [
    ("(?s)a.b", "xa\nb", (1, "a\nb")), ("a.b", "xa\nb", None), ("^b|c", "abc", (2, "c")),
    ("x[^a]*?y", "x12y34y", (0, "x12y")), ("(?:ab|a)(?:b|)c", "zabc", (1, "abc")),
])
def test_leading_dotall_anchors_and_priorities(pattern, text, found):
    assert StopRegexMatcher([pattern]).search(text) == found
    assert earliest([pattern], text) == found


@pytest.mark.parametrize("pattern, text", [
    (r"\d+", "abc ٣٤ x"), (r"\w+!", "héllo 你好!"), (r"[^\d\s]+9", "a1 b٣ xy9"), (r"[\w-]+=", "a-b é="),
    (r"\D\S", "12 a٣"), (r"[\W]", "é_!"),
])
def test_digit_space_and_word_classes_keep_pythons_unicode_meaning(pattern, text):
    assert StopRegexMatcher([pattern]).search(text) == earliest([pattern], text)
