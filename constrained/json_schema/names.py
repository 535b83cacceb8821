"""``propertyNames`` for the JSON Schema front end.

Every member name must validate against the ``propertyNames`` schema. Named properties whose
name fails it are dropped (an unsatisfiable schema if one is required). When the names schema
has an ``enum``/``const``, the valid names form a finite set: each becomes an optional named
property (value schema from ``patternProperties``/``additionalProperties``) and no other member
is generated. Otherwise extra members use keys generated from the names schema itself, provided
no named property could also match it (keys then never collide); else extras are not generated
(a restriction).
"""

from __future__ import annotations

from typing import Any

from radixlm.constrained.json_schema.context import Context
from radixlm.constrained.json_schema.normalize import schemas_for_key


def apply_property_names(ctx: Context, flat: dict, pointer: str,
                         refs: tuple) -> tuple[dict | None, tuple[str, bool] | None]:
    """(object node with ``propertyNames`` folded in, (regex of extra member keys, whether the
    empty name is excluded) or None when extras keep their usual keys). The node is None when
    nothing is valid."""
    names_schema = flat["propertyNames"]
    where = f"{pointer}/propertyNames"
    rest = {k: v for k, v in flat.items() if k != "propertyNames"}
    props = dict(rest.get("properties", {}))
    required = list(rest.get("required", []))
    for name in list(props) + [r for r in required if r not in props]:
        if not ctx.is_valid([names_schema], name):
            if name in required:
                return None, None
            props.pop(name, None)
    rest["properties"] = props
    names_flat, _ = ctx.flatten(names_schema, where, refs)
    if names_flat is None:  # no name is valid: only the empty object
        return (None, None) if required else (_closed(rest, {}), None)
    if "enum" in names_flat:
        return _enumerated(ctx, rest, names_flat["enum"], names_schema), None
    key_rx = ctx.value({"allOf": [names_schema, {"type": "string"}]}, where, refs)
    taken = set(props) | set(required) | set(rest.get("dependentRequired", {})) | set(rest.get("dependentSchemas", {}))
    if key_rx is None or any(ctx.is_valid([names_schema], n) for n in taken):
        return _closed(rest, props), None  # keys could collide with named/trigger ones: no extras
    return rest, (key_rx, not ctx.is_valid([names_schema], ""))


def _enumerated(ctx: Context, node: dict, values: list, names_schema: Any) -> dict:
    props = dict(node["properties"])
    for v in values:
        if not isinstance(v, str) or v in props or not ctx.is_valid([names_schema], v):
            continue
        subs = schemas_for_key(node, v)
        if subs is None or (not subs and "additionalProperties" not in node
                            and not node.get("patternProperties")):
            continue  # forbidden, or an unspecified additionalProperties: not generated
        props[v] = True if not subs else subs[0] if len(subs) == 1 else {"allOf": subs}
    return _closed(node, props)


def _closed(node: dict, props: dict) -> dict:
    """``node`` with exactly ``props`` as its possible members."""
    return dict(node, properties=props, patternProperties={}, additionalProperties=False)
