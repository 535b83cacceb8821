"""Hermes / Qwen2.5 / Qwen3: ``<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>``.

The body is one JSON object, generated under the JSON-schema constraint of the call
(:func:`radixlm.runtime.chat_formats.tools.call_schema`).
"""

from __future__ import annotations

import re
from typing import Any

from radixlm.runtime.chat_formats.tool_formats.base import (
    ParsedCall,
    ToolFormat,
    json_head,
    json_object,
    named_call,
)
from radixlm.runtime.chat_formats.tools import ToolSpec, call_schema

OPEN, CLOSE = "<tool_call>", "</tool_call>"


class HermesFormat(ToolFormat, tags=(OPEN, CLOSE)):
    """One JSON object per ``<tool_call>`` block."""

    name = "hermes"
    aliases = ("qwen25", "qwen", "qwen3")
    call_head = json_head(re.escape(OPEN))
    bare_json_calls = True  # Qwen2.5(-Coder) / Llama 3.x write bare call objects under auto

    def parse_block(self, block: str, tools: list[ToolSpec]) -> tuple[list[ParsedCall], int] | None:
        if not block.endswith(CLOSE):
            return None
        call = named_call(json_object(block[len(OPEN):-len(CLOSE)].strip()))
        return ([call], len(block)) if call else None

    def body_constraint(self, tools: list[ToolSpec], name: str | None) -> dict[str, Any]:
        return {"json_schema": call_schema(tools, name)}
