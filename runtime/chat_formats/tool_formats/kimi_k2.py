"""Kimi-K2: ``<|tool_calls_section_begin|><|tool_call_begin|>functions.NAME:IDX<|tool_call_argument_begin|>{json}<|tool_call_end|>...<|tool_calls_section_end|>``.

The model writes each call's id itself (``functions.NAME:IDX``); the API returns it as the id.
"""

from __future__ import annotations

import re
from typing import Any

from radixlm.runtime.chat_formats.tool_formats.base import (
    ParsedCall,
    ToolFormat,
    calls_in,
    dump_args,
    json_object,
)
from radixlm.runtime.chat_formats.tool_formats.grammar import json_args, lit, per_tool
from radixlm.runtime.chat_formats.tools import ToolSpec

SECTION_OPEN, SECTION_CLOSE = "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>"
CALL_OPEN, ARGS_OPEN, CALL_CLOSE = "<|tool_call_begin|>", "<|tool_call_argument_begin|>", "<|tool_call_end|>"
_CALL = re.compile(re.escape(CALL_OPEN) + r"\s*((?:functions\.)?([A-Za-z0-9_.-]+?):(\d+))\s*"
                   + re.escape(ARGS_OPEN) + r"(.*?)" + re.escape(CALL_CLOSE), re.S)


class KimiK2Format(ToolFormat):
    """Kimi-K2 calls in a section; ids come from the text."""

    name = "kimi_k2"
    syntax = ("Kimi-K2: "
              "``<|tool_calls_section_begin|><|tool_call_begin|>functions.NAME:IDX<|tool_call_argument_begin|>{json}<|tool_call_end|>...<|tool_calls_section_end|>``.")
    aliases = ("kimi",)
    openers = (SECTION_OPEN,)
    closer = SECTION_CLOSE
    open_marker = SECTION_OPEN
    forced_prefix = SECTION_OPEN + CALL_OPEN + "functions."
    call_suffix = CALL_CLOSE + SECTION_CLOSE
    inner_markers = (CALL_OPEN, ARGS_OPEN, CALL_CLOSE)
    call_separator = CALL_CLOSE + CALL_OPEN + "functions."
    next_call_head = re.compile(re.escape(CALL_CLOSE) + r"\s*" + re.escape(CALL_OPEN)
                                + r"\s*(?P<id>functions\.(?P<name>[A-Za-z0-9_.-]+?):\d+)\s*" + re.escape(ARGS_OPEN) + r"(?=\{)")
    call_head = re.compile(re.escape(SECTION_OPEN + CALL_OPEN) + r"\s*(?P<id>functions\.(?P<name>[A-Za-z0-9_.-]+?):\d+)\s*"
                           + re.escape(ARGS_OPEN) + r"(?=\{)")

    def parse_block(self, block: str, tools: list[ToolSpec]) -> tuple[list[ParsedCall], int] | None:
        if not block.endswith(SECTION_CLOSE):
            return None

        def call_of(m: re.Match) -> ParsedCall | None:
            args = json_object(m.group(4))
            call_id = m.group(1) if m.group(1).startswith("functions.") else f"functions.{m.group(1)}"
            return None if args is None else ParsedCall(m.group(2), dump_args(args), call_id)
        calls = calls_in(block[len(SECTION_OPEN):-len(SECTION_CLOSE)], _CALL, call_of)
        return (calls, len(block)) if calls else None

    def body_constraint(self, tools: list[ToolSpec], name: str | None, max_calls: int = 1) -> dict[str, Any]:
        return per_tool(tools, name, lambda i, t: lit(t.name + ":") + "[0-9]" + lit(ARGS_OPEN) + json_args(i, t),
                        self.call_separator, max_calls)

    def new_call_id(self, name: str, index: int) -> str:
        return f"functions.{name}:{index}"
