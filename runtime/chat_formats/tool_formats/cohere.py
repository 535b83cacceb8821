"""Cohere Command R7B and Command A: a JSON list of calls between ``<|START_ACTION|>`` and ``<|END_ACTION|>``.

``<|START_ACTION|>[\\n    {"tool_call_id": "0", "tool_name": "NAME", "parameters": {...}},\\n    ...\\n]<|END_ACTION|>``,
as the templates render earlier calls. Call ids are the server's (the template renumbers them).
"""

from __future__ import annotations

import json
import re
from typing import Any

from radixlm.runtime.chat_formats.tool_formats.base import NAME_RE, ParsedCall, ToolFormat, dump_args
from radixlm.runtime.chat_formats.tool_formats.grammar import json_args, lit, per_tool
from radixlm.runtime.chat_formats.tool_formats.json_calls import decode_at
from radixlm.runtime.chat_formats.tools import ToolSpec

OPEN, CLOSE = "<|START_ACTION|>", "<|END_ACTION|>"
_HEAD = r'\{\s*"tool_call_id"\s*:\s*"[0-9]+"\s*,\s*"tool_name"\s*:\s*"(?P<name>' + NAME_RE + r')"\s*,\s*"parameters"\s*:\s*(?=\{)'


class CohereFormat(ToolFormat):
    """A JSON list of ``{"tool_call_id", "tool_name", "parameters"}`` objects in an action block."""

    name = "cohere"
    aliases = ("command_r7b", "command-r7b", "command_a", "command-a", "cohere2")
    openers, closer, open_marker = (OPEN,), CLOSE, OPEN
    forced_prefix, call_suffix = OPEN + "[\n    ", "\n]" + CLOSE
    call_separator = ",\n    "
    inner_markers = ("<|START_THINKING|>", "<|END_THINKING|>")
    call_head = re.compile(re.escape(OPEN) + r"\s*\[\s*" + _HEAD)
    next_call_head = re.compile(r",\s*" + _HEAD)

    def parse_block(self, block: str, tools: list[ToolSpec]) -> tuple[list[ParsedCall], int] | None:
        got = decode_at(block, len(OPEN)) if block.endswith(CLOSE) else None
        if got is None or not isinstance(got[0], list) or not got[0] or block[got[1]:-len(CLOSE)].strip():
            return None
        calls = []
        for obj in got[0]:
            if not (isinstance(obj, dict) and isinstance(obj.get("tool_name"), str)
                    and isinstance(obj.get("parameters"), dict)):
                return None
            calls.append(ParsedCall(obj["tool_name"], dump_args(obj["parameters"])))
        return calls, len(block)

    def body_constraint(self, tools: list[ToolSpec], name: str | None, max_calls: int = 1) -> dict[str, Any]:
        return per_tool(tools, name, lambda i, t: lit('{"tool_call_id": "') + "[0-9]" + lit(
            '", "tool_name": ' + json.dumps(t.name) + ', "parameters": ') + json_args(i, t) + lit("}"),
            self.call_separator, max_calls)
