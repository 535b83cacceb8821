"""The nouns of tool calling that every chat format shares: a declared tool (``ToolSpec``), a completed
call (``ToolCall``), and the JSON schema of one call in the ``<tool_call>`` family's layout
(``call_schema``). Parsing a request's ``tools`` field is the server's (``runtime/server/chat/tools.py``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from radixlm.constrained import SCHEMA_OPTIONS_KEY


@dataclass(frozen=True)
class ToolSpec:
    """One declared function tool; ``parameters`` is its arguments' JSON schema. ``template``: the
    request's own ``{"type": "function", "function": {...}}`` entry, exactly as sent."""

    name: str
    description: str | None = None
    parameters: dict = field(default_factory=lambda: {"type": "object", "properties": {}})
    template: dict | None = field(default=None, compare=False, repr=False)

    def to_template(self) -> dict[str, Any]:
        """The ``tools`` entry a chat template sees: the request's own entry when there is one (as
        transformers' ``apply_chat_template(messages, tools=...)`` passes it: every key, in the
        request's order, ``strict`` included), else the OpenAI shape built from the fields."""
        if self.template is not None:
            return self.template
        fn: dict[str, Any] = {"name": self.name, "parameters": self.parameters}
        if self.description is not None:
            fn["description"] = self.description
        return {"type": "function", "function": fn}


def call_schema(tools: list[ToolSpec], name: str | None = None) -> dict[str, Any]:
    """The JSON schema of one call: ``{"name": <declared name>, "arguments": <its parameters>}``."""
    chosen = [t for t in tools if name is None or t.name == name]
    # each tool's local $refs now point into the call schema where its parameters sit
    bases = ["#/properties/arguments"] if len(chosen) == 1 else \
        [f"#/anyOf/{k}/properties/arguments" for k in range(len(chosen))]
    variants = [
        {"type": "object",
         "properties": {"name": {"const": t.name}, "arguments": rebased(t.parameters, base)},
         "required": ["name", "arguments"], "additionalProperties": False}
        for t, base in zip(chosen, bases)
    ]
    schema = variants[0] if len(variants) == 1 else {"anyOf": variants}
    # The family's layout: "name" before "arguments", the arguments' keys in schema order, and
    # only the declared arguments (like OpenAI's strict function calling).
    return {**schema, SCHEMA_OPTIONS_KEY: {"property_order": "schema", "additional_properties": "declared"}}


def rebased(schema: Any, base: str) -> Any:
    """``schema`` with every local ``$ref`` (``#...``) prefixed by ``base``, the pointer where the
    schema is embedded in a larger one."""
    if isinstance(schema, list):
        return [rebased(x, base) for x in schema]
    if not isinstance(schema, dict):
        return schema
    return {k: base + v[1:] if k == "$ref" and isinstance(v, str) and v.startswith("#") else rebased(v, base)
            for k, v in schema.items()}


@dataclass
class ToolCall:
    """A completed call: ``arguments`` is the JSON text exactly as generated."""

    id: str
    name: str
    arguments: str

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "type": "function",
                "function": {"name": self.name, "arguments": self.arguments}}
