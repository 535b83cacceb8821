"""Granite 3.x: ``<|tool_call|>`` then a JSON list of ``{"name", "arguments"}`` objects.

Granite 4 templates use the Hermes ``<tool_call>`` blocks instead (detected as ``hermes``).
"""

from __future__ import annotations

import json
import re
from typing import Any

from radixlm.runtime.chat_formats.tool_formats.base import ParsedCall, ToolFormat, call_list, json_head
from radixlm.runtime.chat_formats.tool_formats.grammar import json_args, lit, per_tool
from radixlm.runtime.chat_formats.tools import ToolSpec

OPEN = "<|tool_call|>"


class GraniteFormat(ToolFormat):
    """A JSON list of calls after ``<|tool_call|>``, running to the end of the answer."""

    # the calls are one JSON list: its bracket is part of the forced text, the calls inside it
    openers, closer, open_marker, forced_prefix, call_suffix = (OPEN,), None, OPEN, OPEN + "[", "]"
    call_separator = ", "
    next_call_head = json_head(r",\s*")

    name = "granite"
    syntax = "Granite 3.x: ``<|tool_call|>`` then a JSON list of ``{\"name\", \"arguments\"}`` objects."
    call_head = json_head(re.escape(OPEN) + r"\s*\[")

    def parse_block(self, block: str, tools: list[ToolSpec]) -> tuple[list[ParsedCall], int] | None:
        return call_list(block, len(OPEN))

    def body_constraint(self, tools: list[ToolSpec], name: str | None, max_calls: int = 1) -> dict[str, Any]:
        return per_tool(tools, name, lambda i, t: lit('{"name": ' + json.dumps(t.name) + ', "arguments": ')
                        + json_args(i, t) + lit("}"), self.call_separator, max_calls)
