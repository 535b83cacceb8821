"""``minLength``/``maxLength`` together with a ``pattern`` or ``format`` (the repetitions of the
pattern are narrowed, ``constrained/pattern/bounds.py``), and anchors on the branches of a
top-level alternation: accepted / rejected instances through a compiled grammar, random token
walks that must validate with ``jsonschema``, impossible bounds, and the automaton size guard."""

from __future__ import annotations

import json
import random
import re
import time
from pathlib import Path

import jsonschema
import pytest
from radixlm.constrained import ConstraintError, TokenizerVocab, compile_grammar, schema_to_grammar
from radixlm.constrained.pattern.bounds import MAX_DFA_STATES, dfa_states, max_len, min_len, narrow_to_length
from radixlm.constrained.pattern.ecma import parse_pattern, sre_parse
from radixlm.constrained.pattern.formats import FORMAT_REGEXES
from radixlm.constrained.testing.walks import accepts_text, compact_json, random_walk, schema_regex

DATA = Path(__file__).resolve().parents[1] / "data" / "jsonschemabench"
DURATION = "^([0-9]+y)?([0-9]+w)?([0-9]+d)?([0-9]+h)?([0-9]+m)?([0-9]+s)?([0-9]+ms)?$"  # prometheus


def _s(**kw) -> dict:
    return {"type": "string", **kw}


# (id, schema, instances that must be accepted, instances that must be rejected)
CASES = [
    ("slug", _s(minLength=4, maxLength=63, pattern="^[0-9a-z-]*$"),
     ["abcd", "a-1-", "a" * 63], ["abc", "a" * 64, "ABCD", "ab_d"]),
    ("unanchored-max", _s(pattern="abc", maxLength=5), ["abc", "xabc", "xabcy"],
     ["ab", "xyzabc", "abcdef", "xxabcx"]),
    ("unanchored-min", _s(pattern="abc", minLength=10), ["xxxxxxxabc", "abcxxxxxxx"],
     ["abc", "xabcx", "xxxxxxxxxx"]),
    ("nested", _s(pattern=r"^([a-z]+\.)+[a-z]+$", minLength=10, maxLength=20),
     ["ab.cdefghij", "a.b.c.d.e.fg"], ["a.b", "ab.cd", "abcdefghijkl.mnopqrstu", "ab..cdefghij"]),
    ("duration", _s(pattern=DURATION, minLength=1), ["5m", "1h30m", "2w", "30s"], ["", "5x", "m"]),
    ("email", _s(format="email", maxLength=30), ["a@b.co", "jo.do@mail.ex.org"],
     ["a" * 30 + "@b.co", "not-an-email", "a@b"]),
    ("email-1024", _s(format="email", maxLength=1024), ["a@b.co"], ["a@", "@b.co"]),
    ("uri", _s(format="uri", maxLength=40), ["http://a.bc", "a:b"], ["http://" + "a" * 40, "a b"]),
    ("hostname", _s(format="hostname", maxLength=10), ["a.b", "abc-d"], ["abcdefghijk", "-a", "a..b"]),
    ("date-time", _s(format="date-time", maxLength=20), ["2020-01-31T23:59:59Z"],
     ["2020-01-01T00:00:00+01:00", "2020-01-01T00:00:00.5Z", "2020-01-01"]),
    ("date-time-min", _s(format="date-time", minLength=22, maxLength=25),
     ["2020-01-01T00:00:00+01:00"], ["2020-01-31T23:59:59Z", "2020-01-01T00:00:00.123456+01:00"]),
    ("ipv4-min", _s(format="ipv4", minLength=15), ["192.168.100.200"], ["1.2.3.4", "10.0.0.1"]),
    ("escapes", _s(pattern='^[a"]+$', maxLength=3), ["a", "aaa"], ["aaaa", "", "b"]),
    ("ambiguous", _s(pattern="^[a-z]*a[a-z]*$", maxLength=40), ["a", "bab"], ["b", "a" * 41, "aB"]),
    ("branch-anchors", _s(pattern=r"^$|^[a-zA-Z_\$][a-zA-Z_\$0-9]*$"), ["", "a1", "$x", "_"],
     ["1a", "a-b", " "]),
    ("branch-anchors-max", _s(pattern="^ab$|^c+$", maxLength=3), ["ab", "c", "ccc"],
     ["cccc", "abc", "xab"]),
    ("branch-mixed", _s(pattern="^a|b$"), ["a", "ax", "xb", "b"], ["xa", "bx", ""]),
    ("branch-in-group", _s(pattern="(^a$|^b)", maxLength=4), ["a", "b", "bcd"], ["ab", "bcdef", "xa"]),
    ("group-branch", _s(pattern="^(a|bc)$", minLength=2), ["bc"], ["a", "abc"]),
    # classes hold under ECMA and Python's re alike (jsonschema validates with the latter)
    ("class-s", _s(pattern=r"^\s$"), [" "], ["\ufeff", "a"]),
    ("class-S", _s(pattern=r"^\S+$", maxLength=4), ["ab", "é"], ["a b", "a\u3000", "a\u0085", "a\ufeff"]),
    ("class-D", _s(pattern=r"^\D+$", maxLength=4), ["ab", "é"], ["a1", "a\u0663"]),
    ("class-W", _s(pattern=r"^\W+$", maxLength=4), ["!?", "-"], ["é", "a", "_"]),
    ("class-ops", _s(pattern=r"^[\x26-\x27&\x7e~a]+$", maxLength=3), ["&a", "a'~"], ["b", "&&&&"]),
]


