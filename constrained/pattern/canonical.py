"""Exact regexes over the *canonical* JSON encoding of strings, for the lexeme algebra
(``&``, ``~``) that intersections and negations of string schemas compile to.

A complement is only sound when the regex it complements holds *every* encoding of every string it
stands for. JSON has many encodings of one string (``a`` or ``\\u0061``, ``/`` or ``\\/``), so the
algebra works over one encoding per string, the one ``json.dumps(..., ensure_ascii=False)`` writes:
plain characters as themselves, ``\\"`` and ``\\\\``, ``\\b \\f \\n \\r \\t``, other control
characters as ``\\u00xx`` (lower-case hex), no surrogate escapes. Over that set encoding is a
bijection, so ``~R`` (intersected with ``CANON_CHAR*``) is exactly the complement of ``R``.

Patterns are translated exactly, characters classes aside: ``wide=False`` gives the strings both
ECMA-262 and Python's ``re`` (which ``jsonschema`` uses) match (an under-approximation, for a
pattern that must hold), ``wide=True`` those either matches (an over-approximation, for a pattern
under an odd number of ``not``\\ s). ``$`` ends the string (ECMA), or with ``wide`` also comes
before a final newline (Python).
"""

from __future__ import annotations

import json

from radixlm.constrained.errors import ConstraintError
from radixlm.constrained.pattern.chars import _negate, _split, char_ranges, escape_literal, sre_c
from radixlm.constrained.pattern.ecma import parse_pattern

_SHORT = {0x08: "b", 0x09: "t", 0x0A: "n", 0x0C: "f", 0x0D: "r"}
# One character in its canonical encoding (surrogates are never escaped, so astral characters
# appear raw: one code point, as Python counts them).
CANON_CHAR = r'([^"\\\x00-\x1f]|\\["\\bfnrt]|\\u00(0[0-7bef]|1[0-9a-f]))'
NOTHING = "[^\\x00-\\x{10ffff}]"  # a regex that matches no text
MAX_COUNT = 10_000  # counted repetitions past this raise (each count is lexer state)
_CLASS_SPECIAL = set("\\]^-[&~")


def canon_text(text: str) -> str:
    """Regex matching exactly the canonical encoding of ``text`` (no quotes)."""
    return escape_literal(json.dumps(text, ensure_ascii=False)[1:-1])


def canon_class(ranges: list[tuple[int, int]]) -> str | None:
    """Regex of one character from ``ranges`` in its canonical encoding (None when empty)."""
    merged = _negate(_negate(ranges))
    if len(merged) == 1 and merged[0][0] == merged[0][1] and 0x20 <= merged[0][0] < 0x7F and merged[0][0] not in (0x22, 0x5C):
        return escape_literal(chr(merged[0][0]))  # one plain character (completion hints read these runs)
    plain = []
    for lo, hi in merged:
        for a, b in _split(max(lo, 0x20), hi, (0x22, 0x5C)):
            for c, d in ((a, min(b, 0xD7FF)), (max(a, 0xE000), b)):  # surrogates are not characters
                if c <= d:
                    plain.append((c, d))
    alts = ["[" + "".join(_cp(a) if a == b else f"{_cp(a)}-{_cp(b)}" for a, b in plain) + "]"] if plain else []
    escaped = {cp for lo, hi in merged for cp in range(lo, min(hi, 0x5C) + 1) if cp < 0x20 or cp in (0x22, 0x5C)}
    alts += [e for cp, e in ((0x22, r'\\"'), (0x5C, r"\\\\")) if cp in escaped]
    alts += [f"\\\\{e}" for cp, e in sorted(_SHORT.items()) if cp in escaped]
    for high in (0, 1):  # \u000x and \u001x
        lows = [cp & 0xF for cp in range(high * 16, high * 16 + 16) if cp not in _SHORT and cp in escaped]
        if lows:
            alts.append(f"\\\\u00{high}[{''.join(f'{x:x}' for x in lows)}]")
    if not alts:
        return None
    return alts[0] if len(alts) == 1 else "(" + "|".join(alts) + ")"


def _cp(cp: int) -> str:
    c = chr(cp)
    if c in _CLASS_SPECIAL:
        return "\\" + c
    return f"\\x{{{cp:x}}}" if cp > 0x7E or cp < 0x21 else c


def pattern_regex(pattern: str, pointer: str, wide: bool) -> str:
    """Regex over canonical bodies of the strings that ``re.search``-match ``pattern`` (see the
    module docstring for ``wide``). Raises ``ConstraintError`` for constructs it cannot translate
    exactly (lookarounds, backreferences, flags, ``\\b``, anchors inside the pattern or ``\\Z``,
    which ECMA reads as a letter)."""
    alts = []
    for start, end, body in parse_pattern(pattern, pointer):
        rx = _emit(body, pointer, wide)
        head = "" if start else f"{CANON_CHAR}*"
        tail = (r"(\\n)?" if wide else "") if end else f"{CANON_CHAR}*"
        alts.append(f"{head}({rx}){tail}")
    if "\\Z" in pattern.replace("\\\\", ""):
        raise ConstraintError(f"\\Z in pattern {pattern!r} is not supported", pointer, "pattern")
    return alts[0] if len(alts) == 1 else "(" + "|".join(f"({a})" for a in alts) + ")"


def narrowed_regex(pattern: str, lo: int, hi: int | None, pointer: str) -> str | None:
    """Regex over canonical bodies of a subset of the strings that ``re.search``-match
    ``pattern`` (read as with ``wide=False``), all of ``lo``..``hi`` characters: the pattern
    when every match already fits, else its repetitions narrowed (``bounds.narrow_to_length``);
    None when no narrowing fits. Cheaper for the matcher than a pattern intersected with a long
    counted length."""
    from radixlm.constrained.pattern.bounds import narrow_to_length, within_length

    alts = parse_pattern(pattern, pointer)
    if within_length(alts, lo, hi):
        return pattern_regex(pattern, pointer, False)
    tokens, _ = narrow_to_length(alts, lo, hi, pointer)
    return None if tokens is None else _emit(tokens, pointer, False)


def _emit(tokens, pointer: str, wide: bool) -> str:
    return "".join(_emit_one(op, av, pointer, wide) for op, av in tokens)


def _emit_one(op, av, pointer: str, wide: bool) -> str:
    ranges = char_ranges(op, av, pointer, wide)
    if ranges is not None:
        rx = canon_class(ranges)
        return rx if rx is not None else NOTHING
    if op in (sre_c.MAX_REPEAT, sre_c.MIN_REPEAT):  # greediness does not change what matches
        lo, hi, sub = av
        if max(lo, 0 if hi is sre_c.MAXREPEAT else hi) > MAX_COUNT:
            raise ConstraintError(f"counted repetitions above {MAX_COUNT} are not supported", pointer, "pattern")
        count = f"{{{lo},}}" if hi is sre_c.MAXREPEAT else f"{{{lo},{hi}}}"
        return f"({_emit(sub, pointer, wide)}){count}"
    if op is sre_c.SUBPATTERN:
        if av[1] or av[2]:
            raise ConstraintError("inline flags in a pattern are not supported", pointer, "pattern")
        return "(" + _emit(av[-1], pointer, wide) + ")"
    if op is sre_c.BRANCH:
        return "(" + "|".join(_emit(b, pointer, wide) for b in av[1]) + ")"
    raise ConstraintError(f"unsupported construct {str(op).lower()} in pattern", pointer, "pattern")
