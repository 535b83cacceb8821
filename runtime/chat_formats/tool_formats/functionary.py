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

from typing import Any

from radixlm.constrained.ir import builder as ir
from radixlm.runtime.chat_formats.tool_formats.base import CallLayout, ParsedCall, ToolFormat
from radixlm.runtime.chat_formats.tool_formats.grammar import args_grammar, chosen, lit, merge_rules
from radixlm.runtime.chat_formats.tools import ToolSpec


class FunctionaryV31Format(ToolFormat):
    """One ``<function=NAME>`` block per call, JSON arguments inside."""

    name = "functionary_v31"
    syntax = ("Functionary v3.1 (Llama 3.1 based): ``<function=NAME>{...JSON "
              "arguments...}</function>``.")
    aliases = ("functionary-v3.1", "functionary_llama31", "functionary")
    layout = CallLayout("<function=", "</function>", "{name}>{args}")


PART_OPEN = ">>>"
CONTENT = "all"  # the recipient of text for the user


class FunctionaryV32Format(ToolFormat):
    """``>>>NAME\\n{...}`` per call; ``>>>all\\n`` before text; the prompt holds the first ``>>>``.

    A part has no closer: its JSON arguments end where their value does. The recipient ``all`` is
    no call (the text part's header)."""

    name = "functionary_v32"
    syntax = "Functionary v3.2 (Llama 3 based): every part of an answer opens with ``>>>RECIPIENT\\n``."
    aliases = ("functionary-v3.2", "functionary_v3_2", "functionary_llama3")
    layout = CallLayout(PART_OPEN, None, "{name}\n{args}", prompt_opens=True)
    content_headers = (PART_OPEN + CONTENT + "\n",)

    def parse_block(self, block: str, tools: list[ToolSpec]) -> tuple[list[ParsedCall], int] | None:
        parsed = super().parse_block(block, tools)
        return None if parsed is None or parsed[0][0].name == CONTENT else parsed

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
