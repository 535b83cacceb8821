"""Llama 3.2 / Llama 4 pythonic calls: ``[get_weather(city="Paris", metric=True), f(x=1)]``.

Arguments are Python literals written as keyword arguments; a forced call's arguments are
constrained by the tool's whole schema (each value a Python literal of its property's sub-schema,
see :mod:`radixlm.runtime.chat_formats.tool_formats.grammar`).
"""

from __future__ import annotations

import ast
from typing import Any

from radixlm.constrained.ir import builder as ir
from radixlm.runtime.chat_formats.tool_formats.base import ParsedCall, ToolFormat, dump_args
from radixlm.runtime.chat_formats.tool_formats.grammar import (
    params_grammar,
    per_tool,
    python_keyword,
    wrapped,
)
from radixlm.runtime.chat_formats.tools import ToolSpec


def _call(node: ast.expr) -> ParsedCall | None:
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name) or node.args:
        return None
    try:
        args = {kw.arg: ast.literal_eval(kw.value) for kw in node.keywords if kw.arg}
    except ValueError:
        return None
    if len(args) != len(node.keywords):
        return None
    try:
        return ParsedCall(node.func.id, dump_args(args))
    except TypeError:  # a literal JSON cannot hold (a set, bytes, complex)
        return None


def parse_list(text: str) -> tuple[list[ParsedCall], int] | None:
    """The first ``[...]`` prefix of ``text`` that is a list of keyword-argument calls."""
    end = text.find("]")
    while end >= 0:
        try:
            tree = ast.parse(text[:end + 1], mode="eval").body
        except SyntaxError:
            end = text.find("]", end + 1)
            continue
        if not isinstance(tree, ast.List) or not tree.elts:
            return None
        calls = [_call(e) for e in tree.elts]
        return (calls, end + 1) if all(calls) else None  # type: ignore[return-value]
    return None


def _keyword(key: str, value: ir.Node, raw: bool) -> ir.Node | None:
    return ir.seq(ir.Lit(key + "="), value) if python_keyword(key) else None


class PythonicFormat(ToolFormat):
    """A Python list of calls with keyword arguments."""

    name = "pythonic"
    syntax = ("Llama 3.2 / Llama 4 pythonic calls: ``[get_weather(city=\"Paris\", metric=True), "
              "f(x=1)]``.")
    arguments_layout = 'Python keyword arguments'
    aliases = ("llama4", "llama32", "llama4_pythonic")
    openers = ("[",)
    open_marker = "["
    forced_prefix = "["
    call_suffix = "]"
    call_separator = ", "

    def parse_block(self, block: str, tools: list[ToolSpec]) -> tuple[list[ParsedCall], int] | None:
        return parse_list(block)

    def body_constraint(self, tools: list[ToolSpec], name: str | None, max_calls: int = 1) -> dict[str, Any]:
        return per_tool(tools, name, lambda i, t: wrapped(
            params_grammar(i, t, _keyword, ", ", "pythonic", python=True), t.name + "(", ")"),
            self.call_separator, max_calls)