@pytest.fixture(scope="module")
def grammars(tokenizer) -> dict:
    vocab = TokenizerVocab.from_tokenizer(tokenizer)
    return {name: compile_grammar(vocab, "json_schema", schema) for name, schema, _, _ in CASES}


def _validator(schema: dict):
    return jsonschema.Draft202012Validator(schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)


def _valid(schema: dict, value) -> bool:
    """jsonschema, plus our format regexes where jsonschema has no checker (uri, hostname):
    narrowed formats must stay inside them."""
    fmt = schema.get("format")
    if fmt and not re.fullmatch(FORMAT_REGEXES[fmt], value):
        return False
    return _validator(schema).is_valid(value)


@pytest.mark.parametrize("name,schema,good,bad", CASES, ids=[c[0] for c in CASES])
def test_accepts_and_rejects(name, schema, good, bad, grammars, tokenizer):
    grammar = grammars[name]
    for value in good:
        assert _valid(schema, value), f"test data: {value!r} should be valid"
        assert accepts_text(grammar, tokenizer, compact_json(value)), f"{name}: {value!r} rejected"
    for value in bad:
        assert not accepts_text(grammar, tokenizer, compact_json(value)), f"{name}: {value!r} accepted"


@pytest.mark.parametrize("name,schema", [(c[0], c[1]) for c in CASES], ids=[c[0] for c in CASES])
def test_random_walks_validate(name, schema, grammars, tokenizer):
    grammar, lengths = grammars[name], set()
    for seed in range(12):
        walk = random_walk(grammar, random.Random(seed), max_tokens=80)
        assert walk is not None, f"{name}: the walk could not finish"
        text = tokenizer.decode(walk[0])
        value = json.loads(text)
        assert _valid(schema, value), f"{name}: {text!r}"
        lengths.add(len(value))
    if "maxLength" in schema and "minLength" not in schema:  # walks run long: they reach the cap
        assert max(lengths) > 2, f"{name}: only {lengths}"


@pytest.mark.parametrize("pattern,lo,hi", [
    ("^[0-9a-z-]*$", 4, 63), ("abc", 0, 5), ("abc", 10, None), (r"^([a-z]+\.)+[a-z]+$", 10, 20),
    (DURATION, 1, None), ("^[a-z]*a[a-z]*$", 0, 40), ("x+y*z?", 3, 9), ("^(ab|c)*$", 7, 7),
])
def test_narrowed_lengths_are_exact(pattern, lo, hi):
    """The final tree (emitter caps applied) has min/max length within the bounds and a small
    automaton (the walks and the enumeration below check the emitted regex itself)."""
    tokens, _ = narrow_to_length(parse_pattern(pattern, "#"), lo, hi, "#")
    assert tokens is not None
    assert min_len(tokens) >= lo and (hi is None or max_len(tokens) <= hi)
    assert dfa_states(tokens, MAX_DFA_STATES) <= MAX_DFA_STATES


