"""What the matcher checks at runtime, located in the finished grammar: the path automaton
(``UniquePaths``) of ``uniqueItems`` arrays, runtime-checked objects (one check for several
objects at a path: ``MemberUnion``) and counted strings, read by an abstract JSON reader over
the grammar.

Where the runtime-checked ``uniqueItems`` arrays are: a pass over the finished grammar that
builds ``UniquePaths`` (``checks/reader.py``), a small automaton over JSON paths that the matcher's
runtime check (``checks/tracker.py``) follows as the text arrives.

``arrays.py`` emits each free-item ``uniqueItems`` array as a rule of its own (registered in
``Context.unique_arrays``). The grammar, not the schema walk, says where those rules occur: a rule
may be shared by many instance positions (``$ref``s, any-order members, recursion). The pass
interprets the grammar abstractly, as a JSON reader would (every ``Lit`` is one JSON token:
brackets, commas, colons, keys, literal values; ``Lex`` nodes are scalars or keys), and records
which container *sites* (an opening bracket's place in the grammar) can hold which other sites,
under which key (the reader below).

The automaton's states are sets of sites that can stand at one path: member keys are matched on
their raw bytes (a literal key, else the keys a lexeme generates), array items share one state.
A path where a unique array and any other array can both stand is ambiguous: those unique rules
fall back to the grammar-only restriction (``Restriction``), read as unchecked arrays. Any
surprise (structure the reader does not expect) falls back for every rule. Sound either way:
every position a unique rule can reach is a unique state of the automaton.

Runtime-checked objects (``objects``: registered in ``Context.member_objects``) are
located the same way: a state names the ``MemberSpec`` of the object opening there; a path
where objects of different specs (or an unchecked one) can stand falls back to their
grammar-level construction, unless ``MemberUnion`` can check them together. Optional checks
(objects the grammar would take in any order) stay only where such a path holds another checked
object; the others get their any-order construction back.

The reader: the abstract JSON reader over a front-end grammar (``ir.builder``) that the path
automaton is built from.

Every ``Lit`` of the front end's grammars is one JSON token (brackets, commas, colons, keys,
literal values) and every ``Lex`` a scalar or a key (or the whitespace lexeme), so reading the
grammar as a JSON reader reads text tells which container *site* (an opening bracket's place in
the grammar, ``(id(seq), index)``) can stand where: ``edges[site][label]`` are the sites that
can be its items (label ``"*"``) or its member's value under a literal key (the key's raw
bytes) or a lexeme's key (``OTHER``). Rules are summarised per entry frame; recursion is solved
to a fixpoint per strongly connected group of summaries.

When the grammar has counted plain strings (below), the string-valued scalars are
sites too, of kind ``s``: ``(STRING_SITE, regex)`` for a counted lexeme, ``(STRING_SITE, None)``
for any other lexeme or literal that can be a string; ``key_counted`` collects the counted
lexemes that stand as keys.

Counted strings: Strings whose length bounds the matcher counts at runtime instead of the lexer.

A plain string with ``minLength``/``maxLength`` is the lexeme ``"STRING_CHAR{lo,hi}"``
(``scalars.string``). llguidance's lexer gives every count its own state, and near the bound no
token slice fits, so it walks its token trie at every mask inside such a string, at every
request: 0.2-1.5 ms a mask at 152k tokens for ``maxLength`` 8. Where the path automaton
can tell that a value position holds only that string (no other string-valued
lexeme or literal stands there, no key is that lexeme, no ``uniqueItems`` array reads it), the
grammar gets the unbounded lexeme ``"STRING_CHAR*"`` there (one lexer state, the core's token
slices apply) and the matcher counts code points itself (``checks.tracker.UniqueTracker`` counts,
``masks.string_lengths`` masks). Anywhere else the counted lexeme stays, so the bounds hold either
way.

Objects at one path: Several runtime-checked objects at one path (``anyOf``/``oneOf`` branches, a ``$ref`` used in
two places): one check for all of them, where that is sound.

The matcher cannot tell which branch the grammar is parsing, so a path's objects are checked
together (``MemberUnion``): a key is admitted when some branch still fits the keys so far, ``}``
when some branch's check holds (``checks.tracker``). That is sound when, for every two branches i
and j (``separating_blocks``), the keys that satisfy j's check never parse under i's grammar, or any
instance i's grammar parses with keys satisfying j's check is an instance of j:

- j requires a key that i never generates (not one of i's members, and i takes no extra
  members, or the schema names the key in i without generating it): the keys differ;
- i and j are built from the same canonical node but for ``required`` (``allOf`` with an
  ``anyOf`` of ``required`` lists): their members' values are the same schemas, so i's grammar
  (sound) makes them valid for j, and j's check holds.

Where j's required keys are all keys that i takes as extra members, i stops generating one of them
(a restriction), and the first case holds. Otherwise the objects fall back to their grammar-level construction.
"""

