"""Translate a JSON Schema ``pattern`` (an ECMA-262 regex, search semantics) into a regex over
the JSON-encoded string body that outlines-core can compile.

The pattern is parsed with Python's own regex parser; each character class is rewritten so that
it matches the JSON encoding of the characters it allows (``"`` as ``\\"``, ``\\`` as ``\\\\``;
control characters are dropped, an under-approximation). Lookarounds, backreferences and
anchors in the middle of a pattern raise ``ConstraintError``.
"""

from __future__ import annotations

import re

try:  # Python >= 3.11
    from re import _constants as sre_c
    from re import _parser as sre_parse
except ImportError:  # pragma: no cover - Python 3.10
    import sre_constants as sre_c  # type: ignore[no-redef]
    import sre_parse  # type: ignore[no-redef]

from .errors import ConstraintError

# One JSON string character that needs no escape, or a two-character escape of " or \.
STRING_CHAR = r'([^"\\\x00-\x1f]|\\["\\/bfnrt]|\\u([0-9a-cA-CefEF][0-9a-fA-F]{3}|[dD][0-7][0-9a-fA-F]{2}))'
PLAIN_CHAR = r'[^"\\\x00-\x1f]'
_CLASS_SPECIAL = set("\\]^-[")
_DIGIT = [(0x30, 0x39)]
_WORD = [(0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A)]
_SPACE = [(0x20, 0x20), (0xA0, 0xA0), (0xFEFF, 0xFEFF), (0x2028, 0x2029)]
_MAX_CP = 0x10FFFF
MAX_PATTERN_REPEAT = 64  # upper bound of counted repetitions inside patterns


_META = set("\\.+*?()|[]{}^$#&-~")


def escape_literal(text: str) -> str:
    """Escape ``text`` for outlines-core's (Rust) regex syntax: meta characters only."""
    out = []
    for c in text:
        if c in _META:
            out.append("\\" + c)
        elif ord(c) < 0x20 or ord(c) == 0x7F:
            out.append(f"\\x{ord(c):02x}")
        else:
            out.append(c)
    return "".join(out)


