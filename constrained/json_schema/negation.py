"""``not`` for the JSON Schema front end: turn a negated sub-schema into restrictions on what we
generate, or prove it cannot matter.

Supported forms (each exact on the type it touches, or a sound restriction):

- ``not {}`` / ``not true``: nothing is valid; ``not false`` / unsatisfiable: ignored.
- ``not {type: [...]}``: those types are removed.
- ``not {enum/const: [...]}``: ``null``/booleans/integers are excluded exactly; strings by
  generating only plain-character strings that are none of the literals (no other string keyword
  allowed next to it). Other values are excluded when the node has an ``enum`` of its own.
- ``not`` of one bound (``minimum``, ``maxLength``, ``minItems``, ...): the opposite bound.
- ``not {required: [a, ...]}``: ``a`` is never generated (when it is not required itself).
- ``not {pattern: "^[C]..."}``: strings start with an ASCII letter/digit outside ``C``.
- ``not`` of a schema provably disjoint from the node: ignored.
- Anything else is kept pending (``_nots``, its pointer): an ``enum`` on the node resolves it
  (values are checked with ``jsonschema`` against the raw nodes, ``not`` included); otherwise the
  generator raises ``ConstraintError`` (strict) when it reaches the node.
"""

from __future__ import annotations

import re
import string
from typing import Any

from radixlm.constrained import grammar_ir as ir
from radixlm.constrained.json_schema import typed as typed_
from radixlm.constrained.json_schema.context import Context
from radixlm.constrained.json_schema.disjoint import disjoint
from radixlm.constrained.json_schema.normalize import ALL_TYPES, merge
from radixlm.constrained.json_schema.objects import complement_string
from radixlm.constrained.pattern.chars import escape_literal
from radixlm.constrained.pattern.ecma import PLAIN_CHAR, STRING_CHAR

# not {k: v} -> {k2: f(v)}: the opposite bound (each applies to one type only, exactly).
_FLIPS = {
    "minimum": ("exclusiveMaximum", lambda v: v), "exclusiveMinimum": ("maximum", lambda v: v),
    "maximum": ("exclusiveMinimum", lambda v: v), "exclusiveMaximum": ("minimum", lambda v: v),
    "minLength": ("maxLength", lambda v: v - 1), "maxLength": ("minLength", lambda v: v + 1),
    "minItems": ("maxItems", lambda v: v - 1), "maxItems": ("minItems", lambda v: v + 1),
    "minProperties": ("maxProperties", lambda v: v - 1), "maxProperties": ("minProperties", lambda v: v + 1),
}
_SAFE_FIRST = string.ascii_letters + string.digits  # candidate first characters (need no escape)
PENDING_KEYS = ("_nots", "_not_values", "_not_first")


def negate(ctx: Context, out: dict, neg: Any, pointer: str, refs: tuple) -> dict | None:
    """``out`` (a canonical node) restricted by ``not neg``; None when nothing is valid.
    ``pointer`` is the ``not`` keyword's own pointer."""
    flat, _ = ctx.flatten(neg, pointer, refs)
    if flat is None:
        return out
    keys = set(flat) - {"_sources"}
    if not keys:
        return None  # not {} / not true: nothing is valid
    if "enum" in out:  # our own values are filtered exactly against the raw nodes (not included)
        return out
    if keys == {"type"}:
        banned = set(flat["type"]) | ({"integer"} if "number" in flat["type"] else set())
        allowed = [t for t in out.get("type", ALL_TYPES) if t not in banned]
        if "number" in allowed and "integer" in banned:
            return _pending(out, pointer)
        out["type"] = allowed
        return out
    if keys == {"enum"}:
        return dict(out, _not_values=out.get("_not_values", []) + [(pointer, v) for v in flat["enum"]])
    if len(keys) == 1 and next(iter(keys)) in _FLIPS:
        (key,) = keys
        if isinstance(flat[key], bool) or not isinstance(flat[key], (int, float)):
            return _pending(out, pointer)
        name, fn = _FLIPS[key]
        return merge(out, {"_sources": [], name: fn(flat[key])}, pointer)
    if keys == {"_patterns"} and len(flat["_patterns"]) == 1:
        first = _excluded_first(flat["_patterns"][0])
        if first is not None:
            return dict(out, _not_first=out.get("_not_first", []) + [first])
    if keys == {"required"} and flat["required"]:
        name = flat["required"][0]  # at least one is absent: we never generate the first one
        if name not in out.get("required", []):
            return dict(out, properties=dict(out.get("properties", {}), **{name: False}))
    if disjoint(ctx, out, flat):
        return out  # nothing we generate can satisfy the negated schema anyway
    return _pending(out, pointer)


