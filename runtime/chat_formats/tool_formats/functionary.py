"""Functionary's tool-call layouts: v3.1 (``<function=NAME>`` blocks) and v3.2 (``>>>RECIPIENT`` parts).

Functionary v3.1 (Llama 3.1 based): ``<function=NAME>{...JSON arguments...}</function>``.

Several calls follow one another; the template renders an earlier call the same way (its arguments
``| tojson``). The arguments stream as they are generated.

Functionary v3.2 (Llama 3 based): every part of an answer opens with ``>>>RECIPIENT\\n``.

The recipient ``all`` means text for the user follows; a function name means that function's JSON
arguments follow. The generation prompt ends with ``>>>`` (:attr:`ToolFormat.prompt_opener`), so the
model's output starts with a recipient line: ``all\\nHello`` or ``get_time\\n{"zone": "UTC"}``, and
later parts follow as ``>>>get_weather\\n{...}`` (content, then calls, is possible). The template
renders an earlier call the same way, its arguments as written. The parsers never pass the ``all``
header or the ``>>>`` of a parsed part on as content; the arguments stream as they are generated.
"""

from __future__ import annotations

import json
import re
from typing import Any

from radixlm.constrained.ir import builder as ir
from radixlm.runtime.chat_formats.tool_formats.base import (
    NAME_RE,
    ParsedCall,
    ToolFormat,
    dump_args,
    json_object,
)
from radixlm.runtime.chat_formats.tool_formats.grammar import (
    args_grammar,
    chosen,
    json_args,
    lit,
    merge_rules,
    per_tool,
)
from radixlm.runtime.chat_formats.tools import ToolSpec

OPEN, CLOSE = "<function=", "</function>"
_CALL = re.compile(re.escape(OPEN) + f"({NAME_RE})>(.*)" + re.escape(CLOSE) + "$", re.S)


class FunctionaryV31Format(ToolFormat):
    """One ``<function=NAME>`` block per call, JSON arguments inside."""

    name = "functionary_v31"
    syntax = ("Functionary v3.1 (Llama 3.1 based): ``<function=NAME>{...JSON "
              "arguments...}</function>``.")
    aliases = ("functionary-v3.1", "functionary_llama31", "functionary")
    openers, closer, open_marker, forced_prefix, call_suffix = (OPEN,), CLOSE, OPEN, OPEN, CLOSE
    call_separator = CLOSE + OPEN
    call_head = re.compile(re.escape(OPEN) + f"(?P<name>{NAME_RE})>(?=\\{{)")
    next_call_head = re.compile(re.escape(CLOSE) + r"\s*" + re.escape(OPEN) + f"(?P<name>{NAME_RE})>(?=\\{{)")

    def parse_block(self, block: str, tools: list[ToolSpec]) -> tuple[list[ParsedCall], int] | None:
        m = _CALL.match(block)
        args = json_object(m.group(2).strip()) if m else None
        return ([ParsedCall(m.group(1), dump_args(args))], len(block)) if m and args is not None else None

    def body_constraint(self, tools: list[ToolSpec], name: str | None, max_calls: int = 1) -> dict[str, Any]:
        return per_tool(tools, name, lambda i, t: lit(t.name + ">") + json_args(i, t), self.call_separator, max_calls)


PART_OPEN = ">>>"
CONTENT = "all"  # the recipient of text for the user
_HEAD = re.compile(re.escape(PART_OPEN) + f"(?P<name>{NAME_RE})\n")
_DECODER = json.JSONDecoder()


class FunctionaryV32Format(ToolFormat):
    """``>>>NAME\\n{...}`` per call; ``>>>all\\n`` before text; the prompt holds the first ``>>>``."""

    name = "functionary_v32"
    syntax = "Functionary v3.2 (Llama 3 based): every part of an answer opens with ``>>>RECIPIENT\\n``."
    aliases = ("functionary-v3.2", "functionary_v3_2", "functionary_llama3")
    openers, closer, open_marker, forced_prefix, call_suffix = (PART_OPEN,), None, PART_OPEN, "", ""
    prompt_opener = PART_OPEN
    content_headers = (PART_OPEN + CONTENT + "\n",)
    call_separator = PART_OPEN
    call_head = re.compile(f"(?P<name>{NAME_RE})\n(?=\\{{)")
    next_call_head = re.compile(r"\s*" + re.escape(PART_OPEN) + f"(?P<name>{NAME_RE})\n(?=\\{{)")

    def parse_block(self, block: str, tools: list[ToolSpec]) -> tuple[list[ParsedCall], int] | None:
        m = _HEAD.match(block)
        if m is None or m.group("name") == CONTENT:
            return None
        try:
            args, end = _DECODER.raw_decode(block, m.end())
        except json.JSONDecodeError:
            return None
        return ([ParsedCall(m.group("name"), dump_args(args))], end) if isinstance(args, dict) else None

    def body_constraint(self, tools: list[ToolSpec], name: str | None, max_calls: int = 1) -> dict[str, Any]:
        return per_tool(tools, name, lambda i, t: lit(t.name + "\n") + json_args(i, t), self.call_separator,
                        max_calls)

    def header_call(self, line: str, tools: list[ToolSpec]) -> str | None:
        """The tool a recipient line (without its newline) names, or None (``all`` or unknown)."""
        return line if line != CONTENT and any(t.name == line for t in tools) else None

    def rest_constraint(self, tools: list[ToolSpec], name: str, max_calls: int = 1) -> dict[str, Any]:
        """The rest of a turn whose first recipient line (``name\\n``) is written: that tool's
        arguments, then up to ``max_calls - 1`` more ``>>>NAME\\n{...}`` calls of any tool."""
        index, tool = chosen(tools, name)[0]
        rules: dict[str, ir.Node] = {}
        first = merge_rules(args_grammar(index, tool), "n_", rules)
        if max_calls > 1:
            rules["call"] = ir.alt([ir.seq(ir.Lex(lit(t.name + "\n")), merge_rules(args_grammar(i, t), f"t{i}_", rules))
                                    for i, t in enumerate(tools)])
            first = ir.seq(first, ir.rep(ir.seq(ir.Lit(PART_OPEN), ir.Ref("call")), 0, max_calls - 1))
        return {"ebnf": ir.Grammar(first, rules).to_lark()}
