"""The strings a schema node accepts as a boolean expression, compiled exactly to one lexeme with
llguidance's lexeme algebra (``&`` intersection, ``~`` complement).

This is how ``not`` of string schemas, ``pattern`` next to other patterns or formats, and string
exclusions next to patterns are enforced. Expressions are tuples over the *decoded* string:

- ``("pattern", p, pointer)``: ``re.search(p, s)``; ``("format", name, pointer)``;
- ``("length", lo, hi, pointer)`` (``hi`` None: unbounded); ``("words", (w, ...))``: exactly these;
- ``("and", (e, ...))``, ``("or", (e, ...))``, ``("not", e)``; ``TRUE`` and ``FALSE``.

The lexeme works over the canonical JSON encoding (``pattern.canonical``: one encoding per
string), where complementing a regex complements the set of strings. Atoms under an even number
of ``not``\\ s are under-approximated (a pattern's character classes as both ECMA and Python read
them; formats by our format regexes), under an odd number over-approximated (either reading;
formats there raise), so the whole stays sound.
"""

from __future__ import annotations

from radixlm.constrained.errors import ConstraintError
from radixlm.constrained.ir import builder as ir
from radixlm.constrained.json_schema.context import Context
from radixlm.constrained.json_schema.inference import exact_types
from radixlm.constrained.json_schema.lexeme_budget import check as budget_check
from radixlm.constrained.json_schema.lexemes import STRING
from radixlm.constrained.json_schema.normalize import merge
from radixlm.constrained.pattern.canonical import (
    CANON_CHAR,
    NOTHING,
    canon_text,
    narrowed_regex,
    pattern_regex,
)
from radixlm.constrained.pattern.formats import FORMAT_REGEXES

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
    every match has an allowed length, ``canonical.narrowed_regex``): a subset, so sound where
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
    None when ``e`` is ``FALSE`` or the matcher proves it empty (``lexeme_budget``). A plain
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
