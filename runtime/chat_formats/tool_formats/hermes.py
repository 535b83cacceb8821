"""Hermes / Qwen2.5 / Qwen3: ``<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>``.

A forced body is one JSON object per block in the template's spelling (``{"name": "NAME",
"arguments": ARGS}`` on its own line), the arguments under the tool's schema; several blocks
follow one another in a parallel turn.
"""

from __future__ import annotations

import json
import re
from typing import Any

from radixlm.runtime.chat_formats.tool_formats.base import (
    ParsedCall,
    ToolFormat,
    json_head,
    json_object,
    named_call,
)
from radixlm.runtime.chat_formats.tool_formats.grammar import json_args, lit, per_tool
from radixlm.runtime.chat_formats.tools import ToolSpec

OPEN, CLOSE = "<tool_call>", "</tool_call>"


class HermesFormat(ToolFormat, tags=(OPEN, CLOSE)):
    """One JSON object per ``<tool_call>`` block."""

    name = "hermes"
    syntax = ("Hermes / Qwen2.5 / Qwen3: ``<tool_call>\\n{\"name\": ..., \"arguments\": "
              "{...}}\\n</tool_call>``.")
    aliases = ("qwen25", "qwen", "qwen3")
    call_head = json_head(re.escape(OPEN))
    bare_json_calls = True  # Qwen2.5(-Coder) / Llama 3.x write bare call objects under auto
    call_separator = CLOSE + "\n" + OPEN

    def parse_block(self, block: str, tools: list[ToolSpec]) -> tuple[list[ParsedCall], int] | None:
        if not block.endswith(CLOSE):
            return None
        call = named_call(json_object(block[len(OPEN):-len(CLOSE)].strip()))
        return ([call], len(block)) if call else None

    def body_constraint(self, tools: list[ToolSpec], name: str | None, max_calls: int = 1) -> dict[str, Any]:
        return per_tool(tools, name, lambda i, t: lit('\n{"name": ' + json.dumps(t.name) + ', "arguments": ')
                        + json_args(i, t) + lit("}\n"), self.call_separator, max_calls)
