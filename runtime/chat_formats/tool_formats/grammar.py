"""Call bodies as grammars: literal wrapper text, JSON arguments, typed parameters, several calls.

The engine takes one constraint per request. A body is built per tool (:func:`per_tool`) and is
either a regex (the wrapper's literal text, escaped for the grammar's Rust regex syntax, with
:func:`json_args` where the tool's JSON arguments go) or a grammar of typed parameters
(:mod:`radixlm.runtime.chat_formats.tool_formats.typed_args`). The result is a grammar (an
``ebnf`` constraint in Lark) in which the wrapper's pieces surround the grammar
:func:`radixlm.constrained.schema_to_grammar` makes of the tool's parameters (any depth, only the
declared members). With ``max_calls`` above 1 the body repeats, one to ``max_calls`` calls joined by
the family's separator. A schema that cannot compile raises :class:`FormatUnsupported` naming the tool.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from radixlm.constrained import escape_literal
from radixlm.constrained.ir import builder as ir
from radixlm.runtime.chat_formats.tool_formats.base import FormatUnsupported
from radixlm.runtime.chat_formats.tool_formats.typed_args import merge_rules
from radixlm.runtime.chat_formats.tools import ToolSpec


def lit(text: str) -> str:
    """``text`` matched literally (meta and control characters escaped)."""
    return escape_literal(text)


def alternatives(parts: list[str]) -> str:
    """One regex matching any of ``parts`` (each already a regex)."""
    return parts[0] if len(parts) == 1 else "(" + "|".join(f"({p})" for p in parts) + ")"


def chosen(tools: list[ToolSpec], name: str | None) -> list[tuple[int, ToolSpec]]:
    """The tools a call may use, with their index in ``tools``."""
    return [(i, t) for i, t in enumerate(tools) if name is None or t.name == name]


_ARGS = "\x00args\x00"  # where json_args puts a tool's arguments in a body (never in a regex)


def json_args(index: int, tool: ToolSpec) -> str:
    """Where ``tool``'s arguments go in a call body, as compact JSON of its parameters' schema
    (:func:`per_tool` puts the schema's grammar there). Raises ``FormatUnsupported`` now when the
    schema cannot be compiled."""
    args_grammar(index, tool)
    return _ARGS


def args_grammar(index: int, tool: ToolSpec) -> ir.Grammar:
    """The grammar of ``tool``'s arguments: only the declared ones, members in any order, values
    of any depth (``FormatUnsupported`` naming the tool when the schema cannot be compiled)."""
    from radixlm.constrained import schema_to_grammar

    try:
        return schema_to_grammar(tool.parameters, unspecified_extras=False).grammar
    except ValueError as e:
        raise FormatUnsupported(index, str(e)) from None


def per_tool(tools: list[ToolSpec], name: str | None, body: Callable[[int, ToolSpec], str | ir.Grammar],
             sep: str | None = None, max_calls: int = 1) -> dict[str, Any]:
    """The constraint of one to ``max_calls`` calls (``sep`` between two; None: one call):
    ``body(i, tool)`` for each tool a call may use, as alternatives. A body is a regex (one with
    :func:`json_args` in it holds the arguments' grammar there) or a grammar of its own."""
    bodies = [(i, t, body(i, t)) for i, t in chosen(tools, name)]
    many = sep is not None and max_calls > 1
    if not many and all(isinstance(b, str) and _ARGS not in b for _, _, b in bodies):
        return {"regex": alternatives([b for _, _, b in bodies])}  # type: ignore[misc]
    rules: dict[str, ir.Node] = {}
    calls = []
    for i, tool, text in bodies:
        if isinstance(text, ir.Grammar):
            calls.append(merge_rules(text, f"c{i}_", rules))
            continue
        parts: list[ir.Node | None] = []
        for k, piece in enumerate(text.split(_ARGS)):
            if k:
                parts.append(merge_rules(args_grammar(i, tool), f"t{i}_", rules))
            parts.append(ir.Lex(piece) if piece else None)
        calls.append(ir.seq(*[p for p in parts if p is not None]))
    call = ir.alt(calls)
    if many:
        rules["call"] = call
        call = ir.join(ir.Ref("call"), ir.Lit(sep), 1, max_calls)
    return {"ebnf": ir.Grammar(call, rules).to_lark()}


END_WHITESPACE = 2  # newlines a forced turn may write after its closing text, before its end token


def with_model_end(constraint: dict[str, Any], suffix: str) -> dict[str, Any]:
    """``constraint`` (a forced turn's calls) that may also end the way the model ends a turn of
    calls itself: the family's closing text ``suffix`` (``</tool_call>``), then up to
    ``END_WHITESPACE`` newlines, then its end token. Without it the grammar's only way on after a
    call is the separator of another call, and a model that writes the closing text is forced into
    a call it would not have made. A ``json_schema`` constraint (a format with no closing text) is
    returned as it is."""
    if not suffix or ("regex" not in constraint and "ebnf" not in constraint):
        return constraint
    if "regex" in constraint:
        return {"regex": f"({constraint['regex']})({lit(suffix)}\\n{{0,{END_WHITESPACE}}})?"}
    lark = constraint["ebnf"]
    if not lark.startswith("start:"):
        raise ValueError("a call grammar's Lark text starts with its start rule")
    end = ir.Grammar(ir.seq(ir.Ref("forced_calls"), ir.opt(ir.seq(
        ir.Lit(suffix), ir.rep(ir.Lit("\n"), 0, END_WHITESPACE)))), {}).to_lark()
    return {"ebnf": end + "forced_calls:" + lark[len("start:"):]}