def _negate(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out, nxt = [], 0
    for lo, hi in sorted(ranges):
        if lo > nxt:
            out.append((nxt, lo - 1))
        nxt = max(nxt, hi + 1)
    if nxt <= _MAX_CP:
        out.append((nxt, _MAX_CP))
    return out


def _char(cp: int) -> str:
    c = chr(cp)
    if c in _CLASS_SPECIAL:
        return "\\" + c
    if cp < 0x20 or cp == 0x7F or 0xD800 <= cp <= 0xDFFF:
        return f"\\x{{{cp:x}}}" if cp > 0xFF else f"\\x{cp:02x}"
    return c


def ranges_regex(ranges: list[tuple[int, int]]) -> str | None:
    """Regex matching the JSON encoding of one code point from ``ranges`` (None if empty)."""
    alts = []
    plain = []
    for lo, hi in sorted(ranges):
        for special, enc in ((0x22, r"\\\""), (0x5C, r"\\\\")):
            if lo <= special <= hi:
                alts.append(enc)
        # Drop controls, " and \ (handled above) and surrogates from the plain class.
        for a, b in _split(max(lo, 0x20), hi, (0x22, 0x5C, 0x7F)):
            for c, d in _split(a, b, ()):
                if c <= 0xDFFF and d >= 0xD800:
                    if c < 0xD800:
                        plain.append((c, 0xD7FF))
                    if d > 0xDFFF:
                        plain.append((0xE000, d))
                else:
                    plain.append((c, d))
    if len(plain) == 1 and not alts and plain[0][0] == plain[0][1] and plain[0][0] < 0x7F:
        return escape_literal(chr(plain[0][0]))
    if plain:
        body = "".join(_char(a) if a == b else f"{_char(a)}-{_char(b)}" for a, b in plain)
        alts.insert(0, f"[{body}]")
    if not alts:
        return None
    return alts[0] if len(alts) == 1 else "(" + "|".join(alts) + ")"


def _split(lo: int, hi: int, holes: tuple[int, ...]) -> list[tuple[int, int]]:
    out, start = [], lo
    for h in holes:
        if start <= h <= hi:
            if start < h:
                out.append((start, h - 1))
            start = h + 1
    if start <= hi:
        out.append((start, hi))
    return out


def _class_ranges(items: list, pointer: str) -> list[tuple[int, int]]:
    ranges: list[tuple[int, int]] = []
    negate = False
    for op, av in items:
        if op is sre_c.NEGATE:
            negate = True
        elif op is sre_c.LITERAL:
            ranges.append((av, av))
        elif op is sre_c.RANGE:
            ranges.append(av)
        elif op is sre_c.CATEGORY:
            ranges += _category(av, pointer)
        else:
            raise ConstraintError(f"unsupported construct {op} in pattern", pointer, "pattern")
    return _negate(ranges) if negate else ranges


def _category(cat, pointer: str) -> list[tuple[int, int]]:
    table = {
        sre_c.CATEGORY_DIGIT: _DIGIT, sre_c.CATEGORY_NOT_DIGIT: _negate(_DIGIT),
        sre_c.CATEGORY_WORD: _WORD, sre_c.CATEGORY_NOT_WORD: _negate(_WORD),
        sre_c.CATEGORY_SPACE: _SPACE, sre_c.CATEGORY_NOT_SPACE: _negate(_SPACE + [(0, 0x1F)]),
    }
    if cat not in table:
        raise ConstraintError(f"unsupported class {cat} in pattern", pointer, "pattern")
    return table[cat]


def _emit(tokens, pointer: str, plain: bool = False) -> str:
    return "".join(_emit_one(op, av, pointer, plain) for op, av in tokens)


def _emit_one(op, av, pointer: str, plain: bool = False) -> str:
    if op is sre_c.LITERAL:
        return _need(ranges_regex([(av, av)]), pointer)
    if op is sre_c.NOT_LITERAL:
        return _need(_chars(_negate([(av, av)]), plain), pointer)
    if op is sre_c.ANY:  # ECMA '.' excludes line terminators; controls are dropped anyway
        return _need(_chars(_negate([(0x0A, 0x0A), (0x0D, 0x0D), (0x2028, 0x2029)]), plain), pointer)
    if op is sre_c.IN:
        return _need(_chars(_class_ranges(av, pointer), plain), pointer)
    if op in (sre_c.MAX_REPEAT, sre_c.MIN_REPEAT, getattr(sre_c, "POSSESSIVE_REPEAT", None)):
        lo, hi, sub = av
        if hi is sre_c.MAXREPEAT:
            return f"({_emit(sub, pointer)}){{{lo},}}"
        # Counted copies of escape alternatives (\" and \\) blow up the automaton: inside a
        # counted repetition, characters that need escaping are dropped (a restriction), and
        # large upper bounds are lowered (never below the lower bound): still sound.
        hi = max(lo, min(hi, MAX_PATTERN_REPEAT))
        return f"({_emit(sub, pointer, plain=True)}){{{lo},{hi}}}"
    if op is sre_c.SUBPATTERN:
        return "(" + _emit(av[-1], pointer, plain) + ")"
    if op is sre_c.BRANCH:
        return "(" + "|".join(_emit(b, pointer, plain) for b in av[1]) + ")"
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


def pattern_to_regex(pattern: str, pointer: str, char: str = STRING_CHAR) -> str:
    """Body regex (no quotes) of JSON strings whose decoded value ``re.search``-matches ``pattern``.

    ``char`` is the regex of one free character used for the unanchored ends.
    """
    try:
        tokens = list(sre_parse.parse(pattern))
    except re.error as e:
        raise ConstraintError(f"invalid pattern {pattern!r}: {e}", pointer, "pattern") from None
    anchored_start = bool(tokens) and tokens[0] == (sre_c.AT, sre_c.AT_BEGINNING)
    anchored_end = bool(tokens) and tokens[-1][0] is sre_c.AT and tokens[-1][1] in (
        sre_c.AT_END, sre_c.AT_END_STRING)
    if anchored_start:
        tokens = tokens[1:]
    if anchored_end and tokens:
        tokens = tokens[:-1]
    body = _emit(tokens, pointer)
    prefix = "" if anchored_start else f"({char})*"
    suffix = "" if anchored_end else f"({char})*"
    return f"{prefix}({body}){suffix}"


def is_universal(pattern: str) -> bool:
    """True for patterns every string matches (``.*``, ``^.*$``, empty)."""
    return pattern in ("", ".*", "^.*", "^.*$", ".*$", "^", "$")
