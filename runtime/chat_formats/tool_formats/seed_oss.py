"""Seed-OSS: Qwen3-Coder's XML parameters in a ``<seed:tool_call>`` wrapper.

``<seed:tool_call>\\n<function=NAME>\\n<parameter=KEY>VALUE</parameter>\\n...</function>\\n</seed:tool_call>``,
one function per block. Values are raw text for strings and JSON otherwise, read back by the tool's
schema as the Qwen3-Coder values are.
"""

from __future__ import annotations

from typing import Any

from radixlm.runtime.chat_formats.tool_formats.grammar import per_tool
from radixlm.runtime.chat_formats.tool_formats.qwen3_coder import Qwen3CoderFormat
from radixlm.runtime.chat_formats.tool_formats.typed_args import params_grammar, tag_param, wrapped
from radixlm.runtime.chat_formats.tools import ToolSpec

OPEN, CLOSE = "<seed:tool_call>", "</seed:tool_call>"


class SeedOssFormat(Qwen3CoderFormat):
    """XML-parameter calls, one function per ``<seed:tool_call>`` block."""

    name = "seed_oss"
    arguments_layout = 'XML parameters'
    aliases = ("seed-oss",)
    open_tag, close_tag = OPEN, CLOSE
    openers, closer, open_marker, forced_prefix, call_suffix = (OPEN,), CLOSE, OPEN, OPEN + "\n", "\n" + CLOSE
    call_separator = "\n" + CLOSE + "\n" + OPEN + "\n"

    def body_constraint(self, tools: list[ToolSpec], name: str | None, max_calls: int = 1) -> dict[str, Any]:
        param = tag_param("<parameter={key}>", "</parameter>\n")
        return per_tool(tools, name, lambda i, t: wrapped(
            params_grammar(i, t, param, layout="seed_oss XML-parameter"), f"<function={t.name}>\n", "</function>"),
            self.call_separator, max_calls)
