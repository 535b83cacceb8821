"""The grammar IR written out as text: llguidance's Lark dialect, or one regex (``grammar_ir.Grammar``)."""

from __future__ import annotations

import functools
import json

from radixlm.constrained.errors import ConstraintError
from radixlm.constrained.grammar_nodes import Alt, Lex, LexOp, Lit, Node, Ref, Rep, Seq
from radixlm.constrained.pattern.chars import escape_literal


def lark_text(start: Node, rules: dict[str, Node]) -> str:
    """The grammar in llguidance's Lark dialect (``start`` first, then the rules, then one
    terminal per ``LexOp``)."""
    terms: dict[LexOp, str] = {}  # each LexOp becomes a terminal (LEX0, LEX1, ...)
    lines = [f"start: {_lark(start, terms)}"]
    lines += [f"{name}: {_lark(node, terms)}" for name, node in rules.items()]
    lines += [f"{name}: {_lex_op(op)}" for op, name in terms.items()]
    return "\n".join(lines) + "\n"


def regex_text(node: Node) -> str:
    """One regex for a node without rule references. Raises ``ConstraintError`` naming the schema
    node when it holds a ``LexOp`` (``&``/``~``: no single regex expresses it)."""
    return _regex(node)


def _regex(node: Node) -> str:
    if isinstance(node, LexOp):
        raise ConstraintError("this schema combines patterns (an intersection or a `not`), which one regex "
                              "cannot express; compile it as a grammar instead", node.pointer)
    if isinstance(node, Lit):
        return escape_literal(node.text)
    if isinstance(node, Lex):
        return f"({node.regex})"
    if isinstance(node, Seq):
        return "".join(_regex(x) for x in node.items)
    if isinstance(node, Alt):
        return "(" + "|".join(_regex(x) for x in node.items) + ")"
    assert isinstance(node, Rep)
    return f"({_regex(node.item)}){{{node.lo},{'' if node.hi is None else node.hi}}}"


def _lark(node: Node, terms: dict[LexOp, str]) -> str:
    if isinstance(node, Lit):
        return json.dumps(node.text)
    if isinstance(node, Lex):
        return "/" + _slash_escaped(node.regex) + "/"
    if isinstance(node, LexOp):
        return terms.setdefault(node, f"LEX{len(terms)}")
    if isinstance(node, Ref):
        return node.name
    if isinstance(node, Seq):
        return " ".join(_group(x, terms) for x in node.items) if node.items else '""'
    if isinstance(node, Alt):
        return " | ".join(_lark(x, terms) for x in node.items)
    inner = _group(node.item, terms)
    if (node.lo, node.hi) == (0, 1):
        return f"{inner}?"
    if (node.lo, node.hi) == (0, None):
        return f"{inner}*"
    if (node.lo, node.hi) == (1, None):
        return f"{inner}+"
    return f"{inner}{{{node.lo},{'' if node.hi is None else node.hi}}}"


@functools.lru_cache(maxsize=65536)  # a grammar repeats its few lexemes many times
def _slash_escaped(regex: str) -> str:
    """``regex`` with its unescaped ``/`` escaped (Lark's regex literals end at one)."""
    out, escaped = [], False
    for c in regex:
        out.append("\\/" if c == "/" and not escaped else c)
        escaped = c == "\\" and not escaped
    return "".join(out)


def _lex_op(node: LexOp) -> str:
    """A terminal's body: the operators of ``node`` over its regexes, every operand grouped."""
    parts = [f"/{_slash_escaped(p)}/" if isinstance(p, str) else f"({_lex_op(p)})" for p in node.parts]
    if node.op == "not":
        return f"~{parts[0]}"
    return {"and": " & ", "or": " | ", "seq": " "}[node.op].join(parts)


def _group(node: Node, terms: dict[LexOp, str]) -> str:
    """``node`` as an operand: alternations, sequences and repetitions in parentheses."""
    text = _lark(node, terms)
    return f"({text})" if isinstance(node, (Alt, Seq, Rep)) else text
