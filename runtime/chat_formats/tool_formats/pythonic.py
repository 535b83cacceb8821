"""Llama 3.2 / Llama 4 pythonic calls: ``[get_weather(city="Paris", metric=True), f(x=1)]``.

Arguments are Python literals written as keyword arguments; a forced call's arguments are
constrained by the tool's whole schema (each value a Python literal of its property's sub-schema,
see :mod:`radixlm.runtime.chat_formats.tool_formats.grammar`).
"""

from __future__ import annotations

import ast

from radixlm.runtime.chat_formats.tool_formats.base import (
    CallLayout,
    Params,
    ParsedCall,
    ToolFormat,
    dump_args,
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


class PythonicFormat(ToolFormat):
    """A Python list of calls with keyword arguments.

    The layout writes forced calls; the parser is Python's own (:func:`parse_list`), since a
    literal's extent is Python syntax, not text between tags."""

    name = "pythonic"
    syntax = ("Llama 3.2 / Llama 4 pythonic calls: ``[get_weather(city=\"Paris\", metric=True), "
              "f(x=1)]``.")
    arguments_layout = 'Python keyword arguments'
    aliases = ("llama4", "llama32", "llama4_pythonic")
    layout = CallLayout("[", None, "{name}({args})", Params("{key}=", sep=", ", key=".+", values="python"),
                        trail="]", gap=", ", many=True)

    def parse_block(self, block: str, tools: list[ToolSpec]) -> tuple[list[ParsedCall], int] | None:
        return parse_list(block)
