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

from radixlm.runtime.chat_formats.tool_formats.base import CallLayout, Params, ToolFormat

FUNCTION = "<function={name}>\n{args}</function>"


class Qwen3CoderFormat(ToolFormat):
    """XML-parameter calls, one function per ``<tool_call>`` block."""

    name = "qwen3_coder"
    syntax = "Qwen3-Coder: XML-style parameters inside ``<tool_call>``."
    arguments_layout = 'XML parameters'
    aliases = ("qwen3_xml",)
    layout = CallLayout("<tool_call>", "</tool_call>", FUNCTION, Params("<parameter={key}>\n", "\n</parameter>\n"),
                        lead="\n", trail="\n", gap="\n")


class SeedOssFormat(Qwen3CoderFormat):
    """XML-parameter calls, one function per ``<seed:tool_call>`` block."""

    name = "seed_oss"
    syntax = "Seed-OSS: Qwen3-Coder's XML parameters in a ``<seed:tool_call>`` wrapper."
    aliases = ("seed-oss",)
    layout = CallLayout("<seed:tool_call>", "</seed:tool_call>", FUNCTION, Params("<parameter={key}>", "</parameter>\n", pad="\n"),
                        lead="\n", trail="\n", gap="\n")