from __future__ import annotations

import dataclasses
import functools
import re
import sys
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from radixlm.constrained.checks.reader import UniquePaths
from radixlm.constrained.errors import ConstraintError
from radixlm.constrained.ir import builder as ir
from radixlm.constrained.json_schema.normalize import STRING
from radixlm.constrained.pattern.ecma import STRING_CHAR
from radixlm.constrained.pattern.samples import first_chars

STRING_SITE = "s"  # the first half of a string scalar's site in the path automaton's reader
_COUNTED = re.compile(re.escape(f'"{STRING_CHAR}{{') + r"(\d+),(\d*)\}\"")


def counted_bounds(regex: str) -> tuple[int, int | None] | None:
    """``(minLength, maxLength or None)`` of a counted plain-string lexeme, else None."""
    m = _COUNTED.fullmatch(regex)
    if m is None:
        return None
    return int(m.group(1)), (int(m.group(2)) if m.group(2) else None)


def counted_lexemes(grammar: ir.Grammar) -> frozenset[str]:
    """The counted plain-string lexemes (regexes) the grammar holds."""
    found: set[str] = set()
    seen: set[int] = set()
    todo: list[ir.Node] = [grammar.start, *grammar.rules.values()]
    while todo:
        node = todo.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, (ir.Seq, ir.Alt)):
            todo.extend(node.items)
        elif isinstance(node, ir.Rep):
            todo.append(node.item)
        elif isinstance(node, ir.Lex) and counted_bounds(node.regex) is not None:
            found.add(node.regex)
    return frozenset(found)


def may_be_string(node: ir.Node) -> bool:
    """Whether a value lexeme or literal can be a JSON string (unsure: True)."""
    if isinstance(node, ir.Lit):
        return node.text.startswith('"')
    if not isinstance(node, ir.Lex):
        return True  # the lexeme algebra builds strings and keys
    found = first_chars(node.regex)
    return found is None or any(lo <= 0x22 <= hi for lo, hi in found[0])


def uncount(grammar: ir.Grammar, regexes: frozenset[str]) -> ir.Grammar:
    """``grammar`` with every lexeme in ``regexes`` replaced by the unbounded plain string (the
    matcher counts those strings: ``UniquePaths.strings``)."""
    if not regexes:
        return grammar
    done: dict[int, ir.Node] = {}
    plain = ir.Lex(STRING)

    def swap(node: ir.Node) -> ir.Node:
        key = id(node)
        if key in done:
            return done[key]
        out = node
        if isinstance(node, ir.Lex) and node.regex in regexes:
            out = plain
        elif isinstance(node, (ir.Seq, ir.Alt)):
            items = tuple(swap(x) for x in node.items)
            out = node if all(a is b for a, b in zip(items, node.items)) else type(node)(items)
        elif isinstance(node, ir.Rep):
            item = swap(node.item)
            out = node if item is node.item else ir.Rep(item, node.lo, node.hi)
        done[key] = out
        return out

    return ir.Grammar(swap(grammar.start), {n: swap(r) for n, r in grammar.rules.items()})


