r"""Lexemes (regexes) of the constrained JSON scalars for one canonical schema node: numbers
(ranges, ``multipleOf``) and strings (lengths, ``pattern``, ``format``, and the exact string sets
of the lexeme algebra); ``null`` and booleans are fixed (``normalize.NULL``, ``BOOLEAN``).
Arrays (``arrays``) and objects (``objects``) are grammar structure instead.

String sets: The strings a schema node accepts as a boolean expression, compiled exactly to one lexeme with
llguidance's lexeme algebra (``&`` intersection, ``~`` complement).

This is how ``not`` of string schemas, ``pattern`` next to other patterns or formats, and string
exclusions next to patterns are enforced. Expressions are tuples over the *decoded* string:

- ``("pattern", p, pointer)``: ``re.search(p, s)``; ``("format", name, pointer)``;
- ``("length", lo, hi, pointer)`` (``hi`` None: unbounded); ``("words", (w, ...))``: exactly these;
- ``("and", (e, ...))``, ``("or", (e, ...))``, ``("not", e)``; ``TRUE`` and ``FALSE``.

The lexeme works over the canonical JSON encoding (``pattern.bounds``: one encoding per
string), where complementing a regex complements the set of strings. Atoms under an even number
of ``not``\ s are under-approximated (a pattern's character classes as both ECMA and Python read
them; formats by our format regexes), under an odd number over-approximated (either reading;
formats there raise), so the whole stays sound.

Lexeme budget: Whether llguidance can carry a lexeme of the lexeme algebra (``&``, ``~``) within its budget.

llguidance checks that every lexeme, and every derivative of one as text arrives, can still match
(an emptiness check over the regex algebra, limited by "lexer fuel"). Plain regexes pass at once;
an intersection of many patterns that only long strings satisfy can exhaust the fuel, and the
grammar then fails to build (or a mask fails mid-request). The front end builds each such lexeme
alone, with a share of the engine's fuel, and computes its first two masks, so a lexeme that does
not fit is a ``ConstraintError`` with its schema pointer rather than a failure in the core.
"""

from __future__ import annotations

import functools
import json
import math
from decimal import Decimal, localcontext

from radixlm.constrained.errors import ConstraintError
from radixlm.constrained.ir import builder as ir
from radixlm.constrained.json_schema.normalize import STRING, Context, anchored_literal, exact_types, merge
from radixlm.constrained.pattern.bounds import (
    CANON_CHAR,
    NOTHING,
    canon_text,
    narrow_to_length,
    narrowed_regex,
    pattern_regex,
    within_length,
)
from radixlm.constrained.pattern.ecma import STRING_CHAR, emit_tokens, parse_pattern, search_tokens, sre_parse
from radixlm.constrained.pattern.formats import FORMAT_REGEXES
from radixlm.constrained.pattern.numbers import (
    BOUND_CONTEXT,
    INTEGER,
    MAX_BOUND_DIGITS,
    integer_range_regex,
    multiples_regex,
    number_range_regex,
    significant,
)
from radixlm.constrained.pattern.regex_text import escape_literal

FUEL = 1_000_000  # a quarter of the engine's initial_lexer_fuel (probe.MATCHER_LIMITS), shared by all lexemes
_HEADER = '%llguidance {"no_forcing": true}\n'


@functools.cache
def _byte_tokenizer():
    """An llguidance tokenizer of the 256 bytes (and an end token): masks over it are cheap."""
    from radixlm.constrained.vocab import TokenizerVocab

    return TokenizerVocab.from_token_bytes([bytes([i]) for i in range(256)] + [b"<eos>"], [256]).llg