def test_exact_lengths_by_enumeration():
    """Brute force on a small alphabet: every string the narrowed regex accepts has an allowed
    length and matches the pattern, and some string of each end length is accepted."""
    schema = _s(pattern="^(ab|c)*$", minLength=3, maxLength=5)
    rx = re.compile(schema_regex(schema))
    accepted = []
    for n in range(8):
        for i in range(3 ** n):
            s = "".join("abc"[(i // 3 ** k) % 3] for k in range(n))
            if rx.fullmatch(json.dumps(s)):
                accepted.append(s)
    assert accepted and all(_valid(schema, s) for s in accepted)
    assert {len(s) for s in accepted} == {3, 4, 5}


@pytest.mark.parametrize("schema,where", [
    (_s(pattern="^a{5}$", maxLength=3), "#/maxLength"),
    (_s(pattern="^a{1,3}$", minLength=5), "#/minLength"),
    ({"properties": {"k": _s(pattern="^(abcd|efgh)$", maxLength=3)}}, "#/properties/k/maxLength"),
    (_s(format="date-time", maxLength=19), "#/maxLength"),
    (_s(pattern="a^b"), "#/pattern"),  # anchors inside still raise
    (_s(pattern="^a|b^c"), "#/pattern"),
    (_s(pattern="^a*+$"), "#/pattern"),  # possessive: not the same language as greedy
])
def test_impossible_bounds_name_keyword_and_pointer(schema, where):
    with pytest.raises(ConstraintError) as info:
        schema_to_grammar(schema)
    assert info.value.location == where


def test_lenient_mode_relaxes_impossible_bounds():
    result = schema_to_grammar(_s(pattern="^a{5}$", maxLength=3), strict=False)
    assert result.relaxed == ["#/maxLength"]
    assert re.fullmatch(result.grammar.to_regex(), '"aaaaa"')


def test_a_pattern_at_many_paths_is_narrowed_once_and_errors_name_each_path(monkeypatch):
    """``scalars._BODIES``: the same pattern and bounds at two paths are narrowed once and
    emit the same regex; an error is raised, never filed, so it names the path it comes from,
    and a bound narrowing cannot meet is relaxed at each path in lenient mode."""
    from radixlm.constrained.json_schema import scalars

    calls = []
    body = scalars._pattern_body
    monkeypatch.setattr(scalars, "_pattern_body", lambda *a: calls.append(a[:4]) or body(*a))
    scalars._BODIES.clear()
    email = _s(format="email", maxLength=40)
    two = {"type": "object", "properties": {"a": email, "b": dict(email)}, "required": ["a", "b"]}  # two nodes
    rx = re.compile(schema_regex(two))
    assert calls == [("format", "email", 0, 40)]
    assert rx.fullmatch('{"a":"x@y.io","b":"z@w.io"}') and not rx.fullmatch('{"a":"x@y.io","b":"nope"}')
    for where in ("a", "b"):  # an invalid pattern: its own pointer each time
        bad = {"properties": {"a": _s(pattern="a^b"), "b": _s(pattern="a^b")}, "required": [where]}
        with pytest.raises(ConstraintError) as info:
            schema_to_grammar({**bad, "properties": {where: _s(pattern="a^b")}})
        assert info.value.location == f"#/properties/{where}/pattern"
    short = _s(pattern="^a{5}$", maxLength=3)
    result = schema_to_grammar({"properties": {"a": short, "b": dict(short)}}, strict=False)
    assert result.relaxed == ["#/properties/a/maxLength", "#/properties/b/maxLength"]


def test_unbounded_patterns_keep_their_regex():
    assert schema_regex(_s(pattern="^(a|b)$")) == '("((([ab])))")'
    assert schema_regex(_s(pattern="^[a-z]{2,4}$", maxLength=4)) == '("((([a-z]){2,4}))")'


def test_dfa_guard_measures_the_blow_up():
    def states(rx: str, limit: int = 100_000) -> int:
        return dfa_states(list(sre_parse.parse(rx)), limit)

    assert states("[a-z]{0,100}") == 101
    assert states("[a-z]{0,12}a[a-z]{0,12}") > 10_000  # 4 s of index building on 32k tokens
    assert states("[a-z]{0,20}a[a-z]{0,20}", 1000) == 1001  # stops counting at the limit


def test_benchmark_schemas_compile(tokenizer):
    if not DATA.is_dir():
        pytest.fail(f"JSONSchemaBench sample not found at {DATA}")
    vocab = TokenizerVocab.from_tokenizer(tokenizer)
    for name in ["Github_hard/Github_hard---o9787.json", "Github_medium/Github_medium---o9887.json",
                 "JsonSchemaStore/JsonSchemaStore---prometheus.rules.json"]:
        doc = json.loads((DATA / name).read_text())
        start = time.monotonic()
        grammar = compile_grammar(vocab, "json_schema", doc["schema"])
        assert time.monotonic() - start < 60, name
        for test in doc["tests"]:
            if not test["valid"]:
                assert not accepts_text(grammar, tokenizer, compact_json(test["data"])), name


@pytest.mark.parametrize("pattern", ["^" + "." * 60 + "$", "^.{20,}$", "^[^:]+:[^:]+$"])
def test_runs_of_escapable_characters_compile_fast(pattern, tokenizer):
    """Each consecutive character that may be a JSON escape doubles the index build time
    (60 of them ran out of memory): long runs and counted copies use plain characters."""
    schema = _s(pattern=pattern, minLength=20)
    vocab = TokenizerVocab.from_tokenizer(tokenizer)
    start = time.monotonic()
    grammar = compile_grammar(vocab, "json_schema", schema)
    assert time.monotonic() - start < 20
    text = "a" * 60 if "." * 60 in pattern else "a" * 30 + ":" + "b" * 29
    assert accepts_text(grammar, tokenizer, compact_json(text))
