"""A chat request's tools: their schemas checked on arrival, ``tools`` / ``tool_choice`` parsed, and calls
extracted from the output.

Checking each tool's ``parameters`` schema when the request arrives.

Under ``tool_choice: auto`` a call's schema is compiled only once the model starts a call, so a
broken schema would fail in the middle of an answer. Every tool is checked up front instead,
whatever ``tool_choice`` says: against its draft's metaschema (``jsonschema``), then every
``$ref`` must resolve (local JSON pointers, as the grammar compiler resolves them) and no chain
of ``$ref`` and in-place keywords may lead back to where it started without descending into a
property or an item (a schema that never ends). Errors are 400s naming
``tools[i].function.parameters`` and the JSON pointer.

Tool calling: parsing ``tools`` / ``tool_choice``, the constraint for a call, and extracting calls.

A call is generated in the chat template's format (the server's tool-call family; Hermes:
``<tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>``), always under the family's call
grammar (:mod:`radixlm.runtime.chat_formats.tool_formats.grammar`): the name is one of the declared
tools (or the one named) and the arguments follow that tool's whole ``parameters`` schema, so every
call parses and validates.

- ``required`` / a named function: the prompt ends with ``<tool_call>\n`` and the whole completion
  is the constrained object.
- ``auto``: two-phase generation. Phase 1 generates freely with ``<tool_call>`` as a stop string;
  if the model stops there, phase 2 appends the marker to the exact token sequence so far (a radix
  cache hit) and continues under the call constraint. Then phase 1 resumes after ``</tool_call>``
  (parallel calls) until the model stops or ``max_tokens`` is spent.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import jsonschema
from radixlm.constrained import ConstraintError, resolve_ref
from radixlm.runtime.chat_formats.tools import ToolSpec
from radixlm.runtime.server.transport.body import APIError, FieldReader, bad_request, client_message

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


MAX_CALLS_PER_TURN = 8
_NAME_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
# The generated object starts with its name (the schema lists ``name`` first); arguments follow.
_HEADER_RE = re.compile(r'^\s*\{\s*"name"\s*:\s*"((?:[^"\\]|\\.)*)"\s*,\s*"arguments"\s*:\s*')


@dataclass(frozen=True)
class ToolChoice:
    """``mode``: none | auto | required | named (then ``name`` is the function). ``allowed``
    (``{"type": "allowed_tools"}``): the only tools a call may name; every tool stays in the prompt."""

    mode: str = "none"
    name: str | None = None
    allowed: tuple[str, ...] | None = None

    @property
    def forces_call(self) -> bool:
        return self.mode in ("required", "named")

    def callable_tools(self, tools: list[ToolSpec]) -> list[ToolSpec]:
        """The tools a call may name: ``allowed``'s, or all of them."""
        return tools if self.allowed is None else [t for t in tools if t.name in self.allowed]


def parse_tools(raw: list | None) -> list[ToolSpec]:
    """Validate ``tools`` (400 naming ``tools[i]...``); names must be unique."""
    tools: list[ToolSpec] = []
    for i, item in enumerate(raw or []):
        r = FieldReader(item, f"tools[{i}]") if isinstance(item, dict) else None
        if r is None:
            raise bad_request(f"'tools[{i}]' must be an object", param=f"tools[{i}]", code="invalid_type")
        r.get("type", "str", required=True, choices=("function",))
        fn = FieldReader(r.get("function", "object", required=True), f"tools[{i}].function")
        name = fn.get("name", "str", required=True)
        if not _NAME_RE.match(name):
            raise bad_request(f"'tools[{i}].function.name' must match [A-Za-z0-9_-]{{1,64}}, got {name!r}",
                              param=f"tools[{i}].function.name", code="invalid_value")
        if any(t.name == name for t in tools):
            raise bad_request(f"duplicate tool name {name!r}", param=f"tools[{i}].function.name",
                              code="invalid_value")
        params = fn.get("parameters", "object", {"type": "object", "properties": {}})
        fn.get("strict", "bool")
        tools.append(ToolSpec(name, fn.get("description", "str"), params, template=item))
        fn.reject_unknown()
        r.reject_unknown()
    return tools


