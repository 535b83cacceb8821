"""Qwen3-Coder: XML-style parameters inside ``<tool_call>``.

``<tool_call>\\n<function=NAME>\\n<parameter=KEY>\\nVALUE\\n</parameter>\\n</function>\\n</tool_call>``.
Values are raw text; the tool's schema says how to read them (a string stays text, other types
are read as JSON), as the family's own parser does.

Seed-OSS: Qwen3-Coder's XML parameters in a ``<seed:tool_call>`` wrapper.

``<seed:tool_call>\\n<function=NAME>\\n<parameter=KEY>VALUE</parameter>\\n...</function>\\n</seed:tool_call>``,
one function per block. Values are raw text for strings and JSON otherwise, read back by the tool's
schema as the Qwen3-Coder values are.
"""

from __future__ import annotations

import re
from typing import Any

from radixlm.runtime.chat_formats.tool_formats.base import ParsedCall, ToolFormat, dump_args
from radixlm.runtime.chat_formats.tool_formats.grammar import (
    params_grammar,
    per_tool,
    property_schemas,
    tag_param,
    typed_value,
    wrapped,
)
from radixlm.runtime.chat_formats.tools import ToolSpec

OPEN, CLOSE = "<tool_call>", "</tool_call>"
_FUNC = re.compile(r"^\s*<function=([^>\n]+)>\n?(.*?)\n?</function>\s*$", re.S)
_PARAM = re.compile(r"<parameter=([^>\n]+)>\n?(.*?)\n?</parameter>", re.S)


def xml_params(body: str, tool: ToolSpec | None, pattern: re.Pattern) -> dict[str, Any] | None:
    """Parameters of one call (group 1 the key, the last group the value), or None when ``body``
    holds anything but parameter tags."""
    props = property_schemas(tool) if tool else {}
    args, pos = {}, 0
    for m in pattern.finditer(body):
        if body[pos:m.start()].strip():
            return None
        key = m.group(1).strip()
        args[key] = typed_value(m.group(m.lastindex or 2), props.get(key))
        pos = m.end()
    return args if not body[pos:].strip() else None


class Qwen3CoderFormat(ToolFormat):
    """XML-parameter calls, one function per ``<tool_call>`` block."""

    name = "qwen3_coder"
    syntax = "Qwen3-Coder: XML-style parameters inside ``<tool_call>``."
    arguments_layout = 'XML parameters'
    aliases = ("qwen3_xml",)
    openers = (OPEN,)
    closer = CLOSE
    open_marker = OPEN
    forced_prefix = OPEN + "\n"
    call_suffix = "\n" + CLOSE
    call_separator = "\n" + CLOSE + "\n" + OPEN + "\n"

    open_tag, close_tag = OPEN, CLOSE  # the block's wrapper (subclasses change it)

    def parse_block(self, block: str, tools: list[ToolSpec]) -> tuple[list[ParsedCall], int] | None:
        if not block.endswith(self.close_tag):
            return None
        m = _FUNC.match(block[len(self.open_tag):-len(self.close_tag)])
        if not m:
            return None
        name = m.group(1).strip()
        args = xml_params(m.group(2), next((t for t in tools if t.name == name), None), _PARAM)
        return ([ParsedCall(name, dump_args(args))], len(block)) if args is not None else None

    def body_constraint(self, tools: list[ToolSpec], name: str | None, max_calls: int = 1) -> dict[str, Any]:
        param = tag_param("<parameter={key}>\n", "\n</parameter>\n")
        return per_tool(tools, name, lambda i, t: wrapped(
            params_grammar(i, t, param, layout="qwen3_coder XML-parameter"), f"<function={t.name}>\n", "</function>"),
            self.call_separator, max_calls)


SEED_OPEN, SEED_CLOSE = "<seed:tool_call>", "</seed:tool_call>"


class SeedOssFormat(Qwen3CoderFormat):
    """XML-parameter calls, one function per ``<seed:tool_call>`` block."""

    name = "seed_oss"
    syntax = "Seed-OSS: Qwen3-Coder's XML parameters in a ``<seed:tool_call>`` wrapper."
    arguments_layout = 'XML parameters'
    aliases = ("seed-oss",)
    open_tag, close_tag = SEED_OPEN, SEED_CLOSE
    openers, closer, open_marker, forced_prefix, call_suffix = (SEED_OPEN,), SEED_CLOSE, SEED_OPEN, SEED_OPEN + "\n", "\n" + SEED_CLOSE
    call_separator = "\n" + SEED_CLOSE + "\n" + SEED_OPEN + "\n"

    def body_constraint(self, tools: list[ToolSpec], name: str | None, max_calls: int = 1) -> dict[str, Any]:
        param = tag_param("<parameter={key}>", "</parameter>\n")
        return per_tool(tools, name, lambda i, t: wrapped(
            params_grammar(i, t, param, layout="seed_oss XML-parameter"), f"<function={t.name}>\n", "</function>"),
            self.call_separator, max_calls)