def string_here(group: frozenset, uncounted: set) -> str | None:
    """The counted lexeme that a string opening at this path is (None: none, or not only it: then
    every counted lexeme here goes into ``uncounted``, and the grammar keeps bounding it)."""
    strings = [s[1] for s in group if s[0] == STRING_SITE]
    if len(strings) == 1 and strings[0] is not None:
        return strings[0]
    uncounted.update(r for r in strings if r is not None)
    return None


def read_whole(reader: Any, arrays: list) -> set[str]:
    """The counted lexemes at or below the items of runtime-checked unique arrays, whose bytes
    the tracker reads without paths (``array_run``)."""
    out: set[str] = set()
    todo = [t for s in arrays for t in reader.edges[s].get("*", ())]
    seen: set = set()
    while todo:
        site = todo.pop()
        if site in seen:
            continue
        seen.add(site)
        if site[0] == STRING_SITE:
            if site[1] is not None:
                out.add(site[1])
            continue
        for targets in reader.edges[site].values():
            todo.extend(targets)
    return out


@dataclass(frozen=True, eq=False)
class MemberUnion:
    """The objects one path may hold, checked together (picklable; ``checks.tracker`` reads it
    like a ``MemberSpec``): ``alts`` their specs, ``keys``/``extras`` the union of theirs."""

    alts: tuple

    @functools.cached_property
    def keys(self) -> dict[bytes, str]:
        """The named members' raw keys -> names, over every branch."""
        return {k: n for a in self.alts for k, n in a.keys.items()}

    @functools.cached_property
    def names(self) -> frozenset[str]:
        """The named members' names, over every branch."""
        return frozenset(self.keys.values())

    @functools.cached_property
    def extras(self) -> bool:
        """Whether some branch takes extra members."""
        return any(a.extras for a in self.alts)


def generates(spec: Any, name: str) -> bool:
    """Whether a key ``name`` can occur in the object of ``spec`` (a named member, or an extra
    one that the schema does not name)."""
    return name in spec.names or (spec.extras and name not in spec.blocked)


def separating_blocks(entries: list[tuple[Any, tuple]]) -> list[frozenset] | None:
    """The extra keys each of the objects ``entries`` ((spec, origin) each; origin ``(flat,
    refs)``) must not generate so that they can be checked together (see the module docstring;
    empty sets: they can be as they are), or None when they cannot be. A key is blocked in i
    where i would take, as an extra member, a key that j requires (a restriction)."""
    blocks: list[set] = [set() for _ in entries]
    for i, (a, origin_a) in enumerate(entries):
        for j, (b, origin_b) in enumerate(entries):
            if i == j or a.same_as == b.same_as:
                continue
            if any(not generates(a, n) or n in blocks[i] for n in b.required):
                continue  # b's check needs a key that a never parses
            if _same_but_required(origin_a, origin_b):
                continue
            extra = sorted(n for n in b.required if n not in a.names)
            if not extra:
                return None
            blocks[i].add(extra[0])
    return [frozenset(b) for b in blocks]


def _same_but_required(a: tuple, b: tuple) -> bool:
    """Whether two objects come from the same canonical node (and ``$ref`` context) but for
    their ``required`` lists."""
    if not a or not b or a[1] != b[1]:
        return False
    strip = lambda flat: {k: v for k, v in flat.items() if k not in ("required", "_sources")}  # noqa: E731
    return strip(a[0]) == strip(b[0])


def union_of(specs: list) -> Any:
    """One check for the specs (distinct by ``same_as``): the spec itself when there is one."""
    distinct = list({s.same_as: s for s in specs}.values())
    return distinct[0] if len(distinct) == 1 else MemberUnion(tuple(distinct))


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


_RECURSION = 20_000  # the reader recurses along nested rules (Python 3.11 calls use no C stack)
MAX_STATES = 4096  # automaton states; past it the runtime check is not used (restriction)
_WS_SAFE = re.compile(r"(?:\\[tnrfv]|[ \t\n\r\[\]*+?()|]|\{[0-9]*,?[0-9]*\})*")


