"""Building blocks for call bodies: literal text, JSON arguments, and flat argument layouts.

The engine takes one constraint per request. A call body in a family's wrapper is written as a
regex: the wrapper's literal text (escaped for the grammar's Rust regex syntax) around the
arguments. Where the arguments are JSON (:func:`json_args`), :func:`per_tool` turns the body into
a grammar: the wrapper's pieces as lexemes around the grammar
:func:`radixlm.constrained.schema_to_grammar` makes of the tool's parameters (any depth, members in
any order, only the declared ones); the pythonic and
XML-parameter layouts are built here for flat objects of scalar properties, the cases they can
express exactly. Anything else raises :class:`FormatUnsupported` naming the tool.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from radixlm.constrained import escape_literal
from radixlm.constrained.ir import builder as ir
from radixlm.runtime.chat_formats.tool_formats.base import FormatUnsupported
from radixlm.runtime.chat_formats.tools import ToolSpec

# Keywords that do not constrain a value (a property with others is not "flat").
_ANNOTATIONS = {"description", "title", "default", "examples"}
INTEGER = r"-?(0|[1-9][0-9]{0,15})"
NUMBER = r"-?(0|[1-9][0-9]{0,15})(\.[0-9]{1,15})?([eE][+-]?[0-9]{1,3})?"


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


def per_tool(tools: list[ToolSpec], name: str | None, body: Callable[[int, ToolSpec], str]) -> dict[str, Any]:
    """The constraint of one call: ``body(i, tool)`` for each tool the call may use, as
    alternatives. A body is a regex; one with :func:`json_args` in it becomes a grammar (an
    ``ebnf`` constraint in Lark) in which the wrapper's regex pieces surround the arguments'
    grammar, so nested values keep any depth and members any order."""
    bodies = [(i, t, body(i, t)) for i, t in chosen(tools, name)]
    if not any(_ARGS in b for _, _, b in bodies):
        return {"regex": alternatives([b for _, _, b in bodies])}
    rules: dict[str, ir.Node] = {}
    calls = []
    for i, tool, text in bodies:
        parts: list[ir.Node | None] = []
        for k, piece in enumerate(text.split(_ARGS)):
            if k:
                parts.append(_merge_rules(args_grammar(i, tool), f"t{i}_", rules))
            parts.append(ir.Lex(piece) if piece else None)
        calls.append(ir.seq(*[p for p in parts if p is not None]))
    return {"ebnf": ir.Grammar(ir.alt(calls), rules).to_lark()}


def _merge_rules(grammar: ir.Grammar, prefix: str, rules: dict[str, ir.Node]) -> ir.Node:
    """Add ``grammar``'s rules to ``rules`` under ``prefix`` and return its start node (its
    references renamed the same way)."""
    for name, node in grammar.rules.items():
        rules[prefix + name] = _renamed(node, prefix)
    return _renamed(grammar.start, prefix)


def _renamed(node: ir.Node, prefix: str) -> ir.Node:
    """``node`` with every rule reference prefixed."""
    if isinstance(node, ir.Ref):
        return ir.Ref(prefix + node.name)
    if isinstance(node, (ir.Seq, ir.Alt)):
        return type(node)(tuple(_renamed(x, prefix) for x in node.items))
    if isinstance(node, ir.Rep):
        return ir.Rep(_renamed(node.item, prefix), node.lo, node.hi)
    return node  # literals and lexemes


def flat_properties(index: int, tool: ToolSpec, layout: str) -> list[tuple[str, dict, bool]]:
    """(name, schema, required) of each property of a flat object schema, or FormatUnsupported."""
    schema = tool.parameters
    extra = set(schema) - _ANNOTATIONS - {"type", "properties", "required", "additionalProperties"}
    if schema.get("type", "object") != "object" or extra:
        raise FormatUnsupported(index, f"the {layout} call layout needs a flat object schema "
                                f"(type object with properties); got keywords {sorted(extra) or ['type']}")
    required = set(schema.get("required") or [])
    out = []
    for key, prop in (schema.get("properties") or {}).items():
        if not isinstance(prop, dict) or scalar_kind(prop) is None:
            raise FormatUnsupported(index, f"the {layout} call layout can express only string, number, "
                                    f"integer, boolean, enum or const properties; '{key}' is not one")
        out.append((key, prop, key in required))
    return out


def scalar_kind(prop: dict) -> str | None:
    """enum | string | integer | number | boolean for a property this module can express, else None."""
    keys = set(prop) - _ANNOTATIONS
    if "enum" in prop or "const" in prop:
        values = prop.get("enum", [prop.get("const")])
        ok = keys <= {"enum", "const", "type"} and all(isinstance(v, (str, int, float, bool)) for v in values)
        return "enum" if ok and values else None
    if keys == {"type"} and prop["type"] in ("string", "integer", "number", "boolean"):
        return prop["type"]
    return None


def enum_values(prop: dict) -> list[Any]:
    return list(prop.get("enum", [prop.get("const")]))


def json_scalar(prop: dict, string_rx: str) -> str:
    """A scalar property's value as JSON/Python-literal-compatible text (strings via ``string_rx``)."""
    kind = scalar_kind(prop)
    if kind == "enum":
        return alternatives([lit(json.dumps(v, ensure_ascii=False)) for v in enum_values(prop)])
    return {"string": string_rx, "integer": INTEGER, "number": NUMBER, "boolean": "(true|false)"}[kind]


def required_only(props: list[tuple[str, dict, bool]]) -> list[tuple[str, dict]]:
    """The properties a generated call writes: the required ones, in schema order. Leaving the
    optional ones out keeps the layout's regex small and every call valid."""
    return [(k, p) for k, p, req in props if req]
