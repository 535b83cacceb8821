"""``not`` for the JSON Schema front end: turn a negated sub-schema into restrictions on what we
generate, or prove it cannot matter.

Supported forms (each exact on the type it touches, or a sound restriction):

- ``not {}`` / ``not true``: nothing is valid; ``not false`` / unsatisfiable: ignored.
- ``not {type: [...]}``: those types are removed.
- ``not {enum/const: [...]}``: ``null``/booleans/numbers are excluded exactly; strings too
  (a complement, or the lexeme algebra next to other string keywords); an object value ``v`` as
  the ``anyOf`` of the ways an object differs from it (a member of ``v`` missing, one more member,
  a member's value ``not const``), values no instance of the node can take are dropped.
- ``not`` of one bound (``minimum``, ``maxLength``, ``minItems``, ...): the opposite bound, on
  the bound's type only (the bound holds vacuously for the other types).
- ``not {required: [a, ...]}``: objects only, and ``a`` is never generated (when not required).
- ``not`` of a schema provably disjoint from the node: ignored.
- Otherwise ``complement``: type by type, strings through ``string_sets`` (patterns, lengths,
  formats, enums, ``anyOf``/``oneOf``/``not`` of them: exact), objects when the negated schema
  is one ``propertyNames`` or ``patternProperties`` entry (some member must exist:
  ``names.resolve_some_key``).
- Anything else is kept pending (``_nots``, its pointer): an ``enum`` on the node resolves it
  (values are checked with ``jsonschema`` against the raw nodes, ``not`` included), and so do
  finite types (null, booleans, integers in a bounded range of at most ``MAX_ENUMERATED``
  values, for numbers their integers); otherwise the generator raises ``ConstraintError``
  (strict) when it reaches the node.
"""

from __future__ import annotations

import json
from typing import Any

from radixlm.constrained.ir import builder as ir
from radixlm.constrained.json_schema import string_sets
from radixlm.constrained.json_schema import typed as typed_
from radixlm.constrained.json_schema.complement import complement, kind_of
from radixlm.constrained.json_schema.context import Context
from radixlm.constrained.json_schema.disjoint import disjoint
from radixlm.constrained.json_schema.inference import types_of
from radixlm.constrained.json_schema.key_complement import complement_key
from radixlm.constrained.json_schema.names import resolve_some_key
from radixlm.constrained.json_schema.normalize import ALL_TYPES, merge
from radixlm.constrained.json_schema.scalars import integer_bounds

# not {k: v} -> {k2: f(v)} on k's type: the opposite bound (exact).
_FLIPS = {
    "minimum": ("exclusiveMaximum", lambda v: v), "exclusiveMinimum": ("maximum", lambda v: v),
    "maximum": ("exclusiveMinimum", lambda v: v), "exclusiveMaximum": ("minimum", lambda v: v),
    "minLength": ("maxLength", lambda v: v - 1), "maxLength": ("minLength", lambda v: v + 1),
    "minItems": ("maxItems", lambda v: v - 1), "maxItems": ("minItems", lambda v: v + 1),
    "minProperties": ("maxProperties", lambda v: v - 1), "maxProperties": ("minProperties", lambda v: v + 1),
}
_FLIP_TYPE = {"Length": "string", "Items": "array", "Properties": "object"}
MAX_ENUMERATED = 4096  # integers a pending `not` is resolved over by checking each one


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
        return _not_values(ctx, out, flat["enum"], pointer)
    if len(keys) == 1 and next(iter(keys)) in _FLIPS:
        (key,) = keys
        if isinstance(flat[key], bool) or not isinstance(flat[key], (int, float)):
            return _pending(out, pointer)
        name, fn = _FLIPS[key]
        kind = next((t for suffix, t in _FLIP_TYPE.items() if key.endswith(suffix)), "number")
        return merge(out, {"_sources": [], "type": [kind], name: fn(flat[key])}, pointer)
    if keys == {"required"} and flat["required"]:
        name = flat["required"][0]  # at least one is absent: we never generate the first one
        if name not in out.get("required", []):
            return merge(out, {"_sources": [], "type": ["object"], "properties": {name: False}}, pointer)
    if disjoint(ctx, out, flat):
        return out  # nothing we generate can satisfy the negated schema anyway
    result = complement(ctx, out, flat, pointer, refs)
    return _pending(out, pointer) if result is NotImplemented else result


def _pending(out: dict, pointer: str) -> dict:
    return dict(out, _nots=out.get("_nots", []) + [pointer])


