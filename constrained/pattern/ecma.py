r"""An ECMA-262 ``pattern`` (search semantics) as a regex over the JSON-encoded string body, and
the character classes of a parsed pattern.

Translate a JSON Schema ``pattern`` (an ECMA-262 regex, search semantics) into a regex over
the JSON-encoded string body that outlines-core can compile.

The pattern is parsed with Python's own regex parser; each character class is rewritten so that
it matches the JSON encoding of the characters it allows (``"`` as ``\"``, ``\`` as ``\\``;
control characters are dropped, an under-approximation). Lookarounds, backreferences,
possessive repeats and anchors in the middle of a pattern raise ``ConstraintError``; anchors may
start/end the pattern or each branch of a top-level alternation.

Character classes: Character classes of JSON Schema patterns: the decoded code points one parsed node matches
(ECMA semantics, kept to what Python's ``re``, which ``jsonschema`` validates with, agrees on) and
the regex over their JSON encoding.
"""

from __future__ import annotations

import array
import functools
import re
import sys

from radixlm.constrained.errors import ConstraintError
from radixlm.constrained.pattern.regex_text import escape_literal

try:  # Python >= 3.11
    from re import _constants as sre_c
    from re import _parser as sre_parse
except ImportError:  # pragma: no cover - Python 3.10
    import sre_constants as sre_c  # type: ignore[no-redef]
    import sre_parse  # type: ignore[no-redef]


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
