"""DeepSeek V3 / R1: calls in a ``<｜tool▁calls▁begin｜>`` section, arguments in a JSON code block.

``<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\\n```json\\n{...}\\n```<｜tool▁call▁end｜>``
(repeated) ``<｜tool▁calls▁end｜>``. The markers use the fullwidth bar and the ``▁`` of the vocabulary.
"""

from __future__ import annotations

import re
from typing import Any

from radixlm.runtime.chat_formats.tool_formats.base import (
    NAME_RE,
    ParsedCall,
    ToolFormat,
    calls_in,
    dump_args,
    json_object,
)
from radixlm.runtime.chat_formats.tool_formats.grammar import json_args, lit, per_tool
from radixlm.runtime.chat_formats.tools import ToolSpec

SECTION_OPEN, SECTION_CLOSE = "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"
CALL_OPEN, CALL_CLOSE, SEP = "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>", "<｜tool▁sep｜>"
_CALL = re.compile(re.escape(CALL_OPEN) + r"function" + re.escape(SEP) + r"([^\n]+)\n```json\n(.*?)\n```"
                   + re.escape(CALL_CLOSE), re.S)


def section_calls(block: str, pattern: re.Pattern) -> list[ParsedCall] | None:
    """Every call of a section (nothing but calls and whitespace inside), or None."""
    if not (block.startswith(SECTION_OPEN) and block.endswith(SECTION_CLOSE)):
        return None

    def call_of(m: re.Match) -> ParsedCall | None:
        args = json_object(m.group(2))
        return None if args is None else ParsedCall(m.group(1).strip(), dump_args(args))
    return calls_in(block[len(SECTION_OPEN):-len(SECTION_CLOSE)], pattern, call_of)


class DeepSeekV3Format(ToolFormat):
    """DeepSeek V3 and R1 (``function<｜tool▁sep｜>name`` and a ```json block)."""

    name = "deepseekv3"
    aliases = ("deepseek_v3", "deepseek-r1", "deepseekr1")
    openers = (SECTION_OPEN,)
    closer = SECTION_CLOSE
    open_marker = SECTION_OPEN
    forced_prefix = SECTION_OPEN + CALL_OPEN + "function" + SEP
    call_suffix = CALL_CLOSE + SECTION_CLOSE
    inner_markers = (CALL_OPEN, SEP, CALL_CLOSE)
    call_head = re.compile(re.escape(SECTION_OPEN + CALL_OPEN + "function" + SEP) + f"(?P<name>{NAME_RE})"
                           + r"\n```json\n(?=\{)")
    call_separator = CALL_CLOSE + "\n" + CALL_OPEN + "function" + SEP
    next_call_head = re.compile(re.escape(CALL_CLOSE) + r"\s*" + re.escape(CALL_OPEN + "function" + SEP)
                                + f"(?P<name>{NAME_RE})" + r"\n```json\n(?=\{)")

    def parse_block(self, block: str, tools: list[ToolSpec]) -> tuple[list[ParsedCall], int] | None:
        calls = section_calls(block, _CALL)
        return (calls, len(block)) if calls else None

    def body_constraint(self, tools: list[ToolSpec], name: str | None, max_calls: int = 1) -> dict[str, Any]:
        return per_tool(tools, name, lambda i, t: lit(t.name + "\n```json\n") + json_args(i, t) + lit("\n```"),
                        self.call_separator, max_calls)