def _not_values(ctx: Context, out: dict, values: list, pointer: str) -> dict:
    """``out`` without the ``values``; those no instance of ``out`` can take are left out (the
    loose check is a superset of ``out``'s instances)."""
    values = [v for v in values if ctx.is_valid_loose(out["_sources"], v)]
    objects = [v for v in values if isinstance(v, dict)]
    for v in objects:  # o != v: a member of v missing, a member more, or a member's value differs
        branches = [{"properties": {k: False}} for k in v] + [{"minProperties": len(v) + 1}]
        branches += [{"properties": {k: {"not": {"const": x}}}} for k, x in v.items()]
        out = merge(out, {"_sources": [], "anyOf": branches}, pointer)
    rest = [(pointer, v) for v in values if not isinstance(v, dict)]
    return dict(out, _not_values=out.get("_not_values", []) + rest) if rest else out


def check_pending(ctx: Context, flat: dict) -> None:
    """Raise (strict) for a pending ``not`` the generator cannot enforce on this node: one whose
    generated types are not all finite (``finite_values``)."""
    if any(finite_values(t, flat) is None for t in types_of(flat)):
        for pointer in flat.get("_nots", []):
            ctx.unsupported(pointer.rsplit("/", 1)[0], "not", "with this sub-schema is not supported")


def finite_values(t: str, flat: dict) -> list | None:
    """Every instance of type ``t`` we would generate for ``flat`` (integers only for numbers),
    when there are at most ``MAX_ENUMERATED``; else None."""
    if t == "null":
        return [None]
    if t == "boolean":
        return [True, False]
    if t not in ("integer", "number"):
        return None
    lo, hi = integer_bounds(flat)
    if lo is None or hi is None or hi - lo >= MAX_ENUMERATED:
        return None
    return list(range(lo, hi + 1))


def excluded(flat: dict, kind: str) -> list[tuple[str, Any]]:
    """The ``(pointer, value)`` exclusions of one JSON kind (``null``, ``boolean``, ``number``,
    ``string``, ``array``, ``object``)."""
    return [(p, v) for p, v in flat.get("_not_values", []) if kind_of(v) == kind]


def boolean_regex(flat: dict) -> str | None:
    """``true``/``false`` minus the excluded ones."""
    banned = {v for _, v in excluded(flat, "boolean")}
    alts = [w for w, b in (("true", True), ("false", False)) if b not in banned]
    return None if not alts else alts[0] if len(alts) == 1 else "(true|false)"


def string_node(ctx: Context, flat: dict, pointer: str) -> str | ir.Node | None:
    """The strings of a node with exclusions or ``_str_exprs``, or ``""`` when it has none (the
    caller then emits the normal string regex)."""
    words = [v for _, v in excluded(flat, "string")]
    if not words and not flat.get("_str_exprs"):
        return ""
    others = any(k in flat for k in ("_patterns", "_formats", "_str_exprs", "minLength", "maxLength"))
    if not others:  # a plain complement: the algebra, as extra keys are (``complement_key``)
        return complement_key(set(words), nonempty=False, pointer=pointer)
    return string_sets.string_lexeme(ctx, string_sets.conjunction(flat, pointer), pointer,
                                      string_sets.keyword_of(flat))


def typed(ctx: Context, t: str, flat: dict, pointer: str, refs: tuple) -> str | ir.Node | None:
    """``typed.typed`` with the values a ``not`` excludes left out."""
    kind = "number" if t == "integer" else t
    banned = excluded(flat, kind)
    values = finite_values(t, flat) if flat.get("_nots") else None
    if values is not None:  # a pending `not` over a finite type: check every value exactly
        ok = [json.dumps(v) for v in values if ctx.is_valid(flat["_sources"], v)]
        return None if not ok else ir.alt([ir.Lit(v) for v in ok])
    if t == "null" and banned:
        return None
    if t == "boolean":
        return boolean_regex(flat)
    if t == "string":
        rx = string_node(ctx, flat, pointer)
        if rx != "":
            return rx
    if banned and t == "array":  # (object values became an anyOf in _not_values)
        ctx.unsupported(banned[0][0].rsplit("/", 1)[0], "not", "of an array value is not supported")
    if t == "object" and flat.get("_some_key"):  # the first witness member that works
        for node in resolve_some_key(ctx, flat, pointer):
            out = typed_.typed(ctx, t, node, pointer, refs)
            if out is not None:
                return out
        return None
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
