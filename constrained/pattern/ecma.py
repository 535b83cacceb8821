"""Translate a JSON Schema ``pattern`` (an ECMA-262 regex, search semantics) into a regex over
the JSON-encoded string body that outlines-core can compile.

The pattern is parsed with Python's own regex parser; each character class is rewritten so that
it matches the JSON encoding of the characters it allows (``"`` as ``\\"``, ``\\`` as ``\\\\``;
control characters are dropped, an under-approximation). Lookarounds, backreferences,
possessive repeats and anchors in the middle of a pattern raise ``ConstraintError``; anchors may
start/end the pattern or each branch of a top-level alternation.
"""

from __future__ import annotations

import re

from radixlm.constrained.errors import ConstraintError
from radixlm.constrained.pattern.chars import FREE, _split, char_ranges, ranges_regex, sre_c, sre_parse

# One JSON string character that needs no escape, or a two-character escape of " or \.
STRING_CHAR = r'([^"\\\x00-\x1f]|\\["\\/bfnrt]|\\u([0-9a-cA-CefEF][0-9a-fA-F]{3}|[dD][0-7][0-9a-fA-F]{2}))'
PLAIN_CHAR = r'[^"\\\x00-\x1f]'
MAX_PATTERN_REPEAT = 64  # upper bound of counted repetitions inside patterns
MAX_ESCAPE_RUN = 8  # characters in a row that may be escapes (see emit_tokens)


def emit_tokens(tokens, pointer: str, char: str = STRING_CHAR, plain: bool = False) -> str:
    """Regex (outlines-core syntax, over the JSON-encoded body) of a token tree: sre_parse
    tokens plus ``FREE`` nodes, which stand for ``char`` (``PLAIN_CHAR`` when plain)."""
    # Index building time doubles with each consecutive character that may be an escape
    # (16 of them: seconds; 60: out of memory): long runs use plain characters (a restriction).
    plain = plain or _escapable(tokens, pointer) > MAX_ESCAPE_RUN
    return "".join(_emit_one(op, av, pointer, char, plain) for op, av in tokens)


def _escapable(tokens, pointer: str) -> int:
    """Characters of the sequence (groups included) that may be a JSON escape."""
    count = 0
    for op, av in tokens:
        if op is sre_c.SUBPATTERN:
            count += _escapable(av[-1], pointer)
        elif op != FREE and op is not sre_c.LITERAL and (ranges := char_ranges(op, av, pointer)):
            count += _chars(ranges, False) != _chars(ranges, True)
    return count


def _emit_one(op, av, pointer: str, char: str, plain: bool) -> str:
    if op == FREE:
        return PLAIN_CHAR if plain or av else char
    if op is sre_c.LITERAL:
        return _need(ranges_regex([(av, av)]), pointer)
    ranges = char_ranges(op, av, pointer)
    if ranges is not None:
        return _need(_chars(ranges, plain), pointer)
    # A possessive repeat can make a match fail where the greedy one succeeds: not emittable.
    if op in (sre_c.MAX_REPEAT, sre_c.MIN_REPEAT):
        lo, hi, sub = av
        if hi is sre_c.MAXREPEAT:
            body = emit_tokens(sub, pointer, char)
            counted = emit_tokens(sub, pointer, char, plain=True) if lo >= 2 else body
            if counted != body:  # X{lo,} as X{lo}X*, the counted copies plain
                return f"({counted}){{{lo}}}({body})*"
            return f"({body})*" if lo == 0 else f"({body}){{{lo},}}"
        # Counted copies of escape alternatives (\" and \\) make the index slow to build
        # (seconds per copy): inside a counted repetition, characters that need escaping are
        # dropped (a restriction), and large upper bounds are lowered (never below the lower
        # bound): still sound.
        hi = max(lo, min(hi, MAX_PATTERN_REPEAT))
        return f"({emit_tokens(sub, pointer, char, plain=True)}){{{lo},{hi}}}"
    if op is sre_c.SUBPATTERN:
        return "(" + emit_tokens(av[-1], pointer, char, plain) + ")"
    if op is sre_c.BRANCH:
        return "(" + "|".join(emit_tokens(b, pointer, char, plain) for b in av[1]) + ")"
    raise ConstraintError(f"unsupported construct {str(op).lower()} in pattern", pointer, "pattern")


