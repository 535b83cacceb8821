"""Lexemes (regexes) of the constrained JSON scalars for one canonical schema node: numbers
(ranges, ``multipleOf``) and strings (lengths, ``pattern``, ``format``); ``null`` and booleans are
fixed (``lexemes``). Arrays (``arrays``) and objects (``objects``) are grammar structure instead."""

from __future__ import annotations

import json
import math
import re
from decimal import Decimal, localcontext

from radixlm.constrained.errors import ConstraintError
from radixlm.constrained.ir import builder as ir
from radixlm.constrained.json_schema import string_sets
from radixlm.constrained.json_schema.context import Context
from radixlm.constrained.json_schema.lexemes import STRING
from radixlm.constrained.pattern.bounds import narrow_to_length, within_length
from radixlm.constrained.pattern.chars import escape_literal, sre_parse
from radixlm.constrained.pattern.ecma import STRING_CHAR, emit_tokens, parse_pattern, search_tokens
from radixlm.constrained.pattern.formats import FORMAT_REGEXES
from radixlm.constrained.pattern.int_range import (
    BOUND_CONTEXT,
    INTEGER,
    MAX_BOUND_DIGITS,
    integer_range_regex,
    number_range_regex,
    significant,
)
from radixlm.constrained.pattern.multiple_of import multiples_regex

_FLOAT_SAFE = 2**52  # multipleOf a float: multiples past this are not generated
MAX_STRING_LENGTH = 100_000  # minLength/maxLength past this raise (a lexer state per count)


def number(t: str, flat: dict, pointer: str) -> str | None:
    """The regex of the ``integer`` or ``number`` instances (``t``) of a canonical node."""
    divisors = flat.get("multipleOf", [])
    for d in divisors:
        if isinstance(d, bool) or not isinstance(d, (int, float)) or not math.isfinite(d) or d <= 0:
            raise ConstraintError(f"multipleOf must be a number > 0, got {d!r}", pointer, "multipleOf")
    for key in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
        v = flat.get(key)
        if isinstance(v, int) and len(str(abs(v))) > MAX_BOUND_DIGITS:
            raise ConstraintError(f"bounds of more than {MAX_BOUND_DIGITS} digits are not supported",
                                  pointer, key)
    lo, lo_x, hi, hi_x = _bounds(flat)
    if divisors:
        found = multiples_regex(divisors, t == "integer", lo, lo_x, hi, hi_x)
        beyond = (lo is not None and lo > _FLOAT_SAFE) or (hi is not None and hi < -_FLOAT_SAFE)
        if found is None and beyond and any(isinstance(d, float) for d in divisors):
            raise ConstraintError("multipleOf a fraction is generated only within ±2**52; the bounds "
                                  "leave nothing there", pointer, "multipleOf")
        return found
    if t == "number":
        return number_range_regex(lo, lo_x, hi, hi_x)
    if lo is None and hi is None:
        return INTEGER
    return integer_range_regex(*integer_bounds(flat))


def integer_bounds(flat: dict) -> tuple[int | None, int | None]:
    """The least and greatest integer a canonical node's bounds allow (None: unbounded)."""
    lo, lo_x, hi, hi_x = _bounds(flat)
    ilo = None if lo is None else (math.floor(lo) + 1 if lo_x else math.ceil(lo))
    ihi = None if hi is None else (math.ceil(hi) - 1 if hi_x else math.floor(hi))
    with localcontext(BOUND_CONTEXT):  # 17 significant digits, inward
        ilo = None if ilo is None else int(significant(Decimal(ilo), lower=True))
        ihi = None if ihi is None else int(significant(Decimal(ihi), lower=False))
    return ilo, ihi


def _bounds(flat: dict) -> tuple:
    """(lower, exclusive?, upper, exclusive?) of a canonical node: the tighter of each pair."""
    lo, lo_x = flat.get("minimum"), False
    hi, hi_x = flat.get("maximum"), False
    if "exclusiveMinimum" in flat and (lo is None or flat["exclusiveMinimum"] >= lo):
        lo, lo_x = flat["exclusiveMinimum"], True
    if "exclusiveMaximum" in flat and (hi is None or flat["exclusiveMaximum"] <= hi):
        hi, hi_x = flat["exclusiveMaximum"], True
    return lo, lo_x, hi, hi_x