def parse_tool_choice(raw: str | dict | None, tools: list[ToolSpec]) -> ToolChoice:
    """``tool_choice`` against the declared tools; default auto with tools, none without."""
    if raw is None:
        return ToolChoice("auto" if tools else "none")
    if isinstance(raw, str):
        if raw not in ("none", "auto", "required"):
            raise bad_request(f"'tool_choice' must be none, auto, required or a function object, got {raw!r}",
                              param="tool_choice", code="invalid_value")
        if raw != "none" and not tools:
            raise bad_request(f"tool_choice {raw!r} requires 'tools'", param="tool_choice")
        return ToolChoice(raw)
    r = FieldReader(raw, "tool_choice")
    if r.get("type", "str", required=True, choices=("function", "allowed_tools")) == "allowed_tools":
        return _allowed_tools(r, tools)
    name = FieldReader(r.get("function", "object", required=True), "tool_choice.function").get(
        "name", "str", required=True)
    r.reject_unknown()
    if not any(t.name == name for t in tools):
        raise bad_request(f"tool_choice names function {name!r}, which is not in 'tools'",
                          param="tool_choice.function.name", code="invalid_value")
    return ToolChoice("named", name)


def _allowed_tools(r: FieldReader, tools: list[ToolSpec]) -> ToolChoice:
    """``{"type": "allowed_tools", "allowed_tools": {"mode": "auto" | "required", "tools": [...]}}``;
    each entry names a declared function (``{"type": "function", "function": {"name"}}``, or the
    Responses API's flat ``{"type": "function", "name"}``)."""
    sub = r.sub(r.get("allowed_tools", "object", required=True), "allowed_tools")
    mode = sub.get("mode", "str", required=True, choices=("auto", "required"))
    entries = sub.get("tools", "list", required=True)
    sub.reject_unknown()
    r.reject_unknown()
    if not entries:
        raise bad_request("'tool_choice.allowed_tools.tools' must not be empty", param="tool_choice.allowed_tools.tools",
                          code="invalid_value")
    names = []
    for j, entry in enumerate(entries):
        path = f"tool_choice.allowed_tools.tools[{j}]"
        if not isinstance(entry, dict):
            raise bad_request(f"'{path}' must be an object", param=path, code="invalid_type")
        e = FieldReader(entry, path)
        e.get("type", "str", required=True, choices=("function",))
        fn = e.get("function", "object")
        name_at = e.sub(fn, "function") if fn is not None else e
        name = name_at.get("name", "str", required=True)
        name_at.reject_unknown()
        e.reject_unknown()
        if not any(t.name == name for t in tools):
            raise bad_request(f"'{name_at.path('name')}' names function {name!r}, which is not in 'tools'",
                              param=name_at.path("name"), code="invalid_value")
        names.append(name)
    return ToolChoice(mode, allowed=tuple(names))


def legacy_functions(r: FieldReader) -> tuple[list | None, str | dict | None]:
    """The legacy ``functions`` / ``function_call`` as ``tools`` / ``tool_choice`` values (None, None
    when absent); with ``tools`` or ``tool_choice`` also given, a 400."""
    functions = r.get("functions", "list")
    call = r.get("function_call", ("str", "object"))
    if functions is None and call is None:
        return None, None
    for new, old in (("tools", "functions"), ("tool_choice", "function_call")):
        if r.has(new) and r.has(old):
            raise bad_request(f"'{old}' is the legacy form of '{new}': send one of them", param=old,
                              code="invalid_value")
    tools = None if functions is None else [{"type": "function", "function": f} for f in functions]
    if isinstance(call, dict):
        sub = r.sub(call, "function_call")
        call = {"type": "function", "function": {"name": sub.get("name", "str", required=True)}}
        sub.reject_unknown()
    return tools, call


