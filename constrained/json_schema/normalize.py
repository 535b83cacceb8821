"""Schema normalisation: keyword clean-up per node and ``allOf`` merging.

``clean(node)`` rewrites one raw schema node (any draft 4 .. 2020-12) into a canonical dict:
annotations and unknown keywords dropped, ``const`` -> ``enum``, draft-4 boolean exclusive bounds
-> numbers, array-form ``items`` -> ``prefixItems``, ``dependencies`` -> ``dependentRequired`` /
``dependentSchemas``, ``pattern``/``format`` -> lists (``_patterns``, ``_formats``), ``multipleOf``
and ``contains`` (with its ``minContains``/``maxContains``) -> lists. ``merge(a, b)``
intersects two canonical nodes (the instances valid under both). Every canonical node keeps the
raw nodes it came from in ``_sources``, so values (``enum``) can be checked exactly with
``jsonschema``.
"""

from __future__ import annotations

import json
import re
from typing import Any

from radixlm.constrained.errors import ConstraintError
from radixlm.constrained.pattern.formats import FORMAT_REGEXES

# Keywords that only annotate (or locate) a schema: dropped.
ANNOTATIONS = frozenset({
    "title", "description", "examples", "example", "default", "$comment", "$schema", "$id", "id",
    "readOnly", "writeOnly", "deprecated", "$anchor", "$dynamicAnchor", "$vocabulary", "$defs",
    "definitions", "contentMediaType", "contentEncoding", "contentSchema", "discriminator",
    "nullable", "xml", "externalDocs", "markdownDescription", "enumDescriptions",
})
# Keywords that change validity and that the compiler handles itself (possibly partially).
HANDLED = frozenset({
    "type", "enum", "const", "properties", "required", "additionalProperties", "patternProperties",
    "minProperties", "maxProperties", "dependentRequired", "dependentSchemas", "dependencies",
    "items", "prefixItems", "additionalItems", "minItems", "maxItems", "uniqueItems", "minLength",
    "maxLength", "pattern", "format", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
    "anyOf", "oneOf", "allOf", "$ref", "not", "if", "then", "else", "multipleOf", "propertyNames",
    "contains", "minContains", "maxContains",
    # Satisfied by construction: every generated member/item is evaluated by some keyword.
    "unevaluatedProperties", "unevaluatedItems",
})
# Keywords that change validity and that we cannot enforce in any form.
UNSUPPORTED = frozenset({
    "$dynamicRef", "$recursiveRef", "$recursiveAnchor",
})
ALL_TYPES = ("null", "boolean", "object", "array", "string", "number", "integer")


def canonical(value: Any) -> str:
    """A key equal for equal JSON values (1 and 1.0 equal, True and 1 not)."""
    return json.dumps(_tag(value), sort_keys=True)


def _tag(v: Any) -> Any:
    if isinstance(v, bool) or v is None:
        return ["b", v]
    if isinstance(v, (int, float)):
        return ["n", float(v)]
    if isinstance(v, list):
        return ["a", [_tag(x) for x in v]]
    if isinstance(v, dict):
        return ["o", {k: _tag(x) for k, x in v.items()}]
    return ["s", v]


