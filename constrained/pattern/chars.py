"""Character classes of JSON Schema patterns: the decoded code points one parsed node matches
(ECMA semantics, kept to what Python's ``re``, which ``jsonschema`` validates with, agrees on) and
the regex over their JSON encoding."""

from __future__ import annotations

import array
import functools
import re
import sys

try:  # Python >= 3.11
    from re import _constants as sre_c
    from re import _parser as sre_parse
except ImportError:  # pragma: no cover - Python 3.10
    import sre_constants as sre_c  # type: ignore[no-redef]
    import sre_parse  # type: ignore[no-redef]

from radixlm.constrained.errors import ConstraintError

__all__ = ["FREE", "char_ranges", "escape_literal", "ranges_regex", "sre_c", "sre_parse"]

FREE = "FREE"  # token of one free character (unanchored ends); its argument: force plain
_CLASS_SPECIAL = set("\\]^-[")
_DIGIT = [(0x30, 0x39)]
_WORD = [(0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A)]
# Classes must hold under both ECMA-262 and Python's re (which jsonschema validates with): \s is
# the whitespace both agree on, \S \D \W exclude what either calls a space/digit/word character.
_SPACE = [(0x09, 0x0D), (0x20, 0x20), (0xA0, 0xA0), (0x1680, 0x1680), (0x2000, 0x200A),
          (0x2028, 0x2029), (0x202F, 0x202F), (0x205F, 0x205F), (0x3000, 0x3000)]
_ECMA_ONLY_SPACE = [(0xFEFF, 0xFEFF)]
_MAX_CP = 0x10FFFF


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
    # Merged (double complement): a repeated '&', '~' or '-' would read as a class operator.
    for lo, hi in _negate(_negate(ranges)):
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
        body = "".join(_char(a) + (_char(b) if b == a + 1 else "") if b <= a + 1
                       else f"{_char(a)}-{_char(b)}" for a, b in plain)
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


def _class_ranges(items: list, pointer: str, wide: bool = False) -> list[tuple[int, int]]:
    negate = bool(items) and items[0][0] is sre_c.NEGATE
    ranges: list[tuple[int, int]] = []
    for op, av in items[negate:]:
        if op is sre_c.LITERAL:
            ranges.append((av, av))
        elif op is sre_c.RANGE:
            ranges.append(av)
        elif op is sre_c.CATEGORY:  # under a negation: everything either engine could match
            ranges += _category(av, pointer, wide=negate != wide)
        else:
            raise ConstraintError(f"unsupported construct {op} in pattern", pointer, "pattern")
    return _negate(ranges) if negate else ranges


def _category(cat, pointer: str, wide: bool = False) -> list[tuple[int, int]]:
    r"""Code points of a ``\d``-like class that both ECMA-262 and Python's re (which jsonschema
    uses) match; with ``wide``, that either matches."""
    name = {sre_c.CATEGORY_DIGIT: "d", sre_c.CATEGORY_WORD: "w", sre_c.CATEGORY_SPACE: "s",
            sre_c.CATEGORY_NOT_DIGIT: "D", sre_c.CATEGORY_NOT_WORD: "W",
            sre_c.CATEGORY_NOT_SPACE: "S"}.get(cat)
    if name is None:
        raise ConstraintError(f"unsupported class {cat} in pattern", pointer, "pattern")
    if name in "dws":
        if not wide:
            return {"d": _DIGIT, "w": _WORD, "s": _SPACE}[name]
        return _python_class("\\" + name) + (_ECMA_ONLY_SPACE if name == "s" else [])
    ranges = _negate(_category(_POSITIVE[cat], pointer, not wide))
    if name == "W" and not wide:  # Unicode word characters fill hundreds of ranges
        return [(a, min(b, 0xFF)) for a, b in ranges if a <= 0xFF]  # Latin-1 only (a restriction)
    return ranges


_POSITIVE = {sre_c.CATEGORY_NOT_DIGIT: sre_c.CATEGORY_DIGIT, sre_c.CATEGORY_NOT_WORD: sre_c.CATEGORY_WORD,
             sre_c.CATEGORY_NOT_SPACE: sre_c.CATEGORY_SPACE}


@functools.cache
def _python_class(category: str) -> list[tuple[int, int]]:
    """The code points Python's ``re`` puts in ``category`` (Unicode-wide, unlike ECMA's)."""
    # Every code point in order, surrogates included: ~50 ms this way, ~110 ms with chr() per point
    # (without numpy, which a compile worker imports only for a schema whose multipleOf needs it).
    points = array.array("I", range(_MAX_CP + 1))
    every = points.tobytes().decode(f"utf-32-{sys.byteorder[0]}e", "surrogatepass")
    return [(m.start(), m.end() - 1) for m in re.finditer(category + "+", every)]


def warm_up() -> None:
    """Build the Unicode-wide class tables now (tens of ms, once per process) rather than inside
    the first compile whose pattern needs one (compile workers call it before their first job)."""
    for category in ("\\d", "\\w", "\\s"):
        _python_class(category)


def char_ranges(op, av, pointer: str, wide: bool = False) -> list[tuple[int, int]] | None:
    """Decoded code points one char-level node matches (None for other nodes): those both ECMA
    and Python's ``re`` match, or with ``wide`` those either one matches."""
    if op is sre_c.LITERAL:
        return [(av, av)]
    if op is sre_c.NOT_LITERAL:
        return _negate([(av, av)])
    if op is sre_c.ANY:  # ECMA '.' excludes line terminators, Python's '.' only the newline
        return _negate([(0x0A, 0x0A)] if wide else [(0x0A, 0x0A), (0x0D, 0x0D), (0x2028, 0x2029)])
    if op is sre_c.IN:
        return _class_ranges(av, pointer, wide)
    if op == FREE:
        return [(0, _MAX_CP)]
    return None
