"""Disjointness proofs between canonical schema nodes, for ``oneOf``, ``not`` and
``maxContains``: ``disjoint`` (no instance satisfies both) and ``generated_disjoint`` (no
instance *we generate* for one satisfies the other). Both are conservative: False means
"not proven"."""

from __future__ import annotations

from radixlm.constrained.json_schema.normalize import (
    Context,
    anchored_literal,
    exact_types,
    schemas_for_key,
    types_of,
)
from radixlm.constrained.pattern.formats import FORMAT_REGEXES
from radixlm.constrained.pattern.samples import first_chars, ranges_disjoint


def disjoint(ctx: Context, a: dict, b: dict) -> bool:
    """True when no instance can satisfy both canonical nodes (a conservative proof)."""
    for x, y in ((a, b), (b, a)):
        if "enum" in x:
            return not any(ctx.is_valid_loose(y["_sources"], v) for v in x["enum"])
    for x, y in ((a, b), (b, a)):
        lit = anchored_literal(x)
        if lit is not None and not any(ctx.is_valid_loose(y["_sources"], s) for s in (lit, lit + "\n")):
            return True
    ta, tb = exact_types(a), exact_types(b)
    if not ta & tb:
        return True
    if ta <= {"object"} or tb <= {"object"}:
        return _objects_disjoint(ctx, a, b)
    return False


def _objects_disjoint(ctx: Context, a: dict, b: dict) -> bool:
    for x, y in ((a, b), (b, a)):
        for name in x.get("required", []):
            ys = schemas_for_key(y, name)
            if ys is None:
                return True
            xs = schemas_for_key(x, name)
            if name in y.get("required", []) and xs and ys:
                fx, _ = ctx.flatten({"allOf": xs}, "#", ())
                fy, _ = ctx.flatten({"allOf": ys}, "#", ())
                if fx is None or fy is None or disjoint(ctx, fx, fy):
                    return True
    return False


def generated_disjoint(ctx: Context, gen: dict, other: dict) -> bool:
    """True when no instance *we generate* for ``gen`` satisfies ``other`` (a conservative proof
    that uses our restrictions: only ``types_of`` types, no undeclared object members)."""
    if "enum" in gen or disjoint(ctx, gen, other):
        return disjoint(ctx, gen, other)  # enum: exactly the values we may generate
    if any(k in gen for k in ("anyOf", "oneOf")):
        return False  # the branches may generate other types than types_of says
    tg = exact_types({"type": types_of(gen)})
    if not tg & exact_types(other):
        return True
    if tg <= {"string"}:
        return strings_first_disjoint(ctx, gen, other)
    if not tg <= {"object"}:
        return False
    return (_objects_disjoint(ctx, gen, other)  # exact, for objects
            or any(never_generated(gen, n) for n in other.get("required", [])))


def never_generated(flat: dict, name: str) -> bool:
    """True when the objects we generate for ``flat`` never have the member ``name``."""
    if schemas_for_key(flat, name) is None or flat.get("properties", {}).get(name) is False:
        return True
    if any(k in flat for k in ("additionalProperties", "patternProperties", "dependentSchemas")):
        return False
    keyed = any(k in flat for k in ("properties", "required"))  # else a bare object: any members
    return keyed and name not in flat.get("properties", {}) and name not in flat.get("required", [])


def strings_first_disjoint(ctx: Context, gen: dict, other: dict) -> bool:
    """True when the strings we generate for ``gen`` (one anchored pattern or one of our format
    regexes decides their first character) never satisfy a ``^``-anchored pattern of ``other``
    that needs a first character outside that set."""
    if gen.get("_formats"):
        first = first_chars(FORMAT_REGEXES[gen["_formats"][0]])
    elif gen.get("_patterns"):
        first = first_chars(gen["_patterns"][0], anchored=False)
    else:
        return False
    if first is None:
        return False
    ranges, may_be_empty = first
    if may_be_empty and ctx.is_valid_loose(other["_sources"], ""):
        return False
    for pattern in other.get("_patterns", []):
        need = first_chars(pattern, anchored=False)
        if need is not None and not need[1] and ranges_disjoint(ranges, need[0]):
            return True
    return False
