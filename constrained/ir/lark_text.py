"""The grammar IR written out as text: llguidance's Lark dialect, or one regex (``ir.builder.Grammar``)."""

from __future__ import annotations

import functools
import json

from radixlm.constrained.errors import ConstraintError
from radixlm.constrained.ir.nodes import Alt, Lex, LexOp, Lit, Node, Ref, Rep, Seq
from radixlm.constrained.pattern.chars import escape_literal


def lark_text(start: Node, rules: dict[str, Node]) -> str:
    """The grammar in llguidance's Lark dialect (``start`` first, then the rules, then the shared
    sub-grammars, then one terminal per ``LexOp``).

    A sub-grammar written in several places (the same enum under every member of an object, the
    same value under every subset rule of an any-order object) becomes a rule of its own, written
    once: the text, and the core's build over it, then grow with the grammar's distinct structure
    instead of its inlined size (``_Writer``)."""
    writer = _Writer(start, rules)
    lines = [f"start: {writer.body(start)}"]
    lines += [f"{name}: {writer.body(node)}" for name, node in rules.items()]
    lines += writer.shared_lines()
    lines += [f"{name}: {_lex_op(op)}" for op, name in writer.terms.items()]
    return "\n".join(lines) + "\n"


def regex_text(node: Node) -> str:
    """One regex for a node without rule references. Raises ``ConstraintError`` naming the schema
    node when it holds a ``LexOp`` (``&``/``~``) that has no equivalent ``as_regex`` of its own."""
    return _regex(node)


def _regex(node: Node) -> str:
    if isinstance(node, LexOp):
        if node.as_regex is not None:
            return f"({node.as_regex})"
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


_MIN_SHARED = 24  # characters: a shorter sub-grammar stays inline (a rule costs its name and a line)


class _Writer:
    """Writes the nodes of one grammar. Structurally equal nodes get one canonical id (``_canon``,
    memoised by object identity, so a shared object is read once); a composite node that occurs
    under two or more distinct parents and would take ``_MIN_SHARED`` characters or more is written
    once as a rule (``shared0``, ...) and referred to by name everywhere else."""

    def __init__(self, start: Node, rules: dict[str, Node]) -> None:
        self.terms: dict[LexOp, str] = {}  # each LexOp becomes a terminal (LEX0, LEX1, ...)
        self._ids: dict[int, int] = {}  # id(node) -> canonical id
        self._keys: dict[tuple, int] = {}  # structure -> canonical id
        self._nodes: list[Node] = []  # canonical id -> a node of that structure
        self._size: list[int] = []  # canonical id -> inline text length (estimate)
        self._uses: list[int] = []  # canonical id -> occurrences under distinct parents (and as a root)
        self._text: dict[int, str] = {}  # canonical id -> written form (a name, or the expression)
        self._shared: dict[int, str] = {}  # canonical id -> rule name
        self._order: list[int] = []  # the shared ids in the order they were named
        self._prefix = "shared"
        while any(n.startswith(self._prefix) for n in rules):  # never a rule's own name
            self._prefix += "_x"
        self._uses[self._canon(start)] += 1
        for name, node in rules.items():
            cid = self._canon(node)
            self._uses[cid] += 1
            if isinstance(node, (Seq, Alt, Rep)) and cid not in self._shared:  # written elsewhere as its rule
                self._shared[cid] = self._text[cid] = name

    def _canon(self, node: Node) -> int:
        got = self._ids.get(id(node))
        if got is not None:
            return got
        cls = type(node)  # the node classes have no subclasses: exact types, the hot path
        if cls is Seq or cls is Alt:
            kids = tuple(map(self._canon, node.items))
            key, size = (cls, kids), sum(map(self._size.__getitem__, kids)) + 3 * len(kids) + 2
        elif cls is Rep:
            kids = (self._canon(node.item),)
            key, size = (Rep, kids, node.lo, node.hi), self._size[kids[0]] + 6
        else:
            kids, key, size = (), node, len(getattr(node, "text", getattr(node, "regex", ""))) + 2
        cid = self._keys.get(key)
        if cid is None:
            cid = self._keys[key] = len(self._nodes)
            self._nodes.append(node)
            self._size.append(size)
            self._uses.append(0)
            for k in kids:  # counted once per distinct parent: a shared parent is written once
                self._uses[k] += 1
        self._ids[id(node)] = cid
        return cid

    def body(self, node: Node) -> str:
        """``node``'s own expression (a rule's body)."""
        return self._expr(self._nodes[self._canon(node)])

    def shared_lines(self) -> list[str]:
        """The shared sub-grammars' rules (new ones may be named while writing them)."""
        lines = []
        while len(lines) < len(self._order):  # writing a body may name more
            cid = self._order[len(lines)]
            lines.append(f"{self._shared[cid]}: {self._expr(self._nodes[cid])}")
        return lines

    def _write(self, node: Node) -> str:
        cid = self._canon(node)
        text = self._text.get(cid)
        if text is None:
            if type(node) in _COMPOSITE and self._uses[cid] >= 2 and self._size[cid] >= _MIN_SHARED:
                text = self._shared[cid] = f"{self._prefix}{len(self._order)}"
                self._order.append(cid)
            else:
                text = self._expr(node)
            self._text[cid] = text
        return text

    def _expr(self, node: Node) -> str:
        cls = type(node)
        if cls is Lit:
            return json.dumps(node.text)
        if cls is Lex:
            return "/" + _slash_escaped(node.regex) + "/"
        if cls is LexOp:
            return self.terms.setdefault(node, f"LEX{len(self.terms)}")
        if cls is Ref:
            return node.name
        if cls is Seq:
            return " ".join(map(self._group, node.items)) if node.items else '""'
        if cls is Alt:
            return " | ".join(map(self._write, node.items))
        inner = self._group(node.item)
        if (node.lo, node.hi) == (0, 1):
            return f"{inner}?"
        if (node.lo, node.hi) == (0, None):
            return f"{inner}*"
        if (node.lo, node.hi) == (1, None):
            return f"{inner}+"
        return f"{inner}{{{node.lo},{'' if node.hi is None else node.hi}}}"

    def _group(self, node: Node) -> str:
        """``node`` as an operand: alternations, sequences and repetitions in parentheses (a
        shared one is its rule's name)."""
        text = self._write(node)
        if type(node) in _COMPOSITE and self._ids[id(node)] not in self._shared:
            return f"({text})"
        return text


_COMPOSITE = frozenset((Seq, Alt, Rep))


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
