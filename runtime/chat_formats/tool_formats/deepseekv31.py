"""DeepSeek V3.1: the V3 section markers, with ``NAME<｜tool▁sep｜>{json}`` per call.

``<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{...}<｜tool▁call▁end｜>...<｜tool▁calls▁end｜>``.
"""

from __future__ import annotations

import re
from typing import Any

from radixlm.runtime.chat_formats.tool_formats.base import NAME_RE, ParsedCall, ToolFormat
from radixlm.runtime.chat_formats.tool_formats.deepseekv3 import (
    CALL_CLOSE,
    CALL_OPEN,
    SECTION_CLOSE,
    SECTION_OPEN,
    SEP,
    section_calls,
)
from radixlm.runtime.chat_formats.tool_formats.grammar import json_args, lit, per_tool
from radixlm.runtime.chat_formats.tools import ToolSpec

_CALL = re.compile(re.escape(CALL_OPEN) + r"([^<\n]+?)" + re.escape(SEP) + r"(.*?)" + re.escape(CALL_CLOSE), re.S)


class DeepSeekV31Format(ToolFormat):
    """DeepSeek V3.1 (name, separator, JSON arguments)."""

    name = "deepseekv31"
    aliases = ("deepseek_v31",)
    openers = (SECTION_OPEN,)
    closer = SECTION_CLOSE
    open_marker = SECTION_OPEN
    forced_prefix = SECTION_OPEN + CALL_OPEN
    call_suffix = CALL_CLOSE + SECTION_CLOSE
    inner_markers = (CALL_OPEN, SEP, CALL_CLOSE)
    call_head = re.compile(re.escape(SECTION_OPEN + CALL_OPEN) + f"(?P<name>{NAME_RE}?)" + re.escape(SEP) + r"(?=\{)")
    call_separator = CALL_CLOSE + CALL_OPEN
    next_call_head = re.compile(re.escape(CALL_CLOSE) + r"\s*" + re.escape(CALL_OPEN) + f"(?P<name>{NAME_RE}?)"
                                + re.escape(SEP) + r"(?=\{)")

    def parse_block(self, block: str, tools: list[ToolSpec]) -> tuple[list[ParsedCall], int] | None:
        calls = section_calls(block, _CALL)
        return (calls, len(block)) if calls else None

    def body_constraint(self, tools: list[ToolSpec], name: str | None, max_calls: int = 1) -> dict[str, Any]:
        return per_tool(tools, name, lambda i, t: lit(t.name + SEP) + json_args(i, t), self.call_separator, max_calls)
