"""``if``/``then``/``else`` on a discriminator property, as an ``anyOf`` of exact cases.

Config schemas write tagged unions as ``allOf: [{if: {properties: {kind: {const: "a"}}}, then:
A}, {if: ... "b" ..., then: B}, ...]``. Enforcing every ``if`` + ``then`` (our general rule) would
demand ``kind`` be "a" and "b" at once. Here the ``if``s that each test one property against one
constant are grouped by property into one ``anyOf``: for each constant c_k, objects with
``kind == c_k``, ``then_k`` and the other groups' ``else``s; plus a default case with ``kind``
none of the constants and every ``else``. Sound and exact on objects, except that objects
without the property are generated only when every ``if`` requires it (then the default covers
them); non-objects are not generated from a switch.
"""

from __future__ import annotations

from typing import Any

from radixlm.constrained.json_schema import negation
from radixlm.constrained.json_schema.context import Context
from radixlm.constrained.json_schema.normalize import ANNOTATIONS, merge


def discriminator(if_schema: Any) -> tuple[str, Any, bool] | None:
    """(property, constant, whether the ``if`` requires the property), or None when ``if`` is not
    a single-property constant test."""
    if not isinstance(if_schema, dict):
        return None
    keys = set(if_schema) - ANNOTATIONS
    if not keys <= {"properties", "required", "type"} or if_schema.get("type", "object") != "object":
        return None
    props = if_schema.get("properties")
    if not isinstance(props, dict) or len(props) != 1:
        return None
    (name, sub), = props.items()
    if not isinstance(sub, dict):
        return None
    sub_keys = set(sub) - ANNOTATIONS - {"type"}
    if sub_keys == {"const"}:
        value = sub["const"]
    elif sub_keys == {"enum"} and isinstance(sub["enum"], list) and len(sub["enum"]) == 1:
        value = sub["enum"][0]
    else:
        return None
    required = if_schema.get("required", [])
    if required not in ([], [name]):
        return None
    return name, value, required == [name]


def is_switch_case(part: Any) -> bool:
    """Whether an ``allOf`` part is a bare ``if``/``then``/``else`` with a discriminator ``if``."""
    return (isinstance(part, dict) and "if" in part and set(part) - ANNOTATIONS <= {"if", "then", "else"}
            and discriminator(part["if"]) is not None)


def switch_schemas(cases: list[dict]) -> list[dict]:
    """One ``anyOf`` schema per discriminator property, equivalent on objects to ``allOf: cases``."""
    groups: dict[str, list[dict]] = {}
    for case in cases:
        groups.setdefault(discriminator(case["if"])[0], []).append(case)
    return [_switch(name, group) for name, group in groups.items()]


def _switch(name: str, cases: list[dict]) -> dict:
    tests = [discriminator(c["if"]) for c in cases]
    branches: list[dict] = []
    for k in range(len(cases)):
        value = tests[k][1]
        parts: list[Any] = [{"type": "object", "required": [name], "properties": {name: {"const": value}}}]
        for j, other in enumerate(cases):  # the other tests fail unless they test the same value
            holds = tests[j][1] == value and type(tests[j][1]) is type(value)
            sub = other.get("then" if holds else "else")
            if sub is not None:
                parts.append(sub)
        branches.append({"allOf": parts})
    values = [t[1] for t in tests]
    default: dict = {"type": "object", "properties": {name: {"not": {"enum": values}}}}
    if not all(t[2] for t in tests):  # an absent property passes an ``if`` that does not require it
        default["required"] = [name]
    branches.append({"allOf": [default] + [c["else"] for c in cases if "else" in c]})
    return {"anyOf": branches}


def flatten_else(ctx: Context, node: dict, pointer: str, refs: tuple) -> tuple[dict | None, tuple]:
    """``node`` when its ``if`` fails: ``not if`` and ``else`` replace ``if`` and ``then``."""
    rest = {k: v for k, v in node.items() if k not in ("if", "then", "else")}
    flat, grown = ctx.flatten(rest, pointer, refs)
    if flat is None:
        return None, refs
    base = len(refs)
    if "else" in node:
        other, sub_refs = ctx.flatten(node["else"], f"{pointer}/else", refs)
        if other is None:
            return None, refs
        flat, grown = merge(flat, other, pointer), grown + sub_refs[base:]
    return negation.negate(ctx, flat, node["if"], f"{pointer}/if", refs), grown
