"""Where the runtime-checked ``uniqueItems`` arrays are: a pass over the finished grammar that
builds ``UniquePaths`` (``checks/paths.py``), a small automaton over JSON paths that the matcher's
runtime check (``checks/tracker.py``) follows as the text arrives.

``arrays.py`` emits each free-item ``uniqueItems`` array as a rule of its own (registered in
``Context.unique_arrays``). The grammar, not the schema walk, says where those rules occur: a rule
may be shared by many instance positions (``$ref``s, any-order members, recursion). The pass
interprets the grammar abstractly, as a JSON reader would (every ``Lit`` is one JSON token:
brackets, commas, colons, keys, literal values; ``Lex`` nodes are scalars or keys), and records
which container *sites* (an opening bracket's place in the grammar) can hold which other sites,
under which key (``unique_reader``).

The automaton's states are sets of sites that can stand at one path: member keys are matched on
their raw bytes (a literal key, else the keys a lexeme generates), array items share one state.
A path where a unique array and any other array can both stand is ambiguous: those unique rules
fall back to the grammar-only restriction (``Restriction``), read as unchecked arrays. Any
surprise (structure the reader does not expect) falls back for every rule. Sound either way:
every position a unique rule can reach is a unique state of the automaton.

Runtime-checked objects (``member_objects``: registered in ``Context.member_objects``) are
located the same way: a state names the ``MemberSpec`` of the object opening there; a path
where objects of different specs (or an unchecked one) can stand falls back to their
grammar-level construction, unless ``member_union`` can check them together. Optional checks
(objects the grammar would take in any order) stay only where such a path holds another checked
object; the others get their any-order construction back.
"""

from __future__ import annotations

import dataclasses
import re
import sys
from dataclasses import dataclass
from typing import Any

from radixlm.constrained.checks.paths import UniquePaths
from radixlm.constrained.errors import ConstraintError
from radixlm.constrained.ir import builder as ir
from radixlm.constrained.json_schema.counted_strings import (
    STRING_SITE,
    counted_bounds,
    counted_lexemes,
    read_whole,
    string_here,
    uncount,
)
from radixlm.constrained.json_schema.member_union import separating_blocks, union_of
from radixlm.constrained.json_schema.unique_reader import OTHER, ROOT, GrammarReader, Surprise

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
    them: ``counted_strings``)."""
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
