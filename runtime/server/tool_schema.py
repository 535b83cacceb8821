"""Checking each tool's ``parameters`` schema when the request arrives.

Under ``tool_choice: auto`` a call's schema is compiled only once the model starts a call, so a
broken schema would fail in the middle of an answer. Every tool is checked up front instead,
whatever ``tool_choice`` says: against its draft's metaschema (``jsonschema``), then every
``$ref`` must resolve (local JSON pointers, as the grammar compiler resolves them) and no chain
of ``$ref`` and in-place keywords may lead back to where it started without descending into a
property or an item (a schema that never ends). Errors are 400s naming
``tools[i].function.parameters`` and the JSON pointer.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import jsonschema
from radixlm.constrained import ConstraintError, resolve_ref
from radixlm.runtime.chat_formats.tools import ToolSpec
from radixlm.runtime.server.http_errors import APIError

# Keywords whose value is one schema, a list of schemas, or a map of name -> schema.
_ONE = ("additionalProperties", "additionalItems", "unevaluatedItems", "unevaluatedProperties", "items",
        "contains", "propertyNames", "not", "if", "then", "else")
_LIST = ("allOf", "anyOf", "oneOf", "prefixItems", "items")
_MAP = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas", "dependencies")
# Keywords that apply their schemas to the same instance: a cycle through only these never ends.
_IN_PLACE_ONE = ("not", "if", "then", "else")
_IN_PLACE_LIST = ("allOf", "anyOf", "oneOf")


class SchemaProblem(ValueError):
    """What is wrong with a schema, and where (a JSON pointer)."""

    def __init__(self, message: str, pointer: str):
        super().__init__(message)
        self.pointer = pointer


def check_tool_schemas(tools: list[ToolSpec]) -> None:
    """400 naming ``tools[i].function.parameters`` and the pointer for the first invalid schema."""
    for i, tool in enumerate(tools):
        param = f"tools[{i}].function.parameters"
        try:
            check_schema(tool.parameters)
        except SchemaProblem as e:
            raise APIError(400, f"{param}: {e} (at {e.pointer})", param=param, code="invalid_schema") from None
        except RecursionError:
            raise APIError(400, f"{param}: the schema nests too deeply to be checked", param=param,
                           code="invalid_schema") from None


def check_schema(schema: Any) -> None:
    """Raise :class:`SchemaProblem` unless ``schema`` is valid, its refs resolve and none cycles."""
    cls = jsonschema.validators.validator_for(schema if isinstance(schema, dict) else {})
    try:
        cls.check_schema(schema)
    except jsonschema.exceptions.SchemaError as e:
        raise SchemaProblem(e.message, _pointer("#", *e.path)) from None
    _RefGraph(schema).check_cycles()


class _RefGraph:
    """Every subschema reachable from the root (through schema keywords and resolved refs)."""

    def __init__(self, root: Any):
        self.root = root
        self.pointers: dict[int, str] = {}  # id(node) -> where it was first found
        self.nodes: list[Any] = []
        stack = [(root, "#")]
        while stack:
            node, pointer = stack.pop()
            if id(node) in self.pointers or not isinstance(node, dict):
                continue
            self.pointers[id(node)] = pointer
            self.nodes.append(node)
            stack.extend(_children(node, pointer))
            if isinstance(node.get("$ref"), str):
                stack.append((self.resolve(node["$ref"], pointer), _ref_pointer(node["$ref"])))

    def resolve(self, ref: str, pointer: str) -> Any:
        """The schema ``ref`` names; local JSON pointers only, as the grammar compiler resolves them."""
        where = f"{pointer}/$ref"
        if not ref.startswith("#"):
            raise SchemaProblem(f"$ref {ref!r} is not a local reference (#/...); remote schemas are not "
                                "supported", where)
        try:
            node, _ = resolve_ref(self.root, ref, where)
        except ConstraintError:
            raise SchemaProblem(f"$ref {ref!r} does not resolve", where) from None
        if not isinstance(node, (dict, bool)):
            raise SchemaProblem(f"$ref {ref!r} names a {type(node).__name__}, not a schema", where)
        return node

    def in_place(self, node: dict) -> Iterator[tuple[Any, str]]:
        """The schemas applied to the same instance as ``node``: (schema, the edge's pointer)."""
        pointer = self.pointers[id(node)]
        if isinstance(node.get("$ref"), str):
            yield self.resolve(node["$ref"], pointer), f"{pointer}/$ref"
        for key in _IN_PLACE_ONE:
            if isinstance(node.get(key), dict):
                yield node[key], f"{pointer}/{key}"
        for key in _IN_PLACE_LIST:
            if isinstance(node.get(key), list):
                for j, sub in enumerate(node[key]):
                    yield sub, f"{pointer}/{key}/{j}"
        if isinstance(node.get("dependentSchemas"), dict):
            for name, sub in node["dependentSchemas"].items():
                yield sub, _pointer(pointer, "dependentSchemas", name)

    def check_cycles(self) -> None:
        """Depth-first over the in-place edges; reaching a node still on the path is a cycle."""
        done: set[int] = set()
        for start in self.nodes:
            if id(start) in done:
                continue
            on_path = {id(start)}
            stack = [(start, self.in_place(start))]
            while stack:
                node, edges = stack[-1]
                nxt = next(edges, None)
                if nxt is None:
                    stack.pop()
                    on_path.discard(id(node))
                    done.add(id(node))
                    continue
                child, edge = nxt
                if not isinstance(child, dict) or id(child) in done:
                    continue
                if id(child) in on_path:
                    raise SchemaProblem(f"cyclic $ref: {edge} leads back to {self.pointers[id(child)]} "
                                        "without descending into a property or an item", edge)
                on_path.add(id(child))
                stack.append((child, self.in_place(child)))


def _children(node: dict, pointer: str) -> Iterator[tuple[Any, str]]:
    """Every subschema directly under ``node`` (schema keywords only: never data like ``enum``)."""
    for key in _ONE:
        if isinstance(node.get(key), (dict, bool)):
            yield node[key], _pointer(pointer, key)
    for key in _LIST:
        if isinstance(node.get(key), list):
            for j, sub in enumerate(node[key]):
                yield sub, _pointer(pointer, key, j)
    for key in _MAP:
        if isinstance(node.get(key), dict):
            for name, sub in node[key].items():
                yield sub, _pointer(pointer, key, name)


def _pointer(base: str, *parts: Any) -> str:
    """``base`` extended by ``parts``, escaped as JSON pointer tokens (``~0``, ``~1``)."""
    return "/".join([base, *(str(p).replace("~", "~0").replace("/", "~1") for p in parts)])


def _ref_pointer(ref: str) -> str:
    return ref if ref.startswith("#/") or ref == "#" else "#/" + ref[1:]
