"""Granite 3.x: ``<|tool_call|>`` then a JSON list of ``{"name", "arguments"}`` objects.

Granite 4 templates use the Hermes ``<tool_call>`` blocks instead (detected as ``hermes``).
"""

from __future__ import annotations

import json
import re
from typing import Any

from radixlm.runtime.chat_formats.tool_formats.base import ParsedCall, ToolFormat, json_head
from radixlm.runtime.chat_formats.tool_formats.grammar import json_args, lit, per_tool
from radixlm.runtime.chat_formats.tool_formats.json_calls import call_list
from radixlm.runtime.chat_formats.tools import ToolSpec

OPEN = "<|tool_call|>"


class GraniteFormat(ToolFormat, tags=(OPEN, None)):
    """A JSON list of calls after ``<|tool_call|>``, running to the end of the answer."""

    name = "granite"
    call_head = json_head(re.escape(OPEN) + r"\s*\[")

    def parse_block(self, block: str, tools: list[ToolSpec]) -> tuple[list[ParsedCall], int] | None:
        return call_list(block, len(OPEN))

    def body_constraint(self, tools: list[ToolSpec], name: str | None) -> dict[str, Any]:
        return per_tool(tools, name, lambda i, t: lit('[{"name": ' + json.dumps(t.name) + ', "arguments": ')
                        + json_args(i, t) + lit("}]"))
