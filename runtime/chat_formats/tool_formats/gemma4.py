"""Gemma 4: ``<|tool_call>call:NAME{key:VALUE,...}<tool_call|>``, one call per block.

Values are Gemma's own JSON-like syntax, as the template's ``format_argument`` writes them: strings
between ``<|"|>`` delimiters, object keys bare, numbers and booleans as in JSON, lists in brackets;
the arguments' keys sorted (the template's ``dictsort``). A forced call's values follow the tool's
schema (the JSON grammar of each property, rewritten to this syntax); the parser reads them back to
JSON.
"""

from __future__ import annotations

import json
import re
from typing import Any

from radixlm.constrained.ir import builder as ir
from radixlm.runtime.chat_formats.tool_formats.base import CallLayout, Params, ToolFormat
from radixlm.runtime.chat_formats.tool_formats.grammar import RAW_TEXT

OPEN, CLOSE, CALL = "<|tool_call>", "<tool_call|>", "call:"
QUOTE = '<|"|>'
_KEY = re.compile(r"([{,]\s*)([A-Za-z_][A-Za-z0-9_.-]*)(\s*:)")


def to_json(text: str) -> Any:
    """Gemma's value text as a Python value (``ValueError`` when it is not one)."""
    parts = text.split(QUOTE)
    if len(parts) % 2 == 0:
        raise ValueError("an unclosed string")
    out = []
    for k, part in enumerate(parts):
        out.append(json.dumps(part, ensure_ascii=False) if k % 2 else _KEY.sub(r'\1"\2"\3', part))
    return json.loads("".join(out))


def to_gemma(value: Any) -> str:
    """A value in Gemma's syntax, as the template's ``format_argument`` writes it (keys sorted)."""
    if isinstance(value, str):
        return QUOTE + value + QUOTE
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{to_gemma(v)}" for k, v in sorted(value.items())) + "}"
    if isinstance(value, list):
        return "[" + ",".join(to_gemma(v) for v in value) + "]"
    return json.dumps(value)


def gemma_values(grammar: ir.Grammar) -> ir.Grammar:
    """A JSON value grammar in Gemma's syntax: strings delimited by ``<|"|>``, object keys bare."""
    return ir.Grammar(_gemma(grammar.start), {k: _gemma(v) for k, v in grammar.rules.items()})


def _gemma(node: ir.Node) -> ir.Node:
    if isinstance(node, ir.Seq):
        items = list(node.items)
        out = []
        for k, item in enumerate(items):
            is_key = k + 1 < len(items) and items[k + 1] == ir.Lit(":") and isinstance(item, ir.Lit)
            out.append(ir.Lit(json.loads(item.text)) if is_key else _gemma(item))
        return ir.Seq(tuple(out))
    if isinstance(node, ir.Alt):
        return ir.Alt(tuple(_gemma(x) for x in node.items))
    if isinstance(node, ir.Rep):
        return ir.Rep(_gemma(node.item), node.lo, node.hi)
    if isinstance(node, ir.Lit) and node.text.startswith('"'):
        return ir.Lit(QUOTE + json.loads(node.text) + QUOTE)
    if isinstance(node, ir.Lex) and len(node.regex) > 1 and node.regex[0] == node.regex[-1] == '"':
        return ir.seq(ir.Lit(QUOTE), ir.LexOp("and", (node.regex[1:-1], f"{RAW_TEXT}*")), ir.Lit(QUOTE)) or ir.EMPTY
    return node


class Gemma4Format(ToolFormat):
    """Gemma 4's call blocks."""

    name = "gemma4"
    syntax = "Gemma 4: ``<|tool_call>call:NAME{key:VALUE,...}<tool_call|>``, one call per block."
    arguments_layout = 'Gemma values (`<|"|>` strings, bare keys)'
    aliases = ("gemma-4", "gemma_4")
    layout = CallLayout(OPEN, CLOSE, CALL + "{name}{{args}}",
                        Params("{key}:", sep=",", key=r"[A-Za-z_][A-Za-z0-9_.-]*", values=gemma_values,
                               read=lambda args: to_json("{" + args + "}"), write=to_gemma, sort_keys=True),
                        forced_head=True)
    inner_markers = (QUOTE,)
