"""Functionary v3.1 (Llama 3.1 based): ``<function=NAME>{...JSON arguments...}</function>``.

Several calls follow one another; the template renders an earlier call the same way (its arguments
``| tojson``). The arguments stream as they are generated.
"""

from __future__ import annotations

import re
from typing import Any

from radixlm.runtime.chat_formats.tool_formats.base import (
    NAME_RE,
    ParsedCall,
    ToolFormat,
    dump_args,
    json_object,
)
from radixlm.runtime.chat_formats.tool_formats.grammar import json_args, lit, per_tool
from radixlm.runtime.chat_formats.tools import ToolSpec

OPEN, CLOSE = "<function=", "</function>"
_CALL = re.compile(re.escape(OPEN) + f"({NAME_RE})>(.*)" + re.escape(CLOSE) + "$", re.S)


class FunctionaryV31Format(ToolFormat):
    """One ``<function=NAME>`` block per call, JSON arguments inside."""

    name = "functionary_v31"
    aliases = ("functionary-v3.1", "functionary_llama31", "functionary")
    openers, closer, open_marker, forced_prefix, call_suffix = (OPEN,), CLOSE, OPEN, OPEN, CLOSE
    call_separator = CLOSE + OPEN
    call_head = re.compile(re.escape(OPEN) + f"(?P<name>{NAME_RE})>(?=\\{{)")
    next_call_head = re.compile(re.escape(CLOSE) + r"\s*" + re.escape(OPEN) + f"(?P<name>{NAME_RE})>(?=\\{{)")

    def parse_block(self, block: str, tools: list[ToolSpec]) -> tuple[list[ParsedCall], int] | None:
        m = _CALL.match(block)
        args = json_object(m.group(2).strip()) if m else None
        return ([ParsedCall(m.group(1), dump_args(args))], len(block)) if m and args is not None else None

    def body_constraint(self, tools: list[ToolSpec], name: str | None, max_calls: int = 1) -> dict[str, Any]:
        return per_tool(tools, name, lambda i, t: lit(t.name + ">") + json_args(i, t), self.call_separator, max_calls)
