"""Llama 3.2 / Llama 4 pythonic calls: ``[get_weather(city="Paris", metric=True), f(x=1)]``.

Arguments are Python literals written as keyword arguments; the call body is built from the
tool's schema for flat objects of scalar properties (strings, numbers, booleans, enums).
"""

from __future__ import annotations

import ast
import json
from typing import Any

from radixlm.runtime.chat_formats.tool_formats.base import ParsedCall, ToolFormat, dump_args
from radixlm.runtime.chat_formats.tool_formats.grammar import (
    alternatives,
    flat_properties,
    json_scalar,
    lit,
    per_tool,
    required_only,
    scalar_kind,
)
from radixlm.runtime.chat_formats.tools import ToolSpec

_STRING = r'"[^"\\\x0a]*"'


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


def _value(prop: dict) -> str:
    if scalar_kind(prop) == "boolean":
        return "(True|False)"
    if scalar_kind(prop) == "enum":
        vals = prop.get("enum", [prop.get("const")])
        return alternatives([lit(repr(v) if isinstance(v, bool) else json.dumps(v)) for v in vals])
    return json_scalar(prop, _STRING)


class PythonicFormat(ToolFormat):
    """A Python list of calls with keyword arguments."""

    name = "pythonic"
    aliases = ("llama4", "llama32")
    openers = ("[",)
    open_marker = "["
    forced_prefix = "["
    call_suffix = "]"

    def parse_block(self, block: str, tools: list[ToolSpec]) -> tuple[list[ParsedCall], int] | None:
        return parse_list(block)

    def body_constraint(self, tools: list[ToolSpec], name: str | None) -> dict[str, Any]:
        def body(i: int, tool: ToolSpec) -> str:
            props = required_only(flat_properties(i, tool, "pythonic"))
            args = lit(", ").join(lit(f"{k}=") + _value(p) for k, p in props)
            return lit(f"{tool.name}(") + args + lit(")")
        return per_tool(tools, name, body)
