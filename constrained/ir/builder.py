"""The grammar the front ends emit: a context-free grammar over lexemes, its node types and
constructors, and its text (llguidance's Lark dialect, or one regex).

The grammar the front ends emit: a context-free grammar over lexemes, and its Lark text.

Nodes (``ir.builder``) are immutable and hashable (equal sub-grammars dedupe): ``Lit`` (literal text), ``Lex`` (a
lexeme given as a regex: a JSON string, a number, a key), ``LexOp`` (one lexeme combining regexes
with llguidance's lexeme algebra: ``&`` intersection, ``~`` complement, ``|``, concatenation),
``Seq``, ``Alt``, ``Rep`` (counted repetition, ``hi=None`` unbounded) and ``Ref`` (a named rule,
which is how recursion and shared definitions are written). The constructors below simplify as they build (``None`` stands for an
unsatisfiable part and propagates), so the front end writes ``seq(a, opt(b))`` without special
cases. ``Grammar.to_lark()`` writes llguidance's Lark dialect (``ir.builder``); ``Grammar.pruned()`` removes rules
that derive no finite text (a required self-reference), which only a whole-grammar pass can see.

Structure (brackets, commas, colons) stays at the grammar level and only scalars are lexemes, so no
two adjacent lexemes can run into each other (the lexer is greedy).

Nodes: The nodes of the grammar IR (``ir.builder``): immutable and hashable, so equal sub-grammars dedupe.

``Lit`` (literal text), ``Lex`` (a lexeme given as a regex), ``LexOp`` (one lexeme combining
regexes with llguidance's lexeme algebra), ``Seq``, ``Alt``, ``Rep`` (counted repetition) and
``Ref`` (a named rule). Build them with ``ir.builder``'s constructors, which simplify as they go.

Text: The grammar IR written out as text: llguidance's Lark dialect, or one regex (``ir.builder.Grammar``).
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field

from radixlm.constrained.errors import ConstraintError
from radixlm.constrained.pattern.regex_text import escape_literal


@dataclass(frozen=True)
class Lit:
    """Literal text."""

    text: str


@dataclass(frozen=True)
class Lex:
    """One lexeme: the text of one regex match (Rust ``regex`` syntax, no anchors)."""

    regex: str


@dataclass(frozen=True)
class LexOp:
    """One lexeme built from regexes: ``op`` is ``and`` (``&``: the texts every part matches),
    ``or`` (``|``), ``not`` (``~``, one part: every text the part does not match) or ``seq``
    (concatenation); ``parts`` are regexes (str) or ``LexOp``s. Written out as a Lark terminal of
    its own (llguidance allows ``&``/``~`` only in terminals). ``as_regex``, when set, is one regex
    that matches the same texts: ``Grammar.to_regex`` writes it, and raises without it.
    ``pointer`` (the schema node it came from) is for that error."""

    op: str
    parts: tuple
    pointer: str = field(default="#", compare=False)
    as_regex: str | None = field(default=None, compare=False)


@dataclass(frozen=True)
class Seq:
    """Concatenation; ``Seq(())`` is the empty text."""

    items: tuple


@dataclass(frozen=True)
class Alt:
    """Alternation of two or more nodes."""

    items: tuple


@dataclass(frozen=True)
class Rep:
    """``item`` repeated ``lo`` to ``hi`` times (``hi`` None: unbounded)."""

    item: Node
    lo: int
    hi: int | None


@dataclass(frozen=True)
class Ref:
    """The rule called ``name`` in the grammar."""

    name: str


Node = Lit | Lex | LexOp | Seq | Alt | Rep | Ref
EMPTY = Seq(())


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


def lex(regex: str | None) -> Node | None:
    """A lexeme, or the empty text for an empty regex (None stays None)."""
    if regex is None:
        return None
    return EMPTY if regex == "" else Lex(regex)


def seq(*parts: Node | None) -> Node | None:
    """Concatenation of ``parts`` (None if any is None); nested sequences flatten.

    Adjacent literals are *not* merged: every literal is one JSON token (a bracket, a comma, a
    key), so all alternatives cut the text into lexemes at the same places. (Merged, ``{"t":``
    in one branch and ``{"t":"num"`` in another would be rival lexemes, and the greedy lexer
    would follow the longer one past the point where only the other fits.)"""
    out: list[Node] = []
    for p in parts:
        if p is None:
            return None
        for q in p.items if isinstance(p, Seq) else (p,):
            if not (isinstance(q, Lit) and not q.text):
                out.append(q)
    return out[0] if len(out) == 1 else Seq(tuple(out))


def alt(parts: list[Node | None] | tuple) -> Node | None:
    """Alternation of the satisfiable ``parts`` (None when none is), duplicates dropped."""
    out: list[Node] = []
    for p in parts:
        if p is None:
            continue
        for q in p.items if isinstance(p, Alt) else (p,):
            if q not in out:
                out.append(q)
    if not out:
        return None
    return out[0] if len(out) == 1 else Alt(tuple(out))


def rep(item: Node | None, lo: int, hi: int | None) -> Node | None:
    """``item`` lo..hi times; zero repetitions of an unsatisfiable item are still the empty text."""
    if hi is not None and hi < lo:
        return None
    if item is None or hi == 0:
        return EMPTY if lo == 0 else None
    if lo == hi == 1:
        return item
    if item == EMPTY:
        return EMPTY
    return Rep(item, lo, hi)


def opt(item: Node | None) -> Node:
    """``item`` or nothing."""
    out = rep(item, 0, 1)
    assert out is not None
    return out


def join(item: Node | None, sep: Node, lo: int, hi: int | None) -> Node | None:
    """``lo``..``hi`` copies of ``item`` separated by ``sep`` (``item (sep item){lo-1,hi-1}``)."""
    if hi is not None and hi < lo:
        return None
    if hi == 0 or item is None:
        return EMPTY if lo == 0 else None
    body = seq(item, rep(seq(sep, item), max(lo - 1, 0), None if hi is None else hi - 1))
    return body if lo > 0 else opt(body)


class Grammar:
    """A start node plus named rules (``Ref`` targets)."""

    def __init__(self, start: Node, rules: dict[str, Node] | None = None) -> None:
        self.start = start
        self.rules = dict(rules or {})

    def productive(self) -> set[str]:
        """The rules that derive at least one finite text (a least fixed point)."""
        done: set[str] = set()
        changed = True
        while changed:
            changed = False
            for name, node in self.rules.items():
                if name not in done and _productive(node, done):
                    done.add(name)
                    changed = True
        return done

    def pruned(self) -> Grammar | None:
        """This grammar without its unproductive rules and the parts that need them (None when
        the start node itself derives no finite text)."""
        good = self.productive()
        if len(good) == len(self.rules):  # the common case: nothing to cut out
            rules = dict(self.rules)
        else:
            rules = {n: _prune(r, good) for n, r in self.rules.items() if n in good}
        start = _prune(self.start, good)
        if start is None:
            return None
        used = _reachable(start, rules)
        return Grammar(start, {n: r for n, r in rules.items() if n in used})

    def to_regex(self, depth: int = 3) -> str | None:
        """One regex for the whole grammar, rules inlined, recursion cut after ``depth`` levels
        (a restriction; None when nothing is left). For callers that compose constraints as
        regexes; the engine itself compiles ``to_lark()``. Raises ``ConstraintError`` (a
        ``ValueError``) naming the schema node when a ``LexOp`` (``&``/``~``) is left."""
        node = _inline(self.start, self.rules, depth, {})
        return None if node is None else regex_text(node)

    def to_lark(self) -> str:
        """The grammar in llguidance's Lark dialect (``start`` first)."""
        return lark_text(self.start, self.rules)


def _productive(node: Node | None, good: set[str]) -> bool:
    if node is None:
        return False
    if isinstance(node, (Lit, Lex, LexOp)):
        return True
    if isinstance(node, Ref):
        return node.name in good
    if isinstance(node, Seq):
        return all(_productive(x, good) for x in node.items)
    if isinstance(node, Alt):
        return any(_productive(x, good) for x in node.items)
    return node.lo == 0 or _productive(node.item, good)


def _prune(node: Node, good: set[str]) -> Node | None:
    if isinstance(node, Ref):
        return node if node.name in good else None
    if isinstance(node, Seq):
        return seq(*(_prune(x, good) for x in node.items))
    if isinstance(node, Alt):
        return alt([_prune(x, good) for x in node.items])
    if isinstance(node, Rep):
        return rep(_prune(node.item, good), node.lo, node.hi)
    return node


def _reachable(start: Node, rules: dict[str, Node]) -> set[str]:
    seen: set[str] = set()
    todo = [start]
    while todo:
        node = todo.pop()
        if isinstance(node, Ref):
            if node.name not in seen and node.name in rules:
                seen.add(node.name)
                todo.append(rules[node.name])
        elif isinstance(node, (Seq, Alt)):
            todo.extend(node.items)
        elif isinstance(node, Rep):
            todo.append(node.item)
    return seen


def _inline(node: Node, rules: dict[str, Node], depth: int, seen: dict[str, int]) -> Node | None:
    if isinstance(node, Ref):
        uses = seen.get(node.name, 0)
        if uses > depth or node.name not in rules:
            return None
        seen[node.name] = uses + 1
        try:
            return _inline(rules[node.name], rules, depth, seen)
        finally:
            seen[node.name] = uses
    if isinstance(node, Seq):
        return seq(*(_inline(x, rules, depth, seen) for x in node.items))
    if isinstance(node, Alt):
        return alt([_inline(x, rules, depth, seen) for x in node.items])
    if isinstance(node, Rep):
        return rep(_inline(node.item, rules, depth, seen), node.lo, node.hi)
    return node
