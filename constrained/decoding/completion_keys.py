"""Which keys a completion writes first in an object: the required, then the declared, keys of
the schema at the object's document path (``{"a": [{`` is at ``("a", 0)``).

This only orders candidates: the matcher checks every byte, so a wrong guess (a branch of an
``anyOf`` that does not apply, a ``$ref`` cycle cut short) costs bytes, never validity. Without
it a completion in an object that takes extra members tries the grammar's literals in the order
they appear, and spells a large schema's every key as an extra member before the one it needs.
The grammar's literals themselves (``string_literals``: every key and const it spells) are looked
up by the open key's prefix (``literals_starting_with``).
"""

from __future__ import annotations

import bisect
import json
import re
from typing import Any

from radixlm.constrained.tables import TableSlot

_DEPTH = 8  # nested $ref / allOf / anyOf / oneOf levels followed per path step
_KEYS = TableSlot("schema_keys")  # per grammar: {path: keys}
_LITERALS = TableSlot("string_literals")  # per grammar: its string literals


def schema_keys(grammar: Any, path: tuple) -> list[bytes]:
    """Raw keys (quotes included) of the object at ``path`` in ``grammar``'s JSON Schema: its
    required ones first, then its declared ones; empty for other kinds of constraint."""
    if getattr(grammar, "kind", None) != "json_schema" or not isinstance(grammar.spec, dict):
        return []
    memo = _KEYS.of(grammar, dict)
    if path not in memo:
        memo[path] = _keys_at(grammar.spec, path)
    return memo[path]


def _keys_at(root: dict, path: tuple) -> list[bytes]:
    nodes = _expand(root, root)
    for step in path:
        nodes = [child for node in nodes for child in _expand(root, _child(node, step))]
        if not nodes:
            return []
    required = [k for node in nodes for k in node.get("required", ()) if isinstance(k, str)]
    named = [k for node in nodes if isinstance(node.get("properties"), dict) for k in node["properties"]]
    return [json.dumps(k, ensure_ascii=False).encode() for k in dict.fromkeys(required + named)]


def _child(node: dict, step: str | int) -> Any:
    """The subschema of member ``step`` (a key) or item ``step`` (an index) of ``node``."""
    if isinstance(step, str):
        props = node.get("properties")
        if isinstance(props, dict) and step in props:
            return props[step]
        extra = node.get("additionalProperties")
        return extra if isinstance(extra, dict) else None
    prefix = node.get("prefixItems")
    items = node.get("items")
    if isinstance(prefix, list) and step < len(prefix):
        return prefix[step]
    if isinstance(items, list):  # draft 4 tuples
        return items[step] if step < len(items) else node.get("additionalItems")
    return items if isinstance(items, dict) else None


def _expand(root: dict, node: Any, depth: int = 0) -> list[dict]:
    """``node`` and the schemas it refers to or combines (``$ref``, ``allOf``, ``anyOf``,
    ``oneOf``), as far as ``_DEPTH`` levels."""
    if not isinstance(node, dict) or depth > _DEPTH:
        return []
    out = [node]
    ref = node.get("$ref")
    if isinstance(ref, str):
        out += _expand(root, _pointer(root, ref), depth + 1)
    for key in ("allOf", "anyOf", "oneOf"):
        for sub in node.get(key, ()) if isinstance(node.get(key), list) else ():
            out += _expand(root, sub, depth + 1)
    return out


def _pointer(root: dict, ref: str) -> Any:
    """The local schema ``ref`` (``#/$defs/x``) names, or None."""
    if not ref.startswith("#"):
        return None
    node: Any = root
    for part in ref[1:].split("/")[1:]:
        part = part.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict):
            node = node.get(part)
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return None
    return node


def string_literals(grammar: Any) -> list[bytes]:
    """The JSON strings (quotes included) a grammar's Lark text spells as literals: keys, consts."""
    return _literals(grammar)[0]


def literals_starting_with(grammar: Any, prefix: bytes) -> list[bytes]:
    """``string_literals`` that start with ``prefix``, in their order: looked up in a sorted copy
    rather than read whole at every byte of a key, which cost a large schema's search most of its
    time (hundreds of keys)."""
    _, keys, rank = _literals(grammar)
    i = bisect.bisect_left(keys, prefix)
    found = []
    while i < len(keys) and keys[i].startswith(prefix):
        found.append(keys[i])
        i += 1
    return sorted(found, key=rank.__getitem__)


def _literals(grammar: Any) -> tuple[list[bytes], list[bytes], dict[bytes, int]]:
    """``grammar``'s literals in order, sorted, and the position of each (cached per grammar)."""
    return _LITERALS.of(grammar, lambda: _literals_of(getattr(grammar, "lark", "")))


def _literals_of(lark: str) -> tuple[list[bytes], list[bytes], dict[bytes, int]]:
    spelled = re.findall(r'"\\"((?:[^"\\]|\\\\)*?)\\""', lark)
    literals = [b'"' + k.encode() + b'"' for k in dict.fromkeys(spelled)]
    return literals, sorted(literals), {k: i for i, k in enumerate(literals)}
