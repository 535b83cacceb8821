"""Instances rewritten into the layout the default key order generates (``json_key_order:
"schema"``): each object's declared properties in the order of ``properties`` (its own, then those
its ``$ref`` and ``allOf`` parts bring), then required names the properties do not list, then
undeclared members, kept only where the schema declares extras (``additionalProperties`` true or
a schema, a matching ``patternProperties`` key) or leaves them open without declaring enough
members (no member declared, or fewer than ``minProperties``).

Used by the coverage test and ``benchmarks/bench_jump_forward.py``: a rewritten instance counts
only when ``jsonschema`` still accepts it (dropping a member can break ``minProperties`` or a
dependency); :func:`schema_order_instances` says how many it dropped.
"""

from __future__ import annotations

import re
from typing import Any

import jsonschema
from referencing.exceptions import Unresolvable

_BRANCHES = ("anyOf", "oneOf")


class _Rewriter:
    """One root schema's rewriting: ``$ref`` resolution and sub-schema checks go through one
    validator of the root, so relative references resolve as ``jsonschema`` resolves them."""

    def __init__(self, root: Any):
        cls = jsonschema.validators.validator_for(root if isinstance(root, dict) else {})
        self.validator = cls(root if isinstance(root, (dict, bool)) else {})
        self.root = root

    def parts(self, node: Any, depth: int = 0) -> list[dict]:
        """``node`` and the schemas merged into it (``$ref`` target, ``allOf`` parts, and the first
        ``anyOf``/``oneOf`` branch the caller picks later), outermost first."""
        if not isinstance(node, dict) or depth > 16:
            return []
        out = [node]
        if isinstance(node.get("$ref"), str):
            target = self._resolve(node["$ref"])
            out += self.parts(target, depth + 1)
        for sub in node.get("allOf", []) if isinstance(node.get("allOf"), list) else []:
            out += self.parts(sub, depth + 1)
        return out

    def _resolve(self, ref: str) -> Any:
        try:
            return self.validator._resolver.lookup(ref).contents
        except (Unresolvable, AttributeError, KeyError, ValueError):
            return None

    def rewrite(self, node: Any, value: Any, depth: int = 0) -> Any:
        """``value`` in the default key order's layout for ``node`` (values it cannot place as they
        are: left unchanged)."""
        if depth > 64 or not isinstance(value, (dict, list)):
            return value
        parts = self.parts(node)
        for part in list(parts):  # the first branch that accepts the value is the one generated
            for key in _BRANCHES:
                branches = part.get(key)
                if isinstance(branches, list):
                    chosen = next((b for b in branches if self._accepts(b, value)), None)
                    parts += self.parts(chosen)
        if isinstance(value, list):
            return [self.rewrite(_item_schema(parts, i), v, depth + 1) for i, v in enumerate(value)]
        return self._object(parts, value, depth)

    def _accepts(self, node: Any, value: Any) -> bool:
        try:
            return self.validator.evolve(schema=node).is_valid(value)
        except (jsonschema.exceptions.SchemaError, Unresolvable, RecursionError):
            return False

    def _object(self, parts: list[dict], value: dict, depth: int) -> dict:
        props: dict[str, list] = {}
        for part in parts:
            for name, sub in (part.get("properties") or {}).items():
                props.setdefault(name, []).append(sub)
        required = [n for part in parts for n in (part.get("required") or []) if isinstance(n, str)]
        named = list(props) + [n for n in dict.fromkeys(required) if n not in props]
        patterns = {p: s for part in parts for p, s in (part.get("patternProperties") or {}).items()}
        declared = [part["additionalProperties"] for part in parts if "additionalProperties" in part]
        open_extras = any(d is not False for d in declared) and False not in declared
        # no member declared ({"type": "object"}), or fewer than minProperties: extras as JSON Schema says
        positive = [n for n in named if all(sub is not False for sub in props.get(n, []))]
        min_p = max((p.get("minProperties", 0) for p in parts), default=0)
        bare = not patterns and not declared and (not positive or min_p > len(positive))
        out: dict[str, Any] = {}
        for name in named:
            if name in value:
                out[name] = self.rewrite(_member_schema(props.get(name, []), patterns, declared, name),
                                         value[name], depth + 1)
        for name, v in value.items():
            if name in out:
                continue
            matching = [p for p in patterns if re.search(p, name)]
            if bare or open_extras or matching:
                out[name] = self.rewrite(_member_schema([], patterns, declared, name), v, depth + 1)
        return out


def _member_schema(subs: list, patterns: dict, declared: list, name: str) -> dict:
    """The schema a member's value meets: its properties' schemas, matching patterns, else the
    declared ``additionalProperties``."""
    subs = list(subs) + [s for p, s in patterns.items() if re.search(p, name)]
    if not subs:
        subs = [d for d in declared if isinstance(d, dict)]
    return {"allOf": [s for s in subs if isinstance(s, dict)]}


def _item_schema(parts: list[dict], i: int) -> dict:
    """The schema item ``i`` meets (``prefixItems``/array ``items``, else ``items``/``additionalItems``)."""
    subs = []
    for part in parts:
        prefix = part.get("prefixItems", part.get("items") if isinstance(part.get("items"), list) else None)
        if isinstance(prefix, list) and i < len(prefix):
            subs.append(prefix[i])
        elif isinstance(part.get("items"), dict):
            subs.append(part["items"])
        elif isinstance(part.get("additionalItems"), dict):
            subs.append(part["additionalItems"])
    return {"allOf": [s for s in subs if isinstance(s, dict)]}


def to_schema_order(schema: Any, instance: Any) -> Any:
    """``instance`` with every object's members in the default key order's layout for ``schema``
    (undeclared members dropped where the schema declares no extras). The result may no longer
    be valid: check it (:func:`schema_order_instances` does)."""
    return _Rewriter(schema).rewrite(schema, instance)


def schema_order_instances(schema: Any, instances: list[Any]) -> tuple[list[Any], int]:
    """The valid ``instances`` rewritten by :func:`to_schema_order` that ``jsonschema`` still
    accepts, and how many were dropped because the rewrite made them invalid."""
    rewriter = _Rewriter(schema)
    kept, dropped = [], 0
    for instance in instances:
        out = rewriter.rewrite(schema, instance)
        if rewriter._accepts(schema, out):
            kept.append(out)
        else:
            dropped += 1
    return kept, dropped


def accepted_in(schema: Any, instances: list[Any] | tuple, key_order: str) -> list[Any]:
    """The valid ``instances`` a grammar of ``key_order`` must accept: as they are under ``"any"``;
    rewritten into schema order (and still valid) under ``"schema"``."""
    return list(instances) if key_order == "any" else schema_order_instances(schema, list(instances))[0]