@dataclass(frozen=True)
class Restriction:
    """A runtime-checked unique array's fallback: ``node`` (at most one item), or None when the
    array needs more (``minItems`` > 1: unsupported, lenient mode keeps the plain array)."""

    pointer: str
    node: ir.Node | None
    zero: bool
    containers: bool = False  # unconstrained items: containers too, read whole (no path below)


def plain_whitespace(pattern: str | None) -> bool:
    """Whether the whitespace pattern can only match ASCII whitespace (the runtime check's
    reader skips exactly that), e.g. ``[\\n\\t ]*`` (not ``\\s*``: Unicode spaces)."""
    return pattern is None or bool(_WS_SAFE.fullmatch(pattern))


def resolve_unique(ctx: Any, grammar: ir.Grammar) -> tuple[ir.Grammar, UniquePaths | None]:
    """``grammar`` with the registered unique rules (and checked objects) that cannot be checked
    at runtime replaced by their restriction (construction), and the automaton of the others
    (None: none is left). The grammar is read once: a fallen rule is then read as an unchecked
    container of the same members (its fallback's paths are among them: sound). Counted plain
    strings that the automaton locates lose their bounds in the grammar (the matcher counts
    them)."""
    registry: dict[str, Any] = {**ctx.unique_arrays, **ctx.member_objects}
    done: set[str] = set()  # fallen rules, restricted in the grammar
    rebuilt: set[str] = set()  # checked objects built again: their old rule's sites stand for them
    while True:
        live = [n for n in registry if n in grammar.rules and n not in done]
        paths, bad, blocks = _resolve_once(ctx, grammar, live, registry)
        if bad:
            grammar = _restrict(ctx, grammar, bad)
            done |= bad
        if blocks:  # objects checked together whose extra keys must avoid some names
            grammar = _rebuild(ctx, grammar, blocks)
            done |= set(blocks)
            rebuilt |= {n for n in ctx.member_objects if n not in registry}
            registry.update({n: ctx.member_objects[n] for n in rebuilt})
        # a restriction may hold registered rules the linear grammar did not reach (a unique
        # array's fallback items): then read again
        if not bad or all(n in done or n in live or n in rebuilt for n in registry if n in grammar.rules):
            return (uncount(grammar, paths.counted), paths) if paths is not None else (grammar, None)


def _resolve_once(ctx: Any, grammar: ir.Grammar, live: list[str], registry: dict) -> tuple[UniquePaths | None, set, dict]:
    """The automaton of the ``live`` rules that the runtime check can follow, the others, and the
    checked objects to build again with extra keys blocked (``_rebuild``)."""
    counted = counted_lexemes(grammar) if ctx.unique_runtime else frozenset()
    if not live and not counted:
        return None, set(), {}
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, _RECURSION))
    # if the strings' sites make too many states, count none of them and check the rest
    tries = (counted, frozenset()) if counted and live else (counted,)
    try:
        for strings in tries:
            try:
                return _follow(ctx, grammar, live, registry, strings)
            except (Surprise, RecursionError):  # RecursionError: rules nested past even that
                continue
        return None, set(live), {}
    finally:
        sys.setrecursionlimit(limit)


def _follow(ctx: Any, grammar: ir.Grammar, live: list[str], registry: dict, counted: frozenset) -> tuple:
    """``_resolve_once`` with ``counted`` lexemes as sites (raises ``Surprise``)."""
    bad: set[str] = set()
    reader, sites = _analyse(grammar, live, registry, ctx.ws, counted)
    while True:
        paths, ambiguous, blocks = _automaton(reader, {s: n for s, n in sites.items() if n not in bad}, registry)
        if not ambiguous:
            return paths, bad, blocks
        bad |= ambiguous


