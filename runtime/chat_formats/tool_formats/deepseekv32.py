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
from radixlm.runtime.chat_formats.tool_formats.grammar import per_tool
from radixlm.runtime.chat_formats.tool_formats.typed_args import params_grammar, tag_param, wrapped
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


class DeepSeekV32Format(ToolFormat):
    """DSML invocations, several per block."""

    name = "deepseekv32"
    arguments_layout = 'DSML parameters'
    aliases = ("deepseek_v32",)
    openers, closer, open_marker, forced_prefix = (OPEN,), CLOSE, OPEN, OPEN
    call_suffix = "\n" + CLOSE
    call_separator = ""  # each invocation's body starts on a new line

    def parse_block(self, block: str, tools: list[ToolSpec]) -> tuple[list[ParsedCall], int] | None:
        if not block.endswith(CLOSE):
            return None

        def call_of(m: re.Match) -> ParsedCall | None:
            args = _params(m.group(2))
            return None if args is None else ParsedCall(m.group(1), dump_args(args))
        calls = calls_in(block[len(OPEN):-len(CLOSE)], _INVOKE, call_of)
        return (calls, len(block)) if calls else None

    def body_constraint(self, tools: list[ToolSpec], name: str | None, max_calls: int = 1) -> dict[str, Any]:
        param = tag_param(f'<{DSML}parameter name="{{key}}" string="{{string}}">', f"</{DSML}parameter>\n", '<>\n"')
        return per_tool(tools, name, lambda i, t: wrapped(
            params_grammar(i, t, param, layout="deepseekv32 DSML-parameter"),
            f'\n<{DSML}invoke name="{t.name}">\n', f"</{DSML}invoke>"), self.call_separator, max_calls)