def _pending(out: dict, pointer: str) -> dict:
    return dict(out, _nots=out.get("_nots", []) + [pointer])


def _excluded_first(pattern: str) -> str | None:
    """Characters of ``_SAFE_FIRST`` no match of ``pattern`` can start with, when the pattern is
    ``^`` + one character class or literal that is not optional; else None."""
    m = re.match(r"\^(\[(?:\\.|[^\\\]])+\]|[A-Za-z0-9])([+]|\{[1-9][0-9]*(,[0-9]*)?\})?", pattern)
    if m is None or (len(pattern) > m.end() and pattern[m.end()] in "?*"):
        return None
    try:
        atom = re.compile(m.group(1))
    except re.error:
        return None
    chars = "".join(c for c in _SAFE_FIRST if not atom.fullmatch(c))
    return chars or None


def check_pending(ctx: Context, flat: dict) -> None:
    """Raise (strict) for a pending ``not`` the generator cannot enforce on this node."""
    for pointer in flat.get("_nots", []):
        ctx.unsupported(pointer.rsplit("/", 1)[0], "not", "with this sub-schema is not supported")


def excluded(flat: dict, kind: str) -> list[tuple[str, Any]]:
    """The ``(pointer, value)`` exclusions of one JSON kind (``null``, ``boolean``, ``number``,
    ``string``, ``array``, ``object``)."""
    return [(p, v) for p, v in flat.get("_not_values", []) if _kind(v) == kind]


def _kind(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, (int, float)):
        return "number"
    if isinstance(v, str):
        return "string"
    return "array" if isinstance(v, list) else "object"


def boolean_regex(flat: dict) -> str | None:
    """``true``/``false`` minus the excluded ones."""
    banned = {v for _, v in excluded(flat, "boolean")}
    alts = [w for w, b in (("true", True), ("false", False)) if b not in banned]
    return None if not alts else alts[0] if len(alts) == 1 else "(true|false)"


def string_regex(ctx: Context, flat: dict, pointer: str) -> str | None:
    """Regex of strings for a node with string exclusions or first-character restrictions, or
    ``""`` when it has none (the caller then emits the normal string regex)."""
    words = [v for _, v in excluded(flat, "string")]
    firsts = flat.get("_not_first", [])
    if not words and not firsts:
        return ""
    others = [k for k in ("_patterns", "_formats") if k in flat] + (["pattern"] if words and firsts else [])
    if others:
        p = (excluded(flat, "string") or [(pointer + "/not", None)])[0][0]
        ctx.unsupported(p.rsplit("/", 1)[0], "not", f"next to {others[0].strip('_')} is not supported")
        return ""
    lo, hi = flat.get("minLength", 0), flat.get("maxLength")
    if words and not lo and hi is None:
        return complement_string(set(words), nonempty=False)
    if words:  # longer than every excluded word: a restriction that needs no complement
        lo = max(lo, max(len(w) for w in words) + 1)
        first = PLAIN_CHAR
    else:
        allowed = set(_SAFE_FIRST)
        for chars in firsts:
            allowed &= set(chars)
        first = "[" + "".join(escape_literal(c) for c in sorted(allowed)) + "]" if allowed else ""
        lo = max(lo, 1)
    if not first or (hi is not None and hi < lo):
        return None
    return f'"{first}{STRING_CHAR}{{{lo - 1},{"" if hi is None else hi - 1}}}"'


def typed(ctx: Context, t: str, flat: dict, pointer: str, refs: tuple) -> str | ir.Node | None:
    """``typed.typed`` with the values a ``not`` excludes left out."""
    kind = "number" if t == "integer" else t
    banned = excluded(flat, kind)
    if t == "null" and banned:
        return None
    if t == "boolean":
        return boolean_regex(flat)
    if t == "string":
        rx = string_regex(ctx, flat, pointer)
        if rx != "":
            return rx
    if banned and t in ("array", "object"):
        ctx.unsupported(banned[0][0].rsplit("/", 1)[0], "not", f"of an {t} value is not supported")
    if banned and kind == "number":  # x != e  <=>  x < e or x > e: exact intervals between them
        cuts = sorted({v for _, v in banned})
        bounds = [(None, cuts[0])] + list(zip(cuts, cuts[1:])) + [(cuts[-1], None)]
        alts = []
        for lo, hi in bounds:
            extra = {k: v for k, v in (("exclusiveMinimum", lo), ("exclusiveMaximum", hi)) if v is not None}
            rx = typed_.typed(ctx, t, merge(flat, dict(extra, _sources=[]), pointer), pointer, refs)
            if rx is not None:
                alts.append(rx)
        return None if not alts else alts[0] if len(alts) == 1 else "(" + "|".join(alts) + ")"
    return typed_.typed(ctx, t, flat, pointer, refs)