def _restrict(ctx: Any, grammar: ir.Grammar, names: set[str]) -> ir.Grammar:
    rules = dict(grammar.rules)
    objects = sorted(n for n in names if n not in ctx.unique_arrays)
    if objects:  # their grammar-level constructions add rules of their own
        before = set(ctx.rules)
        for name in objects:
            node = ctx.member_objects[name].fallback()
            rules[name] = ctx.rules[name] = node if node is not None else ir.Ref(name)  # none: pruned
        # new rules, and those an optional check's construction needs (pruned while it was checked)
        rules.update({n: r for n, r in ctx.rules.items() if n not in before or n not in rules})
    for name in names - set(objects):
        fallback = ctx.unique_arrays[name]
        if fallback.node is None:
            ctx.unsupported(fallback.pointer, "uniqueItems", "with minItems > 1 is not supported here "
                            "(the items are not scalars, or the array's position is ambiguous)")
        else:
            rules[name] = fallback.node
    out = ir.Grammar(grammar.start, rules).pruned() if objects else ir.Grammar(grammar.start, rules)
    if out is None:
        raise ConstraintError("the schema has no instance once its objects keep their members' order "
                              "(their position is ambiguous for the runtime check)",
                              ctx.member_objects[objects[0]].pointer, "properties")
    return out


def _rebuild(ctx: Any, grammar: ir.Grammar, names: dict[str, frozenset]) -> ir.Grammar:
    """``grammar`` with the checked objects ``names`` (rule -> extra keys to block) built again
    (their rule: a ``Ref`` to the new one, whose paths are among theirs: the automaton stands)."""
    rules, before = dict(grammar.rules), set(ctx.rules)
    for name in sorted(names):
        ref = ctx.member_objects[name].rebuild(names[name])
        rules[name] = ctx.rules[name] = ref if ref is not None else ir.Ref(name)  # none: pruned
    rules.update({n: r for n, r in ctx.rules.items() if n not in before})
    out = ir.Grammar(grammar.start, rules).pruned()
    if out is None:
        raise ConstraintError("the schema has no instance once its objects are checked at runtime",
                              ctx.member_objects[min(names)].pointer, "properties")
    return out


def _analyse(grammar: ir.Grammar, live: list[str], registry: dict, ws: ir.Node,
             counted: frozenset) -> tuple[GrammarReader, dict]:
    """The reader over ``grammar`` and the sites of the registered rules."""
    sites = {}
    for name in live:
        body = grammar.rules[name]
        bracket = "[" if isinstance(registry[name], Restriction) else "{"
        if not (isinstance(body, ir.Seq) and body.items and body.items[0] == ir.Lit(bracket)):
            raise Surprise(name)
        sites[(id(body), 0)] = name
    reader = GrammarReader(grammar, ws, counted)
    reader.run(grammar.start)
    return reader, sites


def _automaton(reader: GrammarReader, sites: dict, registry: dict) -> tuple[UniquePaths | None, set, dict]:
    """The automaton over the reader's sites, the unique rules that are ambiguous, and the
    checked objects to build again with extra keys blocked (their specs, blocked, are in it)."""
    edges, kind, named = reader.edges, reader.kind, reader.named
    index: dict[frozenset, int] = {}
    order: list[frozenset] = []
    rows: list = []
    bad: set[str] = set()
    uncounted: set[str] = set()  # counted lexemes the grammar keeps bounding
    blocks: dict[str, frozenset] = {}
    specs: dict[frozenset, int] = {}  # the checked object rules of a path -> their index in UniquePaths.specs

    def state_of(group: set) -> int:
        group = frozenset(group)
        if not group:
            return -1
        if group not in index:
            if len(order) >= MAX_STATES:
                raise Surprise("too many path states")
            index[group] = len(order)
            order.append(group)
        return index[group]

    state_of(edges[ROOT]["*"])
    i = 0
    while i < len(order):
        group = order[i]
        arrays = [s for s in group if kind[s] == "a"]
        objects = [s for s in group if kind[s] == "o"]
        unique = [s for s in arrays if s in sites]
        if unique and len(unique) < len(arrays):
            bad |= {sites[s] for s in unique}
        member = _members_here(objects, sites, registry, bad, blocks, specs)
        # items must be scalars, or any JSON value (read whole: no check applies below them)
        bad |= {sites[s] for s in unique if any(kind[t] != STRING_SITE for t in edges[s].get("*", ()))
                and not registry[sites[s]].containers}
        items = state_of(set().union(*(edges[s].get("*", ()) for s in arrays)))
        other = state_of(set().union(*(edges[s].get(OTHER, ()) for s in objects)))
        keys = {}
        for key in set().union(*(named[s] for s in objects)):
            target = state_of(set().union(*(edges[s].get(key, ()) if key in named[s] else edges[s].get(OTHER, ())
                                            for s in objects)))
            if target != other:
                keys[key] = target
        zero = any(registry[sites[s]].zero for s in unique)
        rows.append((bool(unique), zero, items, keys, other, member, string_here(group, uncounted)))
        i += 1
    if bad:
        return None, _fallen(order, kind, sites, bad), {}
    checks = tuple(union_of([_blocked(registry[n].spec, blocks.get(n)) for n in sorted(key)]) for key in specs)
    uncounted |= reader.key_counted | read_whole(reader, [s for s in sites if kind[s] == "a"])
    rows = [r[:6] + ((r[6] if r[6] not in uncounted else None),) for r in rows]
    return _pruned(rows, checks), set(), blocks


