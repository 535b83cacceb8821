"""DeepSeek V3.2 (DSML): XML-style invocations in a ``<｜DSML｜function_calls>`` block.

``<｜DSML｜function_calls>\\n<｜DSML｜invoke name="NAME">\\n<｜DSML｜parameter name="KEY" string="true">VALUE</｜DSML｜parameter>\\n``
... ``</｜DSML｜invoke>\\n</｜DSML｜function_calls>``. ``string="true"`` values are raw text, the others
JSON (the template writes ``value | tojson`` for them), as V3.2's own template renders earlier calls.
"""

from __future__ import annotations

import json
import re
from typing import Any

from radixlm.runtime.chat_formats.tool_formats.base import ParsedCall, ToolFormat, calls_in, dump_args
from radixlm.runtime.chat_formats.tool_formats.grammar import flat_properties, lit, per_tool, required_only
from radixlm.runtime.chat_formats.tool_formats.qwen3_coder import value_regex
from radixlm.runtime.chat_formats.tools import ToolSpec

DSML = "｜DSML｜"
OPEN, CLOSE = f"<{DSML}function_calls>", f"</{DSML}function_calls>"
_INVOKE = re.compile(f'<{DSML}invoke name="([A-Za-z0-9_.-]{{1,64}})">(.*?)</{DSML}invoke>', re.S)
_PARAM = re.compile(f'<{DSML}parameter name="([^"\\n]+)" string="(true|false)">(.*?)</{DSML}parameter>', re.S)


def _params(body: str) -> dict[str, Any] | None:
    """One invocation's parameters, or None when it holds anything else or a non-JSON value."""
    args, pos = {}, 0
    for m in _PARAM.finditer(body):
        if body[pos:m.start()].strip():
            return None
        if m.group(2) == "true":
            args[m.group(1)] = m.group(3)
        else:
            try:
                args[m.group(1)] = json.loads(m.group(3))
            except ValueError:
                return None
        pos = m.end()
    return args if not body[pos:].strip() else None


def _is_text(prop: dict) -> bool:
    """Whether the template writes this property with ``string="true"`` (a string value)."""
    return prop.get("type") == "string" or bool(prop.get("enum")) and all(isinstance(v, str) for v in prop["enum"])


class DeepSeekV32Format(ToolFormat, tags=(OPEN, CLOSE)):
    """DSML invocations, several per block."""

    name = "deepseekv32"
    aliases = ("deepseek_v32",)

    def parse_block(self, block: str, tools: list[ToolSpec]) -> tuple[list[ParsedCall], int] | None:
        if not block.endswith(CLOSE):
            return None

        def call_of(m: re.Match) -> ParsedCall | None:
            args = _params(m.group(2))
            return None if args is None else ParsedCall(m.group(1), dump_args(args))
        calls = calls_in(block[len(OPEN):-len(CLOSE)], _INVOKE, call_of)
        return (calls, len(block)) if calls else None

    def body_constraint(self, tools: list[ToolSpec], name: str | None) -> dict[str, Any]:
        def body(i: int, tool: ToolSpec) -> str:
            parts = [lit(f'\n<{DSML}invoke name="{tool.name}">\n')]
            for key, prop in required_only(flat_properties(i, tool, "deepseekv32 DSML-parameter")):
                kind = "true" if _is_text(prop) else "false"
                parts.append(lit(f'<{DSML}parameter name="{key}" string="{kind}">') + value_regex(prop)
                             + lit(f"</{DSML}parameter>\n"))
            return "".join(parts) + lit(f"</{DSML}invoke>\n")
        return per_tool(tools, name, body)
