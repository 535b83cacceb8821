"""``not S`` one JSON type at a time: the general rule behind ``negation.negate``.

For each type ``t`` the node allows, ``S`` accepts either no ``t`` instance (``none``: ``not S``
keeps ``t``), every one (``all``: a keyword of another type is vacuous on ``t``, so ``not S``
drops ``t``) or some (``some``). Two ``some`` cases are enforced:

- strings: the strings ``S`` accepts as a ``string_sets`` expression, complemented (exact);
- objects, when ``S`` is one ``propertyNames`` or one ``patternProperties`` entry: ``not S``
  says some member exists (a name failing ``propertyNames``, or a name matching the pattern with
  a value failing its schema), kept as ``_some_key`` for ``names.resolve_some_key``.

Any other ``some`` leaves the ``not`` to the caller (``complement`` returns ``NotImplemented``).
"""

from __future__ import annotations

from radixlm.constrained.errors import ConstraintError
from radixlm.constrained.json_schema import string_sets
from radixlm.constrained.json_schema.context import Context
from radixlm.constrained.json_schema.inference import exact_types
from radixlm.constrained.json_schema.normalize import ALL_TYPES, merge

# The keywords that constrain each (non-string) type's instances.
TYPE_KEYS = {
    "object": ("properties", "required", "additionalProperties", "patternProperties", "minProperties",
               "maxProperties", "dependentRequired", "dependentSchemas", "propertyNames", "_some_key"),
    "array": ("items", "prefixItems", "minItems", "maxItems", "uniqueItems", "contains"),
    "number": ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"),
    "null": (), "boolean": (),
}
_KIND = {"integer": "number"}


def complement(ctx: Context, out: dict, flat: dict, pointer: str, refs: tuple):
    """``out`` restricted by ``not flat`` (None: nothing is valid), or ``NotImplemented`` when
    some type's part of ``flat`` is beyond these rules. ``pointer``: the ``not`` keyword."""
    types = list(out.get("type", ALL_TYPES))
    keep, extra = [], {}
    for t in types:
        if t == "string":
            e = string_sets.node_expr(ctx, flat, pointer, refs)
            if e is None:
                return NotImplemented
            e = string_sets.negated(e)
            try:
                string_sets.check(e)
            except ConstraintError:
                return NotImplemented
            if e != string_sets.FALSE:
                keep.append(t)
            if e not in (string_sets.FALSE, string_sets.TRUE):
                extra["_str_exprs"] = [e]
            continue
        cls = type_class(ctx, flat, t, pointer, refs)
        if cls == "none":
            keep.append(t)
        elif cls == "some":
            key = existential(flat, pointer) if t == "object" else None
            if key is None:
                return NotImplemented
            keep.append(t)
            extra["_some_key"] = [key]
    if not keep:
        return None
    result = dict(out, type=keep) if keep != types or "type" in out else dict(out)
    for k, v in extra.items():
        result[k] = out.get(k, []) + v
    return result


def type_class(ctx: Context, flat: dict, t: str, pointer: str, refs: tuple) -> str:
    """``none`` | ``all`` | ``some``: how many instances of type ``t`` the canonical node accepts
    (conservative: ``some`` when unsure)."""
    if t not in exact_types(flat):
        return "none"
    for key in ("anyOf", "oneOf"):
        if key in flat:
            rest = {k: v for k, v in flat.items() if k != key}
            classes = []
            for i, sub in enumerate(flat[key]):
                sub_flat, sub_refs = ctx.flatten(sub, f"{pointer}/{key}/{i}", refs)
                classes.append("none" if sub_flat is None else
                               type_class(ctx, merge(rest, sub_flat, pointer), t, pointer, sub_refs))
            if all(c == "none" for c in classes):
                return "none"
            one = classes.count("all") == 1 and classes.count("none") == len(classes) - 1
            return "all" if (key == "anyOf" and "all" in classes) or one else "some"
    kind = _KIND.get(t, t)
    if "enum" in flat:
        values = [v for v in flat["enum"] if kind_of(v) == kind and ctx.is_valid(flat["_sources"], v)]
        if not values:
            return "none"
        full = {"null": 1, "boolean": 2}.get(kind)
        return "all" if full is not None and len({repr(v) for v in values}) == full else "some"
    if flat.get("_nots") or any(kind_of(v) == kind for _, v in flat.get("_not_values", [])):
        return "some"
    if t == "number" and "type" in flat and "number" not in flat["type"]:
        return "some"  # integers only
    return "some" if any(k in flat for k in TYPE_KEYS[kind]) else "all"


def existential(flat: dict, pointer: str) -> tuple | None:
    """``_some_key`` entry for ``not flat`` on objects: ``("names", schema, pointer)`` (a member
    whose name fails ``propertyNames``) or ``("pattern", p, value schema, pointer)`` (a member
    whose name matches ``p`` and whose value fails the pattern's schema); None otherwise."""
    if any(k in flat for k in ("anyOf", "oneOf", "enum", "_nots")):
        return None
    keys = [k for k in TYPE_KEYS["object"] if k in flat]
    if keys == ["propertyNames"]:
        return ("names", flat["propertyNames"], pointer)
    if keys == ["patternProperties"] and len(flat["patternProperties"]) == 1:
        ((p, sub),) = flat["patternProperties"].items()
        return ("pattern", p, True if sub is False else {"not": sub}, pointer)
    return None


def kind_of(v) -> str:
    """The JSON kind of a value: null, boolean, number, string, array or object."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, (int, float)):
        return "number"
    return "string" if isinstance(v, str) else "array" if isinstance(v, list) else "object"
