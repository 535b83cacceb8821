r"""What a pattern can produce, read off its parse: a few short matching strings, and the first
characters any match starts with.

Samples: A few short strings that match a pattern: candidate witnesses (member names an object must
have, ``names.resolve_some_key``). Callers check every candidate with ``re.search``; a pattern
the sampler cannot read gives no candidates.

First characters: First characters of the strings a regex can match, for ``oneOf`` disjointness proofs.

``first_chars(pattern)`` parses a pattern with Python's regex parser and returns the code-point
ranges a match's first character must come from (and whether the empty string can match), or
None when it cannot tell. Used on our own format regexes and on anchored ``pattern`` keywords
(``^\$...`` never matches a UUID); the JSON-schema side is ``json_schema.disjoint``.
"""

from __future__ import annotations

import functools
import itertools
import re

from radixlm.constrained.errors import ConstraintError
from radixlm.constrained.pattern.ecma import char_ranges, parse_pattern, sre_c, sre_parse

_Ranges = list[tuple[int, int]]


@functools.lru_cache(maxsize=4096)  # the same patterns come back in every oneOf proof of a schema
def first_chars(pattern: str, anchored: bool = True) -> tuple[tuple[tuple[int, int], ...], bool] | None:
    """(ranges of possible first characters, whether the match can be empty) of ``pattern`` as a
    full match (``anchored=True``) or for a pattern whose own ``^`` anchors it; None if unknown.
    Cached, so the ranges come as a tuple."""
    found = _first_chars(pattern, anchored)
    return None if found is None else (tuple(found[0]), found[1])


def _first_chars(pattern: str, anchored: bool) -> tuple[_Ranges, bool] | None:
    try:
        tokens = list(sre_parse.parse(pattern))
    except re.error:
        return None
    if not anchored:
        if not tokens or tokens[0] != (sre_c.AT, sre_c.AT_BEGINNING):
            return None  # search semantics: a match may start anywhere
        tokens = tokens[1:]
    return _first_seq(tokens)


def _first_seq(tokens: list) -> tuple[_Ranges, bool] | None:
    ranges: _Ranges = []
    for op, av in tokens:
        first = _first_one(op, av)
        if first is None:
            return None
        ranges += first[0]
        if not first[1]:
            return ranges, False
    return ranges, True


def _first_one(op, av) -> tuple[_Ranges, bool] | None:
    if op is sre_c.LITERAL:
        return [(av, av)], False
    if op is sre_c.IN:
        if any(o is not sre_c.LITERAL and o is not sre_c.RANGE for o, _ in av):
            return None  # negated classes and categories: give up
        return [(a, a) if o is sre_c.LITERAL else a for o, a in av], False
    if op is sre_c.SUBPATTERN:
        return _first_seq(list(av[-1]))
    if op is sre_c.BRANCH:
        out: _Ranges = []
        empty = False
        for branch in av[1]:
            first = _first_seq(list(branch))
            if first is None:
                return None
            out, empty = out + first[0], empty or first[1]
        return out, empty
    if op in (sre_c.MAX_REPEAT, sre_c.MIN_REPEAT):
        lo, _, sub = av
        first = _first_seq(list(sub))
        if first is None:
            return None
        return first[0], first[1] or lo == 0
    if op is sre_c.AT and av is sre_c.AT_END:
        return [], True
    return None


def ranges_disjoint(a: _Ranges, b: _Ranges) -> bool:
    """True when no code point lies in both range lists."""
    return all(ha < lb or hb < la for la, ha in a for lb, hb in b)


_PREFERRED = "a0x_-. "  # characters tried first for a class (plain, printable, no escape)
MAX_SAMPLES = 4


def samples(pattern: str) -> list[str]:
    """Up to ``MAX_SAMPLES`` short strings that (most likely) ``re.search``-match ``pattern``."""
    try:
        alts = parse_pattern(pattern, "#")
        out = [s for _, _, body in alts for s in _seq(body)]
    except (ConstraintError, RecursionError):
        return []
    return list(dict.fromkeys(out))[:MAX_SAMPLES]


def _seq(tokens) -> list[str]:
    out = [""]
    for op, av in tokens:
        parts = _one(op, av)
        if not parts:
            return []
        out = ["".join(p) for p in itertools.islice(itertools.product(out, parts), MAX_SAMPLES)]
    return out


def _one(op, av) -> list[str]:
    ranges = char_ranges(op, av, "#")
    if ranges is not None:
        for c in _PREFERRED:
            if any(lo <= ord(c) <= hi for lo, hi in ranges):
                return [c]
        cps = [max(lo, 0x21) for lo, hi in ranges if hi >= 0x21 and not 0xD800 <= max(lo, 0x21) <= 0xDFFF]
        return [chr(min(cps))] if cps else []
    if op in (sre_c.MAX_REPEAT, sre_c.MIN_REPEAT):
        lo, hi, sub = av
        inner = _seq(sub)
        counts = [lo] + ([lo + 1] if hi is sre_c.MAXREPEAT or hi > lo else [])
        return [s * n for n in counts for s in inner] if inner else ([""] if lo == 0 else [])
    if op is sre_c.SUBPATTERN:
        return _seq(av[-1])
    if op is sre_c.BRANCH:
        return [s for b in av[1] for s in _seq(b)][:MAX_SAMPLES]
    if op is sre_c.AT:
        return [""]
    return []
