"""The abstract JSON reader over a front-end grammar (``ir.builder``) that
``unique_paths`` builds its path automaton from.

Every ``Lit`` of the front end's grammars is one JSON token (brackets, commas, colons, keys,
literal values) and every ``Lex`` a scalar or a key (or the whitespace lexeme), so reading the
grammar as a JSON reader reads text tells which container *site* (an opening bracket's place in
the grammar, ``(id(seq), index)``) can stand where: ``edges[site][label]`` are the sites that
can be its items (label ``"*"``) or its member's value under a literal key (the key's raw
bytes) or a lexeme's key (``OTHER``). Rules are summarised per entry frame; recursion is solved
to a fixpoint per strongly connected group of summaries.

When the grammar has counted plain strings (``counted_strings``), the string-valued scalars are
sites too, of kind ``s``: ``(STRING_SITE, regex)`` for a counted lexeme, ``(STRING_SITE, None)``
for any other lexeme or literal that can be a string; ``key_counted`` collects the counted
lexemes that stand as keys.
"""

from __future__ import annotations

from collections import defaultdict

from radixlm.constrained.ir import builder as ir
from radixlm.constrained.json_schema.counted_strings import STRING_SITE, may_be_string

OTHER = None  # label of a member whose key a lexeme generates (not a literal key)
ROOT = "root"


class Surprise(Exception):
    """The grammar has a shape the abstract reader does not follow."""


