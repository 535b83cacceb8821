"""The grammar the front ends emit: a context-free grammar over lexemes, and its Lark text.

Nodes (``ir.nodes``) are immutable and hashable (equal sub-grammars dedupe): ``Lit`` (literal text), ``Lex`` (a
lexeme given as a regex: a JSON string, a number, a key), ``LexOp`` (one lexeme combining regexes
with llguidance's lexeme algebra: ``&`` intersection, ``~`` complement, ``|``, concatenation),
``Seq``, ``Alt``, ``Rep`` (counted repetition, ``hi=None`` unbounded) and ``Ref`` (a named rule,
which is how recursion and shared definitions are written). The constructors below simplify as they build (``None`` stands for an
unsatisfiable part and propagates), so the front end writes ``seq(a, opt(b))`` without special
cases. ``Grammar.to_lark()`` writes llguidance's Lark dialect (``ir.lark_text``); ``Grammar.pruned()`` removes rules
that derive no finite text (a required self-reference), which only a whole-grammar pass can see.

Structure (brackets, commas, colons) stays at the grammar level and only scalars are lexemes, so no
two adjacent lexemes can run into each other (the lexer is greedy).
"""

from __future__ import annotations

from radixlm.constrained.ir.lark_text import lark_text, regex_text
from radixlm.constrained.ir.nodes import EMPTY, Alt, Lex, LexOp, Lit, Node, Ref, Rep, Seq

__all__ = ["EMPTY", "Alt", "Grammar", "Lex", "LexOp", "Lit", "Node", "Ref", "Rep", "Seq", "alt", "join", "lex", "opt",
           "rep", "seq"]


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
