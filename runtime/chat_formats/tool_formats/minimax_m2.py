"""MiniMax-M2: XML invocations in a ``<minimax:tool_call>`` block.

``<minimax:tool_call>\\n<invoke name="NAME">\\n<parameter name="KEY">VALUE</parameter>\\n...</invoke>\\n``
(several invocations) ``</minimax:tool_call>``. Values are raw text for strings and JSON otherwise
(the template writes ``v | tojson`` for non-strings), read back by the tool's schema.
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
)
from radixlm.runtime.chat_formats.tool_formats.grammar import params_grammar, per_tool, tag_param, wrapped
from radixlm.runtime.chat_formats.tool_formats.qwen3_coder import xml_params
from radixlm.runtime.chat_formats.tools import ToolSpec

OPEN, CLOSE = "<minimax:tool_call>", "</minimax:tool_call>"
_INVOKE = re.compile(f'<invoke name="({NAME_RE})">(.*?)</invoke>', re.S)
_PARAM = re.compile(r'<parameter name="([^"\n]+)">(.*?)</parameter>', re.S)


class MiniMaxM2Format(ToolFormat):
    """MiniMax-M2 invocations, several per block."""

    name = "minimax_m2"
    syntax = "MiniMax-M2: XML invocations in a ``<minimax:tool_call>`` block."
    arguments_layout = 'XML parameters'
    aliases = ("minimax-m2",)
    openers, closer, open_marker, forced_prefix, call_suffix = (OPEN,), CLOSE, OPEN, OPEN + "\n", CLOSE
    call_separator = ""  # each invocation ends with a newline
    inner_markers = ("<invoke name=", "</invoke>", "<parameter name=", "</parameter>")

    def parse_block(self, block: str, tools: list[ToolSpec]) -> tuple[list[ParsedCall], int] | None:
        if not block.endswith(CLOSE):
            return None

        def call_of(m: re.Match) -> ParsedCall | None:
            tool = next((t for t in tools if t.name == m.group(1)), None)
            args = xml_params(m.group(2), tool, _PARAM)
            return None if args is None else ParsedCall(m.group(1), dump_args(args))
        calls = calls_in(block[len(OPEN):-len(CLOSE)], _INVOKE, call_of)
        return (calls, len(block)) if calls else None

    def body_constraint(self, tools: list[ToolSpec], name: str | None, max_calls: int = 1) -> dict[str, Any]:
        param = tag_param('<parameter name="{key}">', "</parameter>\n", '<>\n"')
        return per_tool(tools, name, lambda i, t: wrapped(
            params_grammar(i, t, param, layout="minimax_m2 XML-parameter"), f'<invoke name="{t.name}">\n',
            "</invoke>\n"), self.call_separator, max_calls)
