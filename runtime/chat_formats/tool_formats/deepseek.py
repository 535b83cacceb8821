"""DeepSeek's tool-call layouts, one per model generation: V3 / R1, V3.1 and V3.2 (DSML).

DeepSeek V3 / R1: calls in a ``<｜tool▁calls▁begin｜>`` section, arguments in a JSON code block.

``<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\\n```json\\n{...}\\n```<｜tool▁call▁end｜>``
(repeated) ``<｜tool▁calls▁end｜>``. The markers use the fullwidth bar and the ``▁`` of the vocabulary.

DeepSeek V3.1: the V3 section markers, with ``NAME<｜tool▁sep｜>{json}`` per call.

``<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{...}<｜tool▁call▁end｜>...<｜tool▁calls▁end｜>``.

DeepSeek V3.2 (DSML): XML-style invocations in a ``<｜DSML｜function_calls>`` block.

``<｜DSML｜function_calls>\\n<｜DSML｜invoke name="NAME">\\n<｜DSML｜parameter name="KEY" string="true">VALUE</｜DSML｜parameter>\\n``
... ``</｜DSML｜invoke>\\n</｜DSML｜function_calls>``. ``string="true"`` values are raw text, the others
JSON (the template writes ``value | tojson`` for them), as V3.2's own template renders earlier calls.
"""

from __future__ import annotations

import json
import re
from typing import Any

from radixlm.runtime.chat_formats.tool_formats.base import (
    NAME_RE,
    ParsedCall,
    ToolFormat,
    calls_in,
    dump_args,
    json_object,
)
from radixlm.runtime.chat_formats.tool_formats.grammar import (
    json_args,
    lit,
    params_grammar,
    per_tool,
    tag_param,
    wrapped,
)
from radixlm.runtime.chat_formats.tools import ToolSpec

SECTION_OPEN, SECTION_CLOSE = "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"
CALL_OPEN, CALL_CLOSE, SEP = "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>", "<｜tool▁sep｜>"
_V3_CALL = re.compile(re.escape(CALL_OPEN) + r"function" + re.escape(SEP) + r"([^\n]+)\n```json\n(.*?)\n```"
                   + re.escape(CALL_CLOSE), re.S)


def section_calls(block: str, pattern: re.Pattern) -> list[ParsedCall] | None:
    """Every call of a section (nothing but calls and whitespace inside), or None."""
    if not (block.startswith(SECTION_OPEN) and block.endswith(SECTION_CLOSE)):
        return None

    def call_of(m: re.Match) -> ParsedCall | None:
        args = json_object(m.group(2))
        return None if args is None else ParsedCall(m.group(1).strip(), dump_args(args))
    return calls_in(block[len(SECTION_OPEN):-len(SECTION_CLOSE)], pattern, call_of)


class DeepSeekV3Format(ToolFormat):
    """DeepSeek V3 and R1 (``function<｜tool▁sep｜>name`` and a ```json block)."""

    name = "deepseekv3"
    syntax = ("DeepSeek V3 / R1: calls in a ``<｜tool▁calls▁begin｜>`` section, arguments in a JSON code "
              "block.")
    aliases = ("deepseek_v3", "deepseek-r1", "deepseekr1")
    openers = (SECTION_OPEN,)
    closer = SECTION_CLOSE
    open_marker = SECTION_OPEN
    forced_prefix = SECTION_OPEN + CALL_OPEN + "function" + SEP
    call_suffix = CALL_CLOSE + SECTION_CLOSE
    inner_markers = (CALL_OPEN, SEP, CALL_CLOSE)
    call_head = re.compile(re.escape(SECTION_OPEN + CALL_OPEN + "function" + SEP) + f"(?P<name>{NAME_RE})"
                           + r"\n```json\n(?=\{)")
    call_separator = CALL_CLOSE + "\n" + CALL_OPEN + "function" + SEP
    next_call_head = re.compile(re.escape(CALL_CLOSE) + r"\s*" + re.escape(CALL_OPEN + "function" + SEP)
                                + f"(?P<name>{NAME_RE})" + r"\n```json\n(?=\{)")

    def parse_block(self, block: str, tools: list[ToolSpec]) -> tuple[list[ParsedCall], int] | None:
        calls = section_calls(block, _V3_CALL)
        return (calls, len(block)) if calls else None

    def body_constraint(self, tools: list[ToolSpec], name: str | None, max_calls: int = 1) -> dict[str, Any]:
        return per_tool(tools, name, lambda i, t: lit(t.name + "\n```json\n") + json_args(i, t) + lit("\n```"),
                        self.call_separator, max_calls)


