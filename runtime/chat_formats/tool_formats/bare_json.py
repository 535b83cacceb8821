"""Bare JSON calls: an output that is, as a whole, one JSON call object (or a list of them) with no
wrapper tags, as Qwen2.5/Qwen2.5-Coder (``hermes``) and Llama 3.x (``llama3``) write under
``tool_choice: "auto"``: ``{"name": "f", "arguments": {...}}`` (``"parameters"`` accepted too).

It is a call only when every object names a declared tool and its arguments pass the tool's
schema (``jsonschema``); otherwise the output stays content. A streaming reader holds the output
back while it may still be such a call (it starts with ``{`` or ``[`` and no complete value is
followed by more text) and decides at the end of the output, so every chunking gives the same
result as the whole text.
"""

from __future__ import annotations

from typing import Any

import jsonschema
from radixlm.runtime.chat_formats.tool_formats.base import ParsedCall, decode_at, dump_args
from radixlm.runtime.chat_formats.tools import ToolSpec

_ARGS_KEYS = ("arguments", "parameters")


def bare_calls(text: str, tools: list[ToolSpec]) -> list[ParsedCall] | None:
    """The calls when the whole of ``text`` is one bare call object or a list of them, else None."""
    got = decode_at(text, 0)
    if got is None or text[got[1]:].strip() or not isinstance(got[0], (dict, list)):
        return None
    objs = got[0] if isinstance(got[0], list) else [got[0]]
    calls = [_declared_call(obj, tools) for obj in objs]
    return calls if calls and all(calls) else None  # type: ignore[return-value]


def _declared_call(obj: Any, tools: list[ToolSpec]) -> ParsedCall | None:
    """``{"name": <declared tool>, "arguments"|"parameters": <valid arguments>}`` as a call."""
    if not isinstance(obj, dict) or len(obj) != 2 or not isinstance(obj.get("name"), str):
        return None
    key = next((k for k in _ARGS_KEYS if k in obj), None)
    tool = next((t for t in tools if t.name == obj["name"]), None)
    if key is None or tool is None or not isinstance(obj[key], dict) or not _valid(tool.parameters, obj[key]):
        return None
    return ParsedCall(tool.name, dump_args(obj[key]))


def _valid(schema: Any, args: dict) -> bool:
    try:
        cls = jsonschema.validators.validator_for(schema)
        return cls(schema).is_valid(args)
    except (jsonschema.exceptions.SchemaError, TypeError, ValueError, RecursionError):
        return False  # a schema jsonschema cannot use: not a call we can vouch for


class BareJsonHold:
    """Streaming side: ``feed`` each delta; True while the output so far may still be a bare call
    (the caller holds it back); ``calls()`` at the end of the output decides."""

    def __init__(self, tools: list[ToolSpec]):
        self.tools = tools
        self.text = ""
        self._end: int | None = None  # where the complete leading JSON value ends, once it has

    def feed(self, delta: str) -> bool:
        """Add ``delta``; whether the whole output may still be a bare call."""
        self.text += delta
        head = self.text.lstrip()
        if not head:
            return True
        if head[0] not in "{[":
            return False
        if self._end is None and ("}" in delta or "]" in delta):  # a value can only end at one
            got = decode_at(self.text, 0)
            self._end = got[1] if got is not None else None
        return self._end is None or not self.text[self._end:].strip()

    def calls(self) -> list[ParsedCall] | None:
        """The bare calls of the complete output, or None (it is content)."""
        return bare_calls(self.text, self.tools) if self.tools else None
