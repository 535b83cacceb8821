"""A few short strings that match a pattern: candidate witnesses (member names an object must
have, ``names.resolve_some_key``). Callers check every candidate with ``re.search``; a pattern
the sampler cannot read gives no candidates."""

from __future__ import annotations

import itertools

from radixlm.constrained.errors import ConstraintError
from radixlm.constrained.pattern.chars import char_ranges, sre_c
from radixlm.constrained.pattern.ecma import parse_pattern

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