_V31_CALL = re.compile(re.escape(CALL_OPEN) + r"([^<\n]+?)" + re.escape(SEP) + r"(.*?)" + re.escape(CALL_CLOSE), re.S)


class DeepSeekV31Format(ToolFormat):
    """DeepSeek V3.1 (name, separator, JSON arguments)."""

    name = "deepseekv31"
    syntax = "DeepSeek V3.1: the V3 section markers, with ``NAME<｜tool▁sep｜>{json}`` per call."
    aliases = ("deepseek_v31",)
    openers = (SECTION_OPEN,)
    closer = SECTION_CLOSE
    open_marker = SECTION_OPEN
    forced_prefix = SECTION_OPEN + CALL_OPEN
    call_suffix = CALL_CLOSE + SECTION_CLOSE
    inner_markers = (CALL_OPEN, SEP, CALL_CLOSE)
    call_head = re.compile(re.escape(SECTION_OPEN + CALL_OPEN) + f"(?P<name>{NAME_RE}?)" + re.escape(SEP) + r"(?=\{)")
    call_separator = CALL_CLOSE + CALL_OPEN
    next_call_head = re.compile(re.escape(CALL_CLOSE) + r"\s*" + re.escape(CALL_OPEN) + f"(?P<name>{NAME_RE}?)"
                                + re.escape(SEP) + r"(?=\{)")

    def parse_block(self, block: str, tools: list[ToolSpec]) -> tuple[list[ParsedCall], int] | None:
        calls = section_calls(block, _V31_CALL)
        return (calls, len(block)) if calls else None

    def body_constraint(self, tools: list[ToolSpec], name: str | None, max_calls: int = 1) -> dict[str, Any]:
        return per_tool(tools, name, lambda i, t: lit(t.name + SEP) + json_args(i, t), self.call_separator, max_calls)


DSML = "｜DSML｜"
DSML_OPEN, DSML_CLOSE = f"<{DSML}function_calls>", f"</{DSML}function_calls>"
_DSML_INVOKE = re.compile(f'<{DSML}invoke name="([A-Za-z0-9_.-]{{1,64}})">(.*?)</{DSML}invoke>', re.S)
_DSML_PARAM = re.compile(f'<{DSML}parameter name="([^"\\n]+)" string="(true|false)">(.*?)</{DSML}parameter>', re.S)


def _dsml_params(body: str) -> dict[str, Any] | None:
    """One invocation's parameters, or None when it holds anything else or a non-JSON value."""
    args, pos = {}, 0
    for m in _DSML_PARAM.finditer(body):
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
    syntax = "DeepSeek V3.2 (DSML): XML-style invocations in a ``<｜DSML｜function_calls>`` block."
    arguments_layout = 'DSML parameters'
    aliases = ("deepseek_v32",)
    openers, closer, open_marker, forced_prefix = (DSML_OPEN,), DSML_CLOSE, DSML_OPEN, DSML_OPEN
    call_suffix = "\n" + DSML_CLOSE
    call_separator = ""  # each invocation's body starts on a new line

    def parse_block(self, block: str, tools: list[ToolSpec]) -> tuple[list[ParsedCall], int] | None:
        if not block.endswith(DSML_CLOSE):
            return None

        def call_of(m: re.Match) -> ParsedCall | None:
            args = _dsml_params(m.group(2))
            return None if args is None else ParsedCall(m.group(1), dump_args(args))
        calls = calls_in(block[len(DSML_OPEN):-len(DSML_CLOSE)], _DSML_INVOKE, call_of)
        return (calls, len(block)) if calls else None

    def body_constraint(self, tools: list[ToolSpec], name: str | None, max_calls: int = 1) -> dict[str, Any]:
        param = tag_param(f'<{DSML}parameter name="{{key}}" string="{{string}}">', f"</{DSML}parameter>\n", '<>\n"')
        return per_tool(tools, name, lambda i, t: wrapped(
            params_grammar(i, t, param, layout="deepseekv32 DSML-parameter"),
            f'\n<{DSML}invoke name="{t.name}">\n', f"</{DSML}invoke>"), self.call_separator, max_calls)