class GrammarReader:
    """The abstract JSON reader over the grammar. A state is ``(k, frames)``: ``frames`` the open
    containers, innermost last, each ``(site, kind, local)`` (kind ``a``/``o``; local ``V``
    value expected, ``A`` after a value, ``K`` key expected, ``("C", key)`` colon expected,
    ``("V", key)`` the member's value expected); ``k`` counts frames a rule closed below its
    entry frame (a rule summary's result)."""

    def __init__(self, grammar: ir.Grammar, ws: ir.Node, counted: frozenset = frozenset()) -> None:
        self.rules, self.ws = grammar.rules, ws
        self.counted = counted  # empty: scalars are not sites (nothing is counted at runtime)
        self.key_counted: set[str] = set()
        self.kind: dict = {ROOT: "a"}
        self.edges: dict = defaultdict(lambda: defaultdict(set))  # site -> label -> sites
        self.named: dict = defaultdict(set)  # object site -> its literal keys
        self.summaries: dict = {}
        self.final: dict = {}  # solved summaries
        self.depth: dict = {}  # summaries being computed -> their depth
        self.pending: dict = {}  # computed, but from an unsolved head's value -> its depth
        self.inner: list = []  # the pending ones, in order
        self.low = 0  # the shallowest unfinished summary the current one read

    def run(self, start: ir.Node) -> None:
        out = self.walk(start, frozenset({(0, ((ROOT, "a", "V"),))}))
        if out != {(0, ((ROOT, "a", "A"),))}:
            raise Surprise("the start rule is not one JSON value")

    def walk(self, node: ir.Node, states: frozenset) -> frozenset:
        if not states:
            return states
        if isinstance(node, ir.Seq):
            for i, item in enumerate(node.items):
                if isinstance(item, ir.Lit):
                    states = frozenset(self._lit(s, item.text, (id(node), i)) for s in states)
                else:
                    states = self.walk(item, states)
            return states
        if isinstance(node, ir.Alt):
            return frozenset().union(*(self.walk(x, states) for x in node.items))
        if isinstance(node, ir.Rep):
            return self._rep(node, states)
        if isinstance(node, ir.Ref):
            return self._ref(node.name, states)
        if isinstance(node, ir.Lit):
            return frozenset(self._lit(s, node.text, None) for s in states)
        if node == self.ws:
            return states
        return frozenset(self._lex(s, node) for s in states)

    def _rep(self, node: ir.Rep, states: frozenset) -> frozenset:
        reach: set = set()
        frontier, count = states, 0
        while frontier and (node.hi is None or count < node.hi):  # over-approximates lo > 1: sound
            out = self.walk(node.item, frontier)
            frontier = frozenset(out - reach)
            reach |= out
            count += 1
        return frozenset(reach | (states if node.lo == 0 else set()))

    def _ref(self, name: str, states: frozenset) -> frozenset:
        out = set()
        for k, frames in states:
            if not frames:
                raise Surprise(f"rule {name} after its caller's container closed")
            for k2, tail in self._summary(name, frames[-1]):
                if k2 > 1 or (k2 and tail):
                    raise Surprise(f"rule {name} goes on after closing its caller's container")
                out.add(self._pop((k, frames)) if k2 else (k, frames[:-1] + tail))
        return frozenset(out)

    def _summary(self, name: str, entry: tuple) -> frozenset:
        """What rule ``name`` does from ``entry``: its ``(k, new frames)`` results. Recursion is
        solved per strongly connected group of summaries: the first one entered (the head)
        is recomputed until it stops growing, and the group's summaries then become final."""
        key = (name, entry)
        if key in self.final:
            return self.final[key]
        if key in self.depth or key in self.pending:  # unfinished: depends on that head
            self.low = min(self.low, self.depth.get(key, self.pending.get(key)))
            return self.summaries.get(key, frozenset())
        depth, outer, mark = len(self.depth), self.low, len(self.inner)
        self.depth[key] = depth
        while True:
            self.low = len(self.depth) + 1
            out = self.walk(self.rules[name], frozenset({(0, (entry,))}))
            old = self.summaries.get(key, frozenset())
            self.summaries[key] = result = old | out
            if self.low != depth or result == old:
                break
            for inner in self.inner[mark:]:  # computed from this head's last value: again
                del self.pending[inner]
            del self.inner[mark:]
        del self.depth[key]
        if self.low >= depth:  # the group is solved
            for inner in self.inner[mark:] + [key]:
                self.final[inner] = self.summaries[inner]
                self.pending.pop(inner, None)
            del self.inner[mark:]
        else:
            self.pending[key] = self.low
            self.inner.append(key)
        self.low = min(outer, self.low)
        return result

    def _lit(self, state: tuple, text: str, site: tuple | None) -> tuple:
        k, frames = state
        if not frames:
            raise Surprise(f"{text!r} after the container closed")
        top = frames[-1]
        where, kind, local = top
        if text in ("[", "{"):
            if site is None:
                raise Surprise("a bracket outside a sequence")
            self._edge(top, site, "a" if text == "[" else "o")
            return k, frames + ((site, "a", "V") if text == "[" else (site, "o", "K"),)
        if text in ("]", "}"):
            if where == ROOT or kind != ("a" if text == "]" else "o") or local not in ("V", "A", "K"):
                raise Surprise(f"{text!r} out of place")
            return self._pop(state)
        if text == ",":
            if where == ROOT or local != "A":
                raise Surprise("',' out of place")
            return k, frames[:-1] + ((where, kind, "V" if kind == "a" else "K"),)
        if text == ":":
            if not (isinstance(local, tuple) and local[0] == "C"):
                raise Surprise("':' out of place")
            return k, frames[:-1] + ((where, kind, ("V", local[1])),)
        if kind == "o" and local == "K":
            self.named[where].add(text.encode())
            return k, frames[:-1] + ((where, kind, ("C", text.encode())),)
        if self.counted and text.startswith('"'):
            self._edge(top, (STRING_SITE, None), "s")
        return k, frames[:-1] + (_done(top),)

    def _lex(self, state: tuple, node: ir.Node) -> tuple:
        k, frames = state
        if not frames:
            raise Surprise("a lexeme after the container closed")
        where, kind, local = frames[-1]
        regex = node.regex if isinstance(node, ir.Lex) else None
        if kind == "o" and local == "K":
            if regex in self.counted:
                self.key_counted.add(regex)
            return k, frames[:-1] + ((where, kind, ("C", OTHER)),)
        if self.counted and may_be_string(node):
            self._edge(frames[-1], (STRING_SITE, regex if regex in self.counted else None), "s")
        return k, frames[:-1] + (_done(frames[-1]),)

    def _edge(self, top: tuple, site: tuple, kind: str) -> None:
        where, parent_kind, local = top
        if parent_kind == "a" and local == "V":
            label = "*"
        elif isinstance(local, tuple) and local[0] == "V":
            label = local[1]
        else:
            raise Surprise("a container where no value is expected")
        if self.kind.setdefault(site, kind) != kind:
            raise Surprise("a site opens both kinds")
        self.edges[where][label].add(site)

    @staticmethod
    def _pop(state: tuple) -> tuple:
        k, frames = state
        frames = frames[:-1]
        if not frames:
            return k + 1, ()
        return k, frames[:-1] + (_done(frames[-1]),)


def _done(frame: tuple) -> tuple:
    """``frame`` after one of its values is complete."""
    where, kind, local = frame
    if local == "V" or (isinstance(local, tuple) and local[0] == "V"):
        return where, kind, "A"
    raise Surprise("a value where none is expected")