def clean(node: dict, pointer: str, unsupported) -> dict:
    """Canonical copy of one raw node. ``unsupported(pointer, keyword, why)`` handles the rest."""
    out: dict[str, Any] = {"_sources": [node]}
    for key, val in node.items():
        if key in ANNOTATIONS or key == "unevaluatedProperties" or key == "unevaluatedItems":
            continue
        if key in UNSUPPORTED:
            unsupported(pointer, key, "is not supported")
        elif key not in HANDLED:
            continue  # unknown keywords do not change validity
        elif key == "const":
            out["enum"] = [val]
        elif key == "enum":
            if not isinstance(val, list):
                raise ConstraintError("enum must be an array", pointer, key)
            out["enum"] = list(val) if "enum" not in out else _intersect(out["enum"], val)
        elif key == "type":
            types = [val] if isinstance(val, str) else list(val)
            bad = [t for t in types if t not in ALL_TYPES]
            if bad:
                raise ConstraintError(f"unknown type {bad[0]!r}", pointer, key)
            out["type"] = types
        elif key == "pattern":
            out["_patterns"] = [val]
        elif key == "format":
            if val in FORMAT_REGEXES:
                out["_formats"] = [val]
        elif key == "items" and isinstance(val, list):
            out["prefixItems"] = val
            if "additionalItems" in node:
                out["items"] = node["additionalItems"]
        elif key == "additionalItems":
            continue  # only meaningful with array-form items, handled above
        elif key == "multipleOf":  # a list: allOf keeps every divisor
            out[key] = [val]
        elif key == "contains":  # a list of {schema, min, max, pointer}: allOf keeps every one
            out[key] = [{"schema": val, "min": node.get("minContains", 1), "max": node.get("maxContains"),
                         "pointer": pointer}]
        elif key in ("minContains", "maxContains"):
            continue  # only meaningful next to contains, handled above
        elif key == "dependencies":
            for name, dep in val.items():
                kind = "dependentRequired" if isinstance(dep, list) else "dependentSchemas"
                out.setdefault(kind, {})[name] = dep
        elif key in ("exclusiveMinimum", "exclusiveMaximum") and isinstance(val, bool):
            bound = "minimum" if key == "exclusiveMinimum" else "maximum"
            if val and bound in node:
                out[key] = node[bound]
        elif key in ("minimum", "maximum") and node.get("exclusive" + key[:1].upper() + key[1:]) is True:
            continue  # draft 4: the bound is exclusive, recorded above
        else:
            out[key] = val
    if "enum" in out and "enum" in node and "const" in node:
        out["enum"] = _intersect([node["const"]], node["enum"])
    return out


def _intersect(a: list, b: list) -> list:
    keys = {canonical(v) for v in b}
    return [v for v in a if canonical(v) in keys]


def _all_of(a: Any, b: Any) -> Any:
    if a is True or a == {}:
        return b
    if b is True or b == {}:
        return a
    if a is False or b is False:
        return False
    if a == b:  # allOf is idempotent; recursive schemas merge a node with itself a lot
        return a
    return {"allOf": [a, b]}


def schemas_for_key(node: dict, name: str) -> list | None:
    """Raw schemas a member ``name`` must satisfy under ``node``; None when ``node`` forbids it
    outright. An unspecified ``additionalProperties`` counts as true here (exact semantics)."""
    props = node.get("properties", {})
    subs = [props[name]] if name in props else []
    matched = [s for p, s in node.get("patternProperties", {}).items() if re.search(p, name)]
    subs += matched
    if name not in props and not matched and "additionalProperties" in node:
        subs.append(node["additionalProperties"])
    if any(s is False for s in subs):
        return None
    return subs


def _merge_objects(out: dict, a: dict, b: dict) -> None:
    names = list(a.get("properties", {})) + [n for n in b.get("properties", {}) if n not in a.get("properties", {})]
    props = {}
    for name in names:
        sa, sb = schemas_for_key(a, name), schemas_for_key(b, name)
        if sa is None or sb is None:
            props[name] = False
            continue
        merged: Any = True
        for s in sa + sb:
            merged = _all_of(merged, s)
        props[name] = merged
    if props:
        out["properties"] = props
    pats: dict[str, Any] = {}
    for own, other in ((a, b), (b, a)):
        for pat, sub in own.get("patternProperties", {}).items():
            # Keys matching this pattern may fall under the other side's additionalProperties.
            extra = other.get("additionalProperties", True)
            pats[pat] = _all_of(pats.get(pat, True), _all_of(sub, extra))
    if pats:
        out["patternProperties"] = pats
    if "additionalProperties" in a or "additionalProperties" in b:
        out["additionalProperties"] = _all_of(a.get("additionalProperties", True),
                                              b.get("additionalProperties", True))
    req = list(dict.fromkeys(a.get("required", []) + b.get("required", [])))
    if req:
        out["required"] = req
    for kind in ("dependentRequired", "dependentSchemas"):
        da, db = a.get(kind, {}), b.get(kind, {})
        if da or db:
            merged_deps = dict(da)
            for k, v in db.items():
                if k not in merged_deps:
                    merged_deps[k] = v
                elif kind == "dependentRequired":
                    merged_deps[k] = list(dict.fromkeys(merged_deps[k] + v))
                else:
                    merged_deps[k] = _all_of(merged_deps[k], v)
            out[kind] = merged_deps