def _blocked(spec: Any, block: frozenset | None) -> Any:
    """``spec`` of an object rebuilt with the extra keys ``block`` left out."""
    return spec if not block else dataclasses.replace(spec, blocked=spec.blocked | block)


def _members_here(objects: list, sites: dict, registry: dict, bad: set, blocks: dict, specs: dict) -> int:
    """The index of the check for the objects that stand at one path (-1: none), adding to
    ``bad`` the checked ones that cannot be checked there (or need not be: optional checks alone)
    and to ``blocks`` the extra keys to leave out of some so they can be checked together."""
    checked = [s for s in objects if s in sites]
    if not checked:
        return -1
    entries = [registry[sites[s]] for s in checked]
    found = separating_blocks([(e.spec, e.origin) for e in entries]) if len(entries) == len(objects) else None
    if found is None or all(e.optional for e in entries):  # which check applies here? (or: none needed)
        bad |= {sites[s] for s in checked}
        return -1
    for s, block in zip(checked, found):
        if block:
            blocks[sites[s]] = blocks.get(sites[s], frozenset()) | block
    return specs.setdefault(frozenset(sites[s] for s in checked), len(specs))


def _fallen(order: list, kind: dict, sites: dict, bad: set) -> set:
    """``bad`` with the checked objects that become ambiguous once the ``bad`` ones keep their
    grammar-level construction (an unchecked object then stands at their path): found here,
    so that one more analysis settles it."""
    changed = True
    while changed:
        changed = False
        for group in order:
            objects = [s for s in group if kind[s] == "o"]
            checked = [s for s in objects if s in sites and sites[s] not in bad]
            if checked and len(checked) < len(objects):
                bad |= {sites[s] for s in checked}
                changed = True
    return bad


def _pruned(rows: list, specs: tuple) -> UniquePaths | None:
    """The automaton without the states below which no unique array or checked object can occur
    (they become -1)."""
    live = [r[0] or r[5] >= 0 or r[6] is not None for r in rows]
    changed = True
    while changed:
        changed = False
        for s, (_, _, items, keys, other, _, _) in enumerate(rows):
            if not live[s] and any(t >= 0 and live[t] for t in (items, other, *keys.values())):
                live[s] = changed = True
    if not live[0]:
        return None
    new = {s: n for n, s in enumerate(s for s in range(len(rows)) if live[s])}
    ren = lambda t: new.get(t, -1)  # noqa: E731
    kept = [rows[s] for s in range(len(rows)) if live[s]]
    return UniquePaths(
        start=0, unique=tuple(r[0] for r in kept), zero=tuple(r[1] for r in kept),
        items=tuple(ren(r[2]) for r in kept),
        keys=tuple({k: ren(t) for k, t in r[3].items() if ren(t) != ren(r[4])} for r in kept),
        other=tuple(ren(r[4]) for r in kept), members=tuple(r[5] for r in kept), specs=specs,
        strings=tuple(counted_bounds(r[6]) if r[6] is not None else None for r in kept)
        if any(r[6] is not None for r in kept) else (),
        counted=frozenset(r[6] for r in kept if r[6] is not None))
