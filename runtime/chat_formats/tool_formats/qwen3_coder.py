"""Qwen3-Coder: XML-style parameters inside ``<tool_call>``.

``<tool_call>\\n<function=NAME>\\n<parameter=KEY>\\nVALUE\\n</parameter>\\n</function>\\n</tool_call>``.
Values are raw text; the tool's schema says how to read them (a string stays text, other types
are read as JSON), as the family's own parser does.
"""

from __future__ import annotations

import json
import re
from typing import Any

from radixlm.runtime.chat_formats.tool_formats.base import ParsedCall, ToolFormat, dump_args
from radixlm.runtime.chat_formats.tool_formats.grammar import (
    flat_properties,
    lit,
    per_tool,
    required_only,
    scalar_kind,
)
from radixlm.runtime.chat_formats.tools import ToolSpec

OPEN, CLOSE = "<tool_call>", "</tool_call>"
_FUNC = re.compile(r"^\s*<function=([^>\n]+)>\n?(.*?)\n?</function>\s*$", re.S)
_PARAM = re.compile(r"<parameter=([^>\n]+)>\n?(.*?)\n?</parameter>", re.S)
_STRING = r"[^<\x0a]*"  # no newline and no '<': the value cannot close its tag early


def typed_value(raw: str, prop: dict | None) -> Any:
    """A raw parameter value read by its schema: strings stay text, anything else is tried as JSON."""
    types = (prop or {}).get("type")
    if types == "string" or (prop and all(isinstance(v, str) for v in prop.get("enum", [0]))):
        return raw
    try:
        return json.loads(raw)
    except ValueError:
        return raw


def xml_params(body: str, tool: ToolSpec | None, pattern: re.Pattern) -> dict[str, Any] | None:
    """Parameters of one call, or None when ``body`` holds anything but parameter tags."""
    props = (tool.parameters.get("properties") or {}) if tool else {}
    args, pos = {}, 0
    for m in pattern.finditer(body):
        if body[pos:m.start()].strip():
            return None
        args[m.group(1).strip()] = typed_value(m.group(2), props.get(m.group(1).strip()))
        pos = m.end()
    return args if not body[pos:].strip() else None


class Qwen3CoderFormat(ToolFormat):
    """XML-parameter calls, one function per ``<tool_call>`` block."""

    name = "qwen3_coder"
    openers = (OPEN,)
    closer = CLOSE
    open_marker = OPEN
    forced_prefix = OPEN + "\n"
    call_suffix = "\n" + CLOSE

    def parse_block(self, block: str, tools: list[ToolSpec]) -> tuple[list[ParsedCall], int] | None:
        if not block.endswith(CLOSE):
            return None
        m = _FUNC.match(block[len(OPEN):-len(CLOSE)])
        if not m:
            return None
        name = m.group(1).strip()
        args = xml_params(m.group(2), next((t for t in tools if t.name == name), None), _PARAM)
        return ([ParsedCall(name, dump_args(args))], len(block)) if args is not None else None

    def body_constraint(self, tools: list[ToolSpec], name: str | None) -> dict[str, Any]:
        def body(i: int, tool: ToolSpec) -> str:
            parts = [lit(f"<function={tool.name}>\n")]
            for key, prop in required_only(flat_properties(i, tool, "qwen3_coder XML-parameter")):
                parts.append(lit(f"<parameter={key}>\n") + value_regex(prop) + lit("\n</parameter>\n"))
            return "".join(parts) + lit("</function>")
        return per_tool(tools, name, body)


def value_regex(prop: dict) -> str:
    """A property's raw value: enum members as written (strings bare), other scalars as JSON."""
    from radixlm.runtime.chat_formats.tool_formats.grammar import alternatives, json_scalar

    if scalar_kind(prop) == "enum":
        return alternatives([lit(v if isinstance(v, str) else json.dumps(v)) for v in
                             prop.get("enum", [prop.get("const")])])
    return json_scalar(prop, _STRING)