_LEGACY_NAMES = ((re.compile(r"\btools\[(\d+)\]\.function\b"), r"functions[\1]"),
                 (re.compile(r"\btools\[(\d+)\]"), r"functions[\1]"),
                 (re.compile(r"\btool_choice\.function\b"), "function_call"),
                 (re.compile(r"\btool_choice\b"), "function_call"))


def legacy_error(err: APIError) -> APIError:
    """``err`` naming the legacy fields the request sent (``functions[0].name``, ``function_call``)
    instead of the tools it was read as."""
    if not err.param:
        return err
    param, message = err.param, err.message
    for pattern, repl in _LEGACY_NAMES:
        param, message = pattern.sub(repl, param, count=1), pattern.sub(repl, message)
        if param != err.param:
            break
    return APIError(err.status, message, param=param, code=err.code, retry_after_s=err.retry_after_s)


def error_pointer(exc: BaseException) -> str | None:
    """The JSON pointer a constraint error names (its ``pointer``, or the ``(at #/...)`` it ends with)."""
    pointer = getattr(exc, "pointer", None)
    if pointer:
        return pointer
    m = re.search(r"\(at (#?/[^)]*)\)\s*$", str(exc))
    return m.group(1) if m else None


def constraint_error(exc: ValueError, tools: list[ToolSpec], name: str | None) -> APIError | None:
    """Re-point a constraint error inside :func:`call_schema`'s schema at the tool that caused it
    (None when the error is not about a tool's parameters)."""
    pointer = error_pointer(exc) or ""
    chosen = [t for t in tools if name is None or t.name == name]
    m = re.match(r"^#?(?:/anyOf/(\d+))?/properties/arguments(.*)$", pointer)
    if not m or int(m.group(1) or 0) >= len(chosen):
        return None
    index = tools.index(chosen[int(m.group(1) or 0)])
    inner = "#" + (m.group(2) or "")
    message = client_message(str(exc)).replace(pointer, inner)
    return APIError(400, f"tools[{index}].function.parameters: {message}",
                    param=f"tools[{index}].function.parameters", code="unsupported_schema")


def new_call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


class CallExtractor:
    """Feeds on the generated call object's text; yields the name once, then argument deltas.

    The argument deltas concatenate to :meth:`finish`'s ``arguments``: the trailing ``}`` that
    closes the outer object (and whitespace) is held back until the object is complete.
    """

    def __init__(self) -> None:
        self.text = ""
        self.name: str | None = None
        self._args_from: int | None = None
        self.sent = ""

    def feed(self, delta: str) -> tuple[str | None, str]:
        """Add generated text; return (the name if it just became known, new argument text)."""
        self.text += delta
        new_name = None
        if self._args_from is None:
            m = _HEADER_RE.match(self.text)
            if not m:
                return None, ""
            self.name, self._args_from = json.loads(f'"{m.group(1)}"'), m.end()
            new_name = self.name
        visible = self.text[self._args_from:].strip()
        if visible.endswith("}"):
            visible = visible[:-1].rstrip()
        if not visible.startswith(self.sent):
            return new_name, ""
        delta_args, self.sent = visible[len(self.sent):], visible
        return new_name, delta_args

    def finish(self) -> tuple[str, str] | None:
        """(name, arguments JSON text) if the object is complete and well-formed, else None."""
        try:
            obj = json.loads(self.text)
        except json.JSONDecodeError:
            return None
        if not isinstance(obj, dict) or not isinstance(obj.get("name"), str) or "arguments" not in obj:
            return None
        if self._args_from is not None:
            raw = self.text[self._args_from:].strip()[:-1].rstrip()
            try:
                if json.loads(raw) == obj["arguments"]:
                    return obj["name"], raw
            except json.JSONDecodeError:
                pass
        return obj["name"], json.dumps(obj["arguments"], ensure_ascii=False)