def budget_check(node: ir.LexOp) -> str:
    """``ok``, ``empty`` (llguidance proved that no string matches ``node``, a JSON string
    lexeme) or ``costly`` (it cannot build ``node`` within ``FUEL``, or compute the masks before
    and after its opening quote)."""
    import llguidance

    limits = llguidance.LLParserLimits(initial_lexer_fuel=FUEL, verbose_errors=False)
    lark = llguidance.LLMatcher.grammar_from_lark(_HEADER + ir.Grammar(node).to_lark())
    matcher = llguidance.LLMatcher(_byte_tokenizer(), lark, log_level=0, limits=limits)
    if matcher.is_error():
        return "costly"
    mask = matcher.compute_bitmask()
    if not mask[0x22 // 8] >> (0x22 % 8) & 1:  # no opening quote (the matcher stops): no string matches
        return "empty" if "NoExtension" in matcher.get_error() or not matcher.is_error() else "costly"
    matcher.consume_token(0x22)
    matcher.compute_bitmask()
    return "costly" if matcher.is_error() else "ok"


TRUE: tuple = ("and", ())
FALSE: tuple = ("or", ())
MAX_LENGTH = 100_000  # as scalars.MAX_STRING_LENGTH (a lexer state per count)


def node_expr(ctx: Context, flat: dict, pointer: str, refs: tuple) -> tuple | None:
    """The strings ``flat`` (a canonical node) accepts, exactly; None when some keyword that
    constrains strings is beyond the algebra (a pending ``not``)."""
    if "string" not in exact_types(flat):
        return FALSE
    if "enum" in flat:  # the values are checked against the raw nodes: exact
        return ("words", tuple(v for v in flat["enum"] if isinstance(v, str) and ctx.is_valid(flat["_sources"], v)))
    if flat.get("_nots"):
        return None
    for key in ("anyOf", "oneOf"):
        if key in flat:
            return _branches(ctx, flat, key, pointer, refs)
    return conjunction(flat, pointer)


def conjunction(flat: dict, pointer: str) -> tuple:
    """The string keywords of a node without ``anyOf``/``oneOf``/``enum``, as one ``and``."""
    parts: list[tuple] = []
    lo, hi = flat.get("minLength", 0), flat.get("maxLength")
    if lo or hi is not None:
        parts.append(("length", lo, hi, pointer))
    parts += [("pattern", p, pointer) for p in flat.get("_patterns", [])]
    parts += [("format", f, pointer) for f in flat.get("_formats", [])]
    parts += list(flat.get("_str_exprs", []))
    words = tuple(v for p, v in flat.get("_not_values", []) if isinstance(v, str))
    if words:
        parts.append(("not", ("words", words)))
    return simplify(("and", tuple(parts)))


def _branches(ctx: Context, flat: dict, key: str, pointer: str, refs: tuple) -> tuple | None:
    rest = {k: v for k, v in flat.items() if k != key}
    exprs = []
    for i, sub in enumerate(flat[key]):
        sub_flat, sub_refs = ctx.flatten(sub, f"{pointer}/{key}/{i}", refs)
        e = FALSE if sub_flat is None else node_expr(ctx, merge(rest, sub_flat, pointer), pointer, sub_refs)
        if e is None:
            return None
        exprs.append(e)
    if key == "anyOf":
        return simplify(("or", tuple(exprs)))
    # oneOf: exactly one branch holds
    return simplify(("or", tuple(("and", (e,) + tuple(("not", o) for j, o in enumerate(exprs) if j != i))
                                 for i, e in enumerate(exprs))))


def simplify(e: tuple) -> tuple:
    """``e`` with nested ``and``/``or`` flattened, constants folded and ``not not`` removed."""
    op = e[0]
    if op == "not":  # pushed down to the atoms (De Morgan): complements of atoms only
        inner = simplify(e[1])
        if inner[0] == "not":
            return inner[1]
        if inner[0] in ("and", "or"):
            return simplify(("or" if inner[0] == "and" else "and", tuple(("not", p) for p in inner[1])))
        return ("not", inner)
    if op == "words":
        return ("words", tuple(dict.fromkeys(e[1]))) if e[1] else FALSE
    if op not in ("and", "or"):
        return e
    unit, zero = (TRUE, FALSE) if op == "and" else (FALSE, TRUE)
    out: list[tuple] = []
    for part in (simplify(p) for p in e[1]):
        if part == zero:
            return zero
        for q in part[1] if part[0] == op else (part,):
            if q != unit and _key(q) not in {_key(x) for x in out}:
                out.append(q)
    keys = {_key(q) for q in out}
    if any(q[0] == "not" and _key(q[1]) in keys for q in out):
        return zero  # x and not x (x or not x): a subset of x never meets a superset's complement
    return out[0] if len(out) == 1 else (op, tuple(out))


def _key(e: tuple) -> tuple:
    """``e`` without the pointers (which only say where an atom came from)."""
    if e[0] in ("pattern", "format"):
        return e[:2]
    if e[0] == "length":
        return e[:3]
    if e[0] in ("and", "or"):
        return (e[0], tuple(_key(p) for p in e[1]))
    return ("not", _key(e[1])) if e[0] == "not" else e


def check(e: tuple) -> None:
    """Raise ``ConstraintError`` when ``e`` cannot be compiled where it must hold (a node that
    negates it later checks its own negation)."""
    emit(e, False)


def emit(e: tuple, wide: bool) -> str | ir.LexOp:
    """Regex (str) or ``LexOp`` over canonical bodies: the strings of ``e`` (``wide``: a superset
    for a negated position, else a subset)."""
    op = e[0]
    if op == "pattern":
        return pattern_regex(e[1], e[2], wide)
    if op == "format":
        if wide:  # our format regexes only under-approximate
            raise ConstraintError(f"not of format {e[1]!r} is not supported", e[2], "format")
        return FORMAT_REGEXES[e[1]]
    if op == "length":
        lo, hi = e[1], e[2]
        if max(lo, hi or 0) > MAX_LENGTH:
            raise ConstraintError(f"string length bounds above {MAX_LENGTH} are not supported", e[3],
                                  "maxLength" if (hi or 0) > MAX_LENGTH else "minLength")
        return f"{CANON_CHAR}{{{lo},{'' if hi is None else hi}}}"
    if op == "words":
        return "(" + "|".join(f"({canon_text(w)})" for w in e[1]) + ")" if e[1] else NOTHING
    if op == "not":
        return ir.LexOp("not", (emit(e[1], not wide),))
    items = _absorb_length(e[1]) if op == "and" and not wide else e[1]
    parts = tuple(p[1] if p[0] == "regex" else emit(p, wide) for p in items)
    if not parts:
        return f"{CANON_CHAR}*" if op == "and" else NOTHING
    if op == "or" and all(isinstance(p, str) for p in parts):
        return "(" + "|".join(f"({p})" for p in parts) + ")"
    return parts[0] if len(parts) == 1 else ir.LexOp(op, parts)


def keyword_of(flat: dict) -> str:
    """The keyword an error about a node's string lexeme names: the first of ``pattern``,
    ``allOf``, ``anyOf``, ``not`` the node itself has."""
    node = flat["_sources"][0] if flat.get("_sources") else {}
    return next((k for k in ("pattern", "allOf", "anyOf", "not") if isinstance(node, dict) and k in node), "pattern")


def _absorb_length(items: tuple) -> tuple:
    """An ``and``'s items with its length bound folded into one of its patterns (narrowed so
    every match has an allowed length, ``pattern.bounds.narrowed_regex``): a subset, so sound where
    it must hold, and far cheaper for llguidance than a long counted length next to patterns."""
    lengths = [p for p in items if p[0] == "length"]
    if len(lengths) != 1:
        return items
    _, lo, hi, _ = lengths[0]
    for i, p in enumerate(items):
        if p[0] == "pattern":
            try:
                rx = narrowed_regex(p[1], lo, hi, p[2])
            except ConstraintError:
                rx = None
            if rx is not None:
                return tuple(("regex", rx) if j == i else q for j, q in enumerate(items) if q[0] != "length")
    return items


def string_lexeme(ctx: Context, e: tuple, pointer: str, keyword: str = "pattern") -> ir.Node | None:
    """The JSON string lexeme (quotes included) of the strings of ``e``, in canonical encoding;
    None when ``e`` is ``FALSE`` or the matcher proves it empty (``budget_check``). A plain
    regex when no ``&``/``~`` is needed. A lexeme too costly for the matcher raises (strict) or
    is relaxed to any string."""
    e = simplify(e)
    if e == FALSE:
        return None
    rx = emit(e, False)
    if isinstance(rx, str):  # every atom is over canonical characters already
        return ir.Lex(f'"({rx})"')
    parts = rx.parts if rx.op == "and" else (rx,)
    if not any(isinstance(p, str) for p in parts):  # complements must stay inside canonical strings
        parts = (f"{CANON_CHAR}*",) + parts
    node = ir.LexOp("seq", ('"', ir.LexOp("and", parts, pointer), '"'), pointer)
    verdict = budget_check(node)
    if verdict == "empty":
        return None
    if verdict == "costly":
        ctx.unsupported(pointer, keyword, "combines string constraints into more than the matcher's lexer "
                        "can check (llguidance's lexer fuel runs out)")
        return ir.Lex(STRING)
    return node


def negated(e: tuple) -> tuple:
    """``not e``, simplified."""
    return simplify(("not", e))


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
        return string_lexeme(ctx, conjunction(flat, pointer), pointer,
                                      keyword_of(flat))
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
