"""GLM-4.5 / 4.6 / 4.7: ``<tool_call>NAME\\n<arg_key>k</arg_key>\\n<arg_value>v</arg_value>\\n...</tool_call>``.

Values are raw text for strings and JSON otherwise (the template writes ``v | tojson`` for
non-strings), read back by the tool's schema as the Qwen3-Coder values are.
"""

from __future__ import annotations

import re
from typing import Any

from radixlm.runtime.chat_formats.tool_formats.base import ParsedCall, ToolFormat, dump_args
from radixlm.runtime.chat_formats.tool_formats.grammar import params_grammar, per_tool, tag_param, wrapped
from radixlm.runtime.chat_formats.tool_formats.qwen3_coder import xml_params
from radixlm.runtime.chat_formats.tools import ToolSpec

OPEN, CLOSE = "<tool_call>", "</tool_call>"
_ARG = re.compile(r"<arg_key>(.*?)</arg_key>\s*<arg_value>(.*?)</arg_value>", re.S)


class Glm45Format(ToolFormat, tags=(OPEN, CLOSE)):
    """Key/value tags, one function per ``<tool_call>`` block."""

    name = "glm45"
    syntax = ("GLM-4.5 / 4.6 / 4.7: "
              "``<tool_call>NAME\\n<arg_key>k</arg_key>\\n<arg_value>v</arg_value>\\n...</tool_call>``.")
    arguments_layout = 'key/value tags'
    aliases = ("glm4_moe", "glm46", "glm47", "glm", "glm4")
    call_separator = CLOSE + "\n" + OPEN
    inner_markers = ("<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>")

    def parse_block(self, block: str, tools: list[ToolSpec]) -> tuple[list[ParsedCall], int] | None:
        if not block.endswith(CLOSE):
            return None
        inner = block[len(OPEN):-len(CLOSE)]
        name, _, body = inner.partition("\n") if "\n" in inner else (inner, "", "")
        if "<arg_key>" in name:  # GLM-4.7 may write the first key on the name's line
            name, body = name[:name.index("<arg_key>")], name[name.index("<arg_key>"):] + "\n" + body
        name = name.strip()
        if not re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", name):
            return None
        args = xml_params(body, next((t for t in tools if t.name == name), None), _ARG)
        return ([ParsedCall(name, dump_args(args))], len(block)) if args is not None else None

    def body_constraint(self, tools: list[ToolSpec], name: str | None, max_calls: int = 1) -> dict[str, Any]:
        param = tag_param("<arg_key>{key}</arg_key>\n<arg_value>", "</arg_value>\n")
        return per_tool(tools, name, lambda i, t: wrapped(
            params_grammar(i, t, param, layout="glm45 key/value"), t.name + "\n", ""), self.call_separator, max_calls)