def string(ctx: Context, flat: dict, pointer: str) -> str | ir.Node | None:
    """The regex of the string instances of a canonical node (quotes included; None: none)."""
    lo, hi = flat.get("minLength", 0), flat.get("maxLength")
    if hi is not None and hi < lo:
        return None
    constraints = [("pattern", p) for p in flat.get("_patterns", [])]
    constraints += [("format", f) for f in flat.get("_formats", [])]
    if len(constraints) > 1:
        lit = anchored_literal(dict(flat, type=["string"]))
        if lit is not None:  # ^lit$ with other patterns/formats: lit itself, checked exactly
            ok = lo <= len(lit) and (hi is None or len(lit) <= hi) and ctx.is_valid(flat["_sources"], lit)
            return escape_literal(json.dumps(lit)) if ok else None
        # Several patterns/formats: their intersection, one lexeme of the lexeme algebra (exact).
        return string_sets.string_lexeme(ctx, string_sets.conjunction(flat, pointer), pointer,
                                      string_sets.keyword_of(flat))
    if not constraints:
        if lo > MAX_STRING_LENGTH:
            raise ConstraintError(f"minLength above {MAX_STRING_LENGTH} is not supported", pointer, "minLength")
        if hi is not None and hi > MAX_STRING_LENGTH:
            hi = MAX_STRING_LENGTH  # no longer string is generated (a restriction, like maxItems)
        if not lo and hi is None:
            return STRING
        # Each STRING_CHAR is one code point (surrogate escapes are left out), so counting
        # them is exact, escapes included.
        return f'"{STRING_CHAR}{{{lo},{"" if hi is None else hi}}}"'
    kind, value = constraints[0]
    key = (kind, value, lo, hi)
    found = _BODIES.get(key)
    if found is None:  # errors are raised (never filed) with this node's pointer
        found = _pattern_body(kind, value, lo, hi, pointer)
        if len(_BODIES) >= MAX_BODIES:
            _BODIES.clear()
        _BODIES[key] = found
    body, keyword = found
    if keyword:
        ctx.unsupported(pointer, keyword, f"cannot be met by narrowing the {kind}'s repetitions")
    return f'"({body})"'


# A pattern or format with its length bounds -> (its body, the keyword narrowing could not meet).
# Schemas repeat them (a ``date-time`` or an id pattern at every path), and narrowing one to a
# ``maxLength`` measures many automata: tens of milliseconds each. The pointer only names errors.
_BODIES: dict[tuple, tuple[str, str]] = {}
MAX_BODIES = 4096


def _pattern_body(kind: str, value: str, lo: int, hi: int | None, pointer: str) -> tuple[str, str]:
    """The regex body of a pattern or format narrowed to lengths [lo, hi], and the keyword that
    could not be met (empty when none: the body is then the narrowed one)."""
    if kind == "format":  # formats are full-match regexes in a syntax sre_parse reads too
        body, alts = FORMAT_REGEXES[value], [(True, True, list(sre_parse.parse(FORMAT_REGEXES[value])))]
    else:
        alts = parse_pattern(value, pointer)
        body = emit_tokens(search_tokens(alts), pointer)
    if (lo or hi is not None) and not within_length(alts, lo, hi):
        # Narrow the pattern's repetitions until every match has an allowed length.
        tokens, keyword = narrow_to_length(alts, lo, hi, pointer)
        if tokens is None:
            return body, keyword
        body = emit_tokens(tokens, pointer)
    return body, ""


def anchored_literal(flat: dict) -> str | None:
    """``lit`` when the node only admits strings matching ``^lit$`` (Python's ``$`` also matches
    before a final newline: the caller checks ``lit + "\\n"`` too)."""
    if flat.get("type") != ["string"]:
        return None
    for pattern in flat.get("_patterns", []):
        m = re.fullmatch(r"\^([A-Za-z0-9_ :/-]*)\$", pattern)
        if m is not None:
            return m.group(1)
    return None