def _chars(ranges: list[tuple[int, int]], plain: bool) -> str | None:
    """``ranges_regex``, without the escaped ``"`` and ``\\`` when ``plain`` (a restriction)
    unless they are all the class allows."""
    if plain:
        kept = [r for a, b in ranges for r in _split(a, b, (0x22, 0x5C))]
        if kept and ranges_regex(kept) is not None:
            return ranges_regex(kept)
    return ranges_regex(ranges)


def _need(rx: str | None, pointer: str) -> str:
    if rx is None:
        raise ConstraintError("pattern matches only control characters", pointer, "pattern")
    return rx


def parse_pattern(pattern: str, pointer: str) -> list[tuple[bool, bool, list]]:
    """The top-level alternatives of ``pattern`` as (anchored at start, anchored at end, body).

    Anchors are allowed at the edges of the pattern, or at the edges of the branches of a
    top-level alternation (``^$|^[a-z]+$``, also inside one group); elsewhere the emitter raises.
    """
    try:
        tokens = list(sre_parse.parse(pattern))
    except re.error as e:
        raise ConstraintError(f"invalid pattern {pattern!r}: {e}", pointer, "pattern") from None
    start, tokens = _strip_start(tokens)
    end, tokens = _strip_end(tokens)
    if len(tokens) == 1 and tokens[0][0] is sre_c.SUBPATTERN:  # a group has no effect: no backrefs
        inner_start, inner = _strip_start(list(tokens[0][1][-1]))
        inner_end, inner = _strip_end(inner)
        if inner_start or inner_end or _anchored_branch(inner):
            start, end, tokens = start or inner_start, end or inner_end, inner
    if not _anchored_branch(tokens):
        return [(start, end, tokens)]
    alts = []
    for branch in tokens[0][1][1]:
        b_start, body = _strip_start(list(branch))
        b_end, body = _strip_end(body)
        alts.append((start or b_start, end or b_end, body))
    return alts


def _anchored_branch(tokens: list) -> bool:
    return len(tokens) == 1 and tokens[0][0] is sre_c.BRANCH and any(
        _strip_start(b)[0] or _strip_end(b)[0] for b in tokens[0][1][1])


def _strip_start(tokens: list) -> tuple[bool, list]:
    if tokens and tokens[0] == (sre_c.AT, sre_c.AT_BEGINNING):
        return True, tokens[1:]
    return False, tokens


def _strip_end(tokens: list) -> tuple[bool, list]:
    if tokens and tokens[-1][0] is sre_c.AT and tokens[-1][1] in (sre_c.AT_END, sre_c.AT_END_STRING):
        return True, tokens[:-1]
    return False, tokens


def free_run(lo: int = 0, hi=sre_c.MAXREPEAT) -> tuple:
    """A repetition of free characters (the unanchored ends of a pattern)."""
    return (sre_c.MAX_REPEAT, (lo, hi, [(FREE, False)]))


def search_tokens(alts: list[tuple[bool, bool, list]]) -> list:
    """Token tree whose full matches are the strings the alternatives ``re.search``-match: each
    unanchored end gets a run of free characters."""
    seqs = [([] if start else [free_run()]) + [(sre_c.SUBPATTERN, (None, 0, 0, body))]
            + ([] if end else [free_run()]) for start, end, body in alts]
    return seqs[0] if len(seqs) == 1 else [(sre_c.BRANCH, (None, seqs))]


def pattern_to_regex(pattern: str, pointer: str, char: str = STRING_CHAR) -> str:
    """Body regex (no quotes) of JSON strings whose decoded value ``re.search``-matches ``pattern``.

    ``char`` is the regex of one free character used for the unanchored ends.
    """
    return emit_tokens(search_tokens(parse_pattern(pattern, pointer)), pointer, char)


def is_universal(pattern: str) -> bool:
    """True for patterns every string matches (``.*``, ``^.*$``, empty)."""
    return pattern in ("", ".*", "^.*", "^.*$", ".*$", "^", "$")
