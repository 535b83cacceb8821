"""Cohere Command R7B and Command A: a JSON list of calls between ``<|START_ACTION|>`` and ``<|END_ACTION|>``;
Command R / R+: the same list (without ids) in an ``Action:`` JSON code block.

``<|START_ACTION|>[\\n    {"tool_call_id": "0", "tool_name": "NAME", "parameters": {...}},\\n    ...\\n]<|END_ACTION|>``
and ``Action:\\n```json\\n[\\n    {"tool_name": "NAME", "parameters": {...}}\\n]```\\n``, as the templates render
earlier calls. Call ids are the server's (the templates renumber them).
"""

from __future__ import annotations

import json
import re
from typing import Any

from radixlm.runtime.chat_formats.tool_formats.base import (
    NAME_RE,
    ParsedCall,
    ToolFormat,
    decode_at,
    dump_args,
)
from radixlm.runtime.chat_formats.tool_formats.grammar import json_args, lit, per_tool
from radixlm.runtime.chat_formats.tools import ToolSpec

OPEN, CLOSE = "<|START_ACTION|>", "<|END_ACTION|>"
_HEAD = r'\{\s*"tool_call_id"\s*:\s*"[0-9]+"\s*,\s*"tool_name"\s*:\s*"(?P<name>' + NAME_RE + r')"\s*,\s*"parameters"\s*:\s*(?=\{)'


def action_list(block: str, start: int, end: int) -> tuple[list[ParsedCall], int] | None:
    """The calls of a block whose text from ``start`` to ``end`` is a JSON list of
    ``{"tool_name", "parameters"}`` objects (whitespace around it allowed)."""
    got = decode_at(block, start)
    if got is None or not isinstance(got[0], list) or not got[0] or got[1] > end or block[got[1]:end].strip():
        return None
    calls = []
    for obj in got[0]:
        if not (isinstance(obj, dict) and isinstance(obj.get("tool_name"), str)
                and isinstance(obj.get("parameters"), dict)):
            return None
        calls.append(ParsedCall(obj["tool_name"], dump_args(obj["parameters"])))
    return calls, len(block)


class CohereFormat(ToolFormat):
    """A JSON list of ``{"tool_call_id", "tool_name", "parameters"}`` objects in an action block."""

    name = "cohere"
    syntax = ("Cohere Command R7B and Command A: a JSON list of calls between ``<|START_ACTION|>`` and "
              "``<|END_ACTION|>``;\nCommand R / R+: the same list (without ids) in an ``Action:`` JSON "
              "code block.")
    aliases = ("command_r7b", "command-r7b", "command_a", "command-a", "cohere2")
    openers, closer, open_marker = (OPEN,), CLOSE, OPEN
    forced_prefix, call_suffix = OPEN + "[\n    ", "\n]" + CLOSE
    call_separator = ",\n    "
    inner_markers = ("<|START_THINKING|>", "<|END_THINKING|>")
    call_head = re.compile(re.escape(OPEN) + r"\s*\[\s*" + _HEAD)
    next_call_head = re.compile(r",\s*" + _HEAD)

    def parse_block(self, block: str, tools: list[ToolSpec]) -> tuple[list[ParsedCall], int] | None:
        return action_list(block, len(OPEN), len(block) - len(CLOSE)) if block.endswith(CLOSE) else None

    def body_constraint(self, tools: list[ToolSpec], name: str | None, max_calls: int = 1) -> dict[str, Any]:
        return per_tool(tools, name, lambda i, t: lit('{"tool_call_id": "') + "[0-9]" + lit(
            '", "tool_name": ' + json.dumps(t.name) + ', "parameters": ') + json_args(i, t) + lit("}"),
            self.call_separator, max_calls)


R_OPEN, R_CLOSE = "Action:\n```json\n", "]```"
_R_HEAD = r'\{\s*"tool_name"\s*:\s*"(?P<name>' + NAME_RE + r')"\s*,\s*"parameters"\s*:\s*(?=\{)'


class CommandRFormat(ToolFormat):
    """Command R / R+: a JSON list of ``{"tool_name", "parameters"}`` objects in an ``Action:`` block."""

    name = "command_r"
    syntax = ("Cohere Command R7B and Command A: a JSON list of calls between ``<|START_ACTION|>`` and "
              "``<|END_ACTION|>``;\nCommand R / R+: the same list (without ids) in an ``Action:`` JSON "
              "code block.")
    aliases = ("command-r", "command_r_plus", "command-r-plus")
    openers, closer, open_marker = (R_OPEN,), R_CLOSE, R_OPEN
    forced_prefix, call_suffix = R_OPEN + "[\n    ", "\n" + R_CLOSE
    call_separator = ",\n    "
    call_head = re.compile(re.escape(R_OPEN) + r"\s*\[\s*" + _R_HEAD)
    next_call_head = re.compile(r",\s*" + _R_HEAD)

    def parse_block(self, block: str, tools: list[ToolSpec]) -> tuple[list[ParsedCall], int] | None:
        if not block.endswith(R_CLOSE):
            return None
        return action_list(block, len(R_OPEN), len(block) - len("```"))  # the closer holds the list's ']'

    def body_constraint(self, tools: list[ToolSpec], name: str | None, max_calls: int = 1) -> dict[str, Any]:
        return per_tool(tools, name, lambda i, t: lit('{"tool_name": ' + json.dumps(t.name) + ', "parameters": ')
                        + json_args(i, t) + lit("}"), self.call_separator, max_calls)