_OBJECT_KEYS = {"properties", "patternProperties", "additionalProperties", "required",
                "dependentRequired", "dependentSchemas"}


def merge(a: dict, b: dict, pointer: str, max_product: int = 256) -> dict:
    """Canonical node whose instances are those valid under both canonical nodes ``a`` and ``b``."""
    out: dict[str, Any] = {"_sources": a["_sources"] + b["_sources"]}
    keys = set(a) | set(b)
    if keys & _OBJECT_KEYS:
        _merge_objects(out, a, b)
    for key in keys - _OBJECT_KEYS - {"_sources"}:
        if key not in a or key not in b:
            out[key] = a[key] if key in a else b[key]
            continue
        va, vb = a[key], b[key]
        if key == "type":
            out[key] = _merge_types(va, vb)
        elif key == "enum":
            out[key] = _intersect(va, vb)
        elif key in ("minimum", "exclusiveMinimum", "minLength", "minItems", "minProperties"):
            out[key] = max(va, vb)
        elif key in ("maximum", "exclusiveMaximum", "maxLength", "maxItems", "maxProperties"):
            out[key] = min(va, vb)
        elif key in ("_patterns", "_formats"):
            out[key] = list(dict.fromkeys(va + vb))
        elif key in ("_nots", "_not_values", "_str_exprs", "_some_key"):  # negations: all of them hold
            out[key] = va + vb
        elif key == "uniqueItems":
            out[key] = va or vb
        elif key in ("items", "propertyNames"):
            out[key] = _all_of(va, vb)
        elif key == "prefixItems":
            out[key] = _merge_prefix(a, b)
        elif key in ("anyOf", "oneOf"):
            out[key] = _product(key, va, vb, pointer, max_product)
        elif key == "multipleOf":  # every divisor holds; 3 and 3.0 differ (int vs float check)
            out[key] = list({(type(v), v): v for v in va + vb}.values())
        elif key == "contains":  # every contains holds
            out[key] = va + [e for e in vb if e not in va]
        else:
            out[key] = va
    return out


def _product(key: str, va: list, vb: list, pointer: str, max_product: int) -> list:
    """Branches of allOf(key va, key vb): every pair merged. A large ``anyOf`` product keeps the
    first ``max_product`` pairs by i + j (each branch early): sound, any pair satisfies both
    lists. A ``oneOf`` needs every pair for its disjointness proof."""
    if va == vb:  # allOf(anyOf X, anyOf X) is anyOf X (the same for oneOf)
        return list(va)
    pairs = [(i, j) for i in range(len(va)) for j in range(len(vb))]
    if len(pairs) > max_product:
        if key == "oneOf":
            raise ConstraintError("allOf of two oneOf lists is too large to merge", pointer, key)
        pairs = sorted(pairs, key=lambda p: (p[0] + p[1], p[0]))[:max_product]
    return [_all_of(va[i], vb[j]) for i, j in pairs]


def _merge_types(a: list, b: list) -> list:
    out = [t for t in a if t in b]
    if "integer" in a and "number" in b and "integer" not in out:
        out.append("integer")
    if "integer" in b and "number" in a and "integer" not in out:
        out.append("integer")
    return out


def _merge_prefix(a: dict, b: dict) -> list:
    pa, pb = a["prefixItems"], b["prefixItems"]
    out = []
    for i in range(max(len(pa), len(pb))):
        x = pa[i] if i < len(pa) else a.get("items", True)
        y = pb[i] if i < len(pb) else b.get("items", True)
        out.append(_all_of(x, y))
    return out
