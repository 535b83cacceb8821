"""Grammar of JSON objects for one canonical schema node: members in any or schema order,
extra members, and the linear grammar of objects whose members the matcher checks at runtime.

Grammar of JSON objects for one canonical schema node.

Objects of up to ``MAX_ANY_ORDER`` named members take them in any order, each at most once, with
extra members (``additionalProperties`` true or a schema, ``patternProperties``) anywhere between
them; larger ones take the named members in the order of ``properties`` and the extras after
them (a restriction). Optional members may be left out; extra keys can never equal a named
property. An unspecified ``additionalProperties`` allows extras, as JSON Schema says;
``Context.unspecified_extras=False`` generates none there (a restriction, like OpenAI's strict
mode, used for tool-call arguments).

For the engine's matcher (``Context.unique_runtime``) most objects instead get a linear grammar
whose members the matcher checks at runtime (``_runtime_checked``); the
constructions above remain their fallback where the check cannot follow.

Member order: The order of an object's members: any order (one rule per set of members written so far), or
schema order with extra members anywhere between the named ones. ``object_grammar`` decides which.

Runtime-checked members: Objects whose members the matcher checks at runtime: a linear grammar (``{``, any members
comma-separated, ``}``) plus a ``MemberSpec`` that the runtime check
(``constrained/checks/tracker.py``) enforces: no key twice, every required member (and every
``dependentRequired`` need of a present trigger) and ``minProperties`` members before ``}``,
at most ``maxProperties`` members.

The object is a rule of its own, registered in ``Context.member_objects`` with a builder of its
grammar-level construction (the member orders above), which ``unique.resolve_unique`` falls back
to where the runtime check cannot tell which object stands at a path. Objects the grammar would
take in any order are registered too, as *optional* checks: ``unique`` keeps them checked only
where they share a path with other checked objects (``unique`` checks those together), and
gives the others back their any-order construction.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from radixlm.constrained.ir import builder as ir
from radixlm.constrained.json_schema.names import apply_property_names, complement_key
from radixlm.constrained.json_schema.normalize import Context, merge
from radixlm.constrained.pattern.ecma import PLAIN_CHAR, is_universal, pattern_to_regex


def schema_order_dependencies(members: list[tuple[ir.Node, bool]],
                              needs: dict[int, frozenset]) -> list[tuple[ir.Node, bool]]:
    """Schema order cannot wait for an optional trigger to appear: it is left out (a restriction;
    triggers are usually the rarer members), unless a trigger's needs are required anyway."""
    req = [r for _, r in members]
    keep = [all(req[i] for i in needs[t]) if t in needs else True for t in range(len(members))]
    return [(m, r) for (m, r), k in zip(members, keep) if k]


def any_order(ctx: Context, members: list[tuple[ir.Node, bool]], extras: ir.Node | None,
               needs: dict[int, frozenset], min_p: int, max_p: int | None) -> ir.Node | None:
    """The named members in any order, each at most once, with every required one (and
    ``minProperties``..``maxProperties`` members, exactly) before ``}``: one rule per set of
    members written so far, so a duplicate never forms. ``extras`` (one extra member, whose key
    is never a named one) may come anywhere between them; a state counts them up to the
    ``maxProperties`` (else ``minProperties``) they may reach."""
    required = frozenset(i for i, (_, r) in enumerate(members) if r)
    members = [(ctx.named(m), r) for m, r in members]  # each set's rule refers to them, not copies
    extra = ctx.named(extras)
    cap = max_p if max_p is not None else min_p
    sep, memo = ctx.sep(","), {}

    def more(used: frozenset, n_extra: int) -> list[ir.Node]:
        """The members that may come next (each followed by what may follow it)."""
        if max_p is not None and len(used) + n_extra >= max_p:
            return []
        # members and states are rules (Refs): the nodes are built directly, nothing to simplify
        nexts: list[ir.Node] = [ir.Seq((m, after(used | {i}, n_extra)))
                                for i, (m, _) in enumerate(members) if i not in used]
        if extra is not None:
            nexts.append(ir.Seq((extra, after(used, min(n_extra + 1, cap)))))
        return nexts

    def after(used: frozenset, n_extra: int) -> ir.Node | None:
        """What may follow once ``used`` and ``n_extra`` extras are written: ``}`` or another."""
        if (used, n_extra) not in memo:
            memo[used, n_extra] = ref = ctx.reserve()  # an uncounted extra loops back here
            done = required <= used and len(used) + n_extra >= min_p and all(
                needs[t] <= used for t in used if t in needs)
            close = ir.seq(ctx.ws, ir.Lit("}")) if done else None
            options = more(used, n_extra)
            nexts = options[0] if len(options) == 1 else ir.Alt(tuple(options)) if options else None
            ctx.rules[ref.name] = ir.alt([close, ir.seq(sep, nexts) if nexts is not None else None])
        return memo[used, n_extra]

    empty = ir.seq(ctx.ws, ir.Lit("}")) if not required and min_p == 0 else None
    return ir.seq(ir.Lit("{"), ctx.ws, ir.alt([empty, ir.alt(more(frozenset(), 0))]))


def interleaved(ctx: Context, members: list[tuple[ir.Node, bool]], extra: ir.Node,
                allow_empty: bool) -> ir.Node:
    """The named members in schema order (optional ones may be left out), with any number of
    extra members (``extra``: one of them) anywhere between them. Linear in the members and
    unambiguous: ``elem[i]`` is the next element when members ``i..`` are still to come (member
    i, an extra, or a later member past optional ones: ``skip``); ``rest[i]`` what follows one."""
    n, sep = len(members), ctx.sep(",")
    rest = [ctx.reserve() for _ in range(n + 1)]
    elem = [ctx.reserve() for _ in range(n + 1)]
    skip: list[ir.Node | None] = [None] * (n + 1)  # a member at j or later, no extra first
    close = ir.seq(ctx.ws, ir.Lit("}"))
    for j in range(n - 1, -1, -1):
        later = skip[j + 1] if not members[j][1] else None
        skip[j] = ctx.named(ir.alt([ir.seq(members[j][0], rest[j + 1]), later]))
    for i in range(n + 1):
        done = close if not any(r for _, r in members[i:]) else None
        ctx.rules[rest[i].name] = ir.alt([done, ir.seq(sep, elem[i])])
        here = ir.seq(members[i][0], rest[i + 1]) if i < n else None
        later = skip[i + 1] if i < n and not members[i][1] else None
        ctx.rules[elem[i].name] = ir.alt([here, ir.seq(extra, rest[i]), later])
    empty = close if allow_empty and not any(r for _, r in members) else None
    return ir.seq(ir.Lit("{"), ctx.ws, ir.alt([empty, elem[0]]))


MAX_COUNTED_STATES = 4096  # rules one counted schema-order object may take; past it, the restriction


def counted_order(ctx: Context, members: list[tuple[ir.Node, bool]], extra: ir.Node | None,
                  needs: dict[int, frozenset], bounds: tuple[int, int | None]) -> ir.Node | None | bool:
    """The named members in schema order, then extra members (``extra``: one of them), with
    ``minProperties``..``maxProperties`` members in all and every present trigger's needs
    (``dependentRequired``) present, exactly. A state is (next member, the triggers and needs
    written so far, members written up to the bound that matters); each is one rule. None: no
    such object; False: more than ``MAX_COUNTED_STATES`` states (the caller keeps its restriction)."""
    (min_p, max_p), n = bounds, len(members)
    sep, close = ctx.sep(","), ir.seq(ctx.ws, ir.Lit("}"))
    relevant = set(needs) | {j for ns in needs.values() for j in ns}
    cap = max(max_p if max_p is not None else min_p, 1)  # count > 0: a separator comes first
    if (n + 1) * 2 ** len(relevant) * (cap + 1) > MAX_COUNTED_STATES:
        return False
    needed_by = {j: frozenset(t for t, ns in needs.items() if j in ns) for j in relevant}
    extra = ctx.named(extra)
    memo: dict[tuple, ir.Node | None] = {}

    def state(i: int, written: frozenset, count: int) -> ir.Node | None:
        key = (i, written, count)
        if key not in memo:
            memo[key] = ctx.named(body(i, written, count) if i < n else extras(count))
        return memo[key]

    def extras(count: int) -> ir.Node | None:
        """After the named members: ``}`` once enough members are written, or one more extra."""
        done = close if count >= min_p else None
        if extra is None or max_p is not None and count >= max_p:
            return done
        lead = sep if count else ir.EMPTY
        if max_p is None and count == cap:  # the count no longer matters: any number more
            return ir.seq(ir.opt(ir.seq(lead, ir.join(extra, sep, 1, None))), close)
        return ir.alt([done, ir.seq(lead, extra, state(n, frozenset(), min(count + 1, cap)))])

    def body(i: int, written: frozenset, count: int) -> ir.Node | None:
        member, required = members[i]
        earlier_needs = [j for j in needs.get(i, ()) if j < i]  # a trigger needs them written already
        can_write = (max_p is None or count < max_p) and all(j in written for j in earlier_needs)
        forced = required or bool(needed_by.get(i, frozenset()) & written)
        after = written | {i} if i in relevant else written
        lead = sep if count else ir.EMPTY
        write = ir.seq(lead, member, state(i + 1, after, min(count + 1, cap))) if can_write else None
        return ir.alt([write, None if forced else state(i + 1, written, count)])

    return ir.seq(ir.Lit("{"), ctx.ws, state(0, frozenset(), 0))


@dataclass(frozen=True, eq=False)
class MemberSpec:
    """What the runtime check enforces in one object (picklable). ``keys``: the named members'
    raw keys (quotes included, as the grammar spells them) -> their names; ``needs``: trigger
    name -> the names it requires; ``extras``: extra members (keys never a named one, made of
    plain characters: an open extra key can always go on into a fresh one) may occur, never one of
    ``blocked`` (names the schema takes that are not generated)."""

    keys: dict[bytes, str]
    required: frozenset[str]
    needs: dict[str, frozenset[str]]
    min_p: int
    max_p: int | None
    extras: bool
    blocked: frozenset[str] = frozenset()
    alts = None  # one object's check (``unique.MemberUnion``: several)

    @functools.cached_property
    def same_as(self) -> tuple:
        """Equal for specs that check the same (one path may hold either)."""
        return (frozenset(self.keys.items()), self.required, frozenset(self.needs.items()), self.min_p,
                self.max_p, self.extras, self.blocked)

    @functools.cached_property
    def names(self) -> frozenset[str]:
        """The named members' names."""
        return frozenset(self.keys.values())

    def raw_of(self, names: frozenset[str]) -> list[bytes]:
        """The raw keys that spell the named members among ``names``."""
        return [raw for name in names for raw in self._raws.get(name, ())]

    @functools.cached_property
    def _raws(self) -> dict[str, tuple[bytes, ...]]:
        """Each named member's raw keys, by name."""
        out: dict[str, tuple[bytes, ...]] = {}
        for raw, name in self.keys.items():
            out[name] = out.get(name, ()) + (raw,)
        return out


@dataclass(frozen=True)
class MemberObject:
    """A registered runtime-checked object: its spec, the schema pointer, and ``fallback()``,
    which builds (in the compile's ``Context``) the grammar-level construction."""

    spec: MemberSpec
    pointer: str
    fallback: Callable[[], ir.Node | None]
    required: tuple[ir.Node, ...] = ()  # the required members' nodes (finite_objects)
    origin: tuple = ()  # (flat, refs): the canonical node it was built from (``unique.MemberUnion``)
    # rebuild(block): the object again, registered anew, whose extra keys are never in ``block``
    rebuild: Callable[[frozenset], ir.Node | None] | None = None
    optional: bool = False  # checked only beside other checked objects (else: its fallback)


def checked_object(ctx: Context, members: dict[str, tuple[ir.Node, bool]], extras: ir.Node | None,
                   needs: dict[str, set], bounds: tuple[int, int | None], pointer: str,
                   fallback: Callable[[], ir.Node | None], origin: tuple = ((), frozenset()),
                   rebuild: Callable[[frozenset], ir.Node | None] | None = None,
                   optional: bool = False) -> ir.Node | None:
    """The linear grammar of a runtime-checked object (a ``Ref`` to its registered rule), or
    None when no instance exists. ``members``: name -> (``"key":value`` node, required);
    ``origin``: ((flat, refs), the names the schema takes that are not generated)."""
    min_p, max_p = bounds
    spec = _spec(members, extras, needs, bounds, origin[1])
    if max_p is not None and len(spec.required) > max_p or extras is None and len(members) < min_p:
        return None
    if max_p == 0 and spec.required:
        return None
    alts = [m for m, _ in members.values()] + ([extras] if extras is not None else [])
    member = ctx.named(ir.alt(alts))
    body = ir.join(member, ctx.sep(","), 0, None) if max_p != 0 else ir.EMPTY
    node = ir.seq(ir.Lit("{"), ctx.ws, body, ctx.ws, ir.Lit("}"))
    name = f"memb{len(ctx.member_objects)}"
    ctx.rules[name] = node
    ctx.member_objects[name] = MemberObject(spec, pointer, fallback, tuple(m for m, r in members.values() if r),
                                            origin[0], rebuild, optional)
    return ir.Ref(name)


def _spec(members: dict, extras: ir.Node | None, needs: dict, bounds: tuple, blocked: frozenset) -> MemberSpec:
    required = frozenset(n for n, (_, r) in members.items() if r)
    return MemberSpec({json.dumps(n, ensure_ascii=False).encode(): n for n in members}, required,
                      {t: frozenset(ns) for t, ns in needs.items()}, bounds[0], bounds[1], extras is not None,
                      frozenset(blocked))


def drop_optional(ctx: Context) -> None:
    """Where every checked object is an optional check and no unique array needs the path
    reader, give them all their grammar-level construction now (nothing needs them checked)."""
    if ctx.unique_arrays or not all(obj.optional for obj in ctx.member_objects.values()):
        return
    for name, obj in ctx.member_objects.items():
        node = obj.fallback()
        ctx.rules[name] = node if node is not None else ir.Ref(name)  # none: pruned
    ctx.member_objects.clear()


def finite_objects(ctx: Context, start: ir.Node) -> dict[str, ir.Node]:
    """``ctx.rules`` with the checked objects that have no finite instance made unproductive
    (their linear grammar has ``{}``, but the check needs their required members: a required
    self-reference never ends), so that pruning removes them as it would the construction."""
    shadow = dict(ctx.rules)
    for name, obj in ctx.member_objects.items():
        shadow[name] = ir.seq(ir.Lit("{"), *obj.required, ir.Lit("}"))
    good = ir.Grammar(start, shadow).productive()
    rules = dict(ctx.rules)
    for name in ctx.member_objects:
        if name not in good:
            rules[name] = ir.Ref(name)  # derives nothing: pruned with what needs it
    return rules


_NONEMPTY_UNIVERSAL = (".+", "^.+", "^.+$", ".+$")
MAX_ANY_ORDER = 8  # objects of at most this many named members (and no others) take any order
MAX_ANY_ORDER_RULES = 1024  # per schema: past it, further objects are checked at runtime (compile max, docs)
# Objects of more named members are checked at runtime (where they can be): up to 4 members the
# any-order rules are at most 16 subset states, and past that their compile cost outgrows the
# runtime check's dearer masks (measured in benchmarks/history/ as of commit c96c48f).
RUNTIME_CHECK_ABOVE = 4


def object_grammar(ctx: Context, flat: dict, pointer: str, refs: tuple) -> ir.Node | None:
    """The objects we generate for one canonical node (None: none is valid)."""
    required = list(flat.get("required", []))
    for name, sub in flat.get("dependentSchemas", {}).items():
        if name in required:  # the dependency holds for sure: merge it in and start over
            rest = dict(flat, dependentSchemas={k: v for k, v in flat["dependentSchemas"].items() if k != name})
            sub_flat, refs = ctx.flatten(sub, f"{pointer}/dependentSchemas/{name}", refs)
            for where in (sub_flat or {}).get("_nots", []):  # a `not` only an enum could enforce
                ctx.unsupported(where.rsplit("/", 1)[0], "not", "with this sub-schema is not supported")
            return None if sub_flat is None else object_grammar(ctx, merge(rest, sub_flat, pointer), pointer, refs)
    if "additionalProperties" not in flat and _extras_by_default(ctx, flat):
        flat = dict(flat, additionalProperties=True)  # JSON Schema's default (or a bare object)
    key_rx = None
    if "propertyNames" in flat:
        flat, key_rx = apply_property_names(ctx, flat, pointer, refs)
        if flat is None:
            return None
    props = flat.get("properties", {})
    names = list(props) + [r for r in required if r not in props]
    dropped = set(flat.get("dependentSchemas", {}))  # optional triggers of a dependent schema
    deps = flat.get("dependentRequired", {})
    required_set = _close_dependencies(deps, set(required), names, dropped)
    if required_set is None:
        return None
    values: dict[str, ir.Node] = {}
    for name in names:
        if name not in dropped:
            rx = _member_value(ctx, flat, name, pointer, refs)
            if rx is None and name in required_set:
                return None
            if rx is not None:
                values[name] = ir.seq(ir.Lit(json.dumps(name, ensure_ascii=False)), ctx.sep(":"), rx)
    needs = _present_dependencies(deps, values, required_set)
    if needs is None:
        return None
    members = [(values[n], n in required_set) for n in values]
    taken = set(names) | set(deps) | dropped
    extras = _extras(ctx, flat, taken, pointer, refs, key_rx)
    order = list(values)
    index_needs = {order.index(t): frozenset(order.index(n) for n in ns) for t, ns in needs.items()}

    def fallback() -> ir.Node | None:
        return _assemble(ctx, flat, list(members), extras, index_needs)

    checked = {n: (values[n], n in required_set) for n in values}
    return _emit(ctx, flat, (pointer, refs, key_rx), (checked, extras, needs, taken), fallback)


def _extras_by_default(ctx: Context, flat: dict) -> bool:
    """Whether an object without ``additionalProperties`` takes extra members: always under any
    order (JSON Schema's default); under schema order (``unspecified_extras=False``) only where it
    declares no member (a bare object) or needs more members than it declares (``minProperties``)."""
    if ctx.unspecified_extras:
        return True
    if flat.get("patternProperties"):
        return False
    declared = {n for n, sub in flat.get("properties", {}).items() if sub is not False}
    declared |= set(flat.get("required", []))
    return not declared or flat.get("minProperties", 0) > len(declared)


def _emit(ctx: Context, flat: dict, where: tuple, parts: tuple, fallback: Callable[[], ir.Node | None]) -> ir.Node | None:
    """The object as a checked one, or its grammar-level construction
    (``fallback``) registered as an optional check (checked only beside other checked objects),
    or that construction alone. ``where``: (pointer, refs, key_rx); ``parts``: (name ->
    (member, required), extras, needs, the names the schema takes)."""
    pointer, refs, key_rx = where
    checked, extras, needs, taken = parts
    bounds = (flat.get("minProperties", 0), flat.get("maxProperties"))
    origin = ((flat, refs), frozenset(taken - set(checked)))

    def checked_with(block: frozenset, back: Callable[[], ir.Node | None], optional: bool) -> ir.Node | None:
        """The checked object, whose extra keys are never in ``block`` (``unique``)."""
        more = _extras(ctx, flat, taken | block, pointer, refs, key_rx) if block else extras
        return checked_object(ctx, checked, more, needs, bounds, pointer, back, (origin[0], origin[1] | block),
                              lambda b: checked_with(block | b, back, False), optional)

    if _runtime_checked(ctx, flat, len(checked), extras, key_rx):
        return checked_with(frozenset(), fallback, False)
    node = fallback()
    if node is not None and (checked or extras is not None) and _checkable(ctx, flat, key_rx):
        return checked_with(frozenset(), lambda: node, True) or node
    return node


def _runtime_checked(ctx: Context, flat: dict, n_members: int, extras: ir.Node | None,
                     key_rx: tuple | None) -> bool:
    """Whether the matcher checks this object's members at runtime: only
    for consumers that run the check, in any order, when extra keys (if any) are plain strings
    other than the named ones (so an open key can always go on into a fresh one)."""
    if not _checkable(ctx, flat, key_rx):
        return False
    bounded = "minProperties" in flat or "maxProperties" in flat
    if not (n_members >= 2 or extras is not None and (n_members >= 1 or bounded)):
        return False
    # The check costs every mask step inside the object (Python, tens of µs per step at 152k
    # tokens once its memo knows the state): only objects past RUNTIME_CHECK_ABOVE members or the
    # rule budget get it.
    return (n_members > RUNTIME_CHECK_ABOVE
            or ctx.any_order_rules + subset_states(flat, n_members, extras) > MAX_ANY_ORDER_RULES)


def _checkable(ctx: Context, flat: dict, key_rx: tuple | None) -> bool:
    """Whether the runtime check can follow this object's members (see ``_runtime_checked``)."""
    if not (ctx.unique_runtime and ctx.any_order) or key_rx is not None:
        return False
    return all(is_universal(p) or p in _NONEMPTY_UNIVERSAL for p in flat.get("patternProperties", {}))


def subset_states(flat: dict, n_members: int, extras: ir.Node | None) -> int:
    """The rules the grammar-level any order takes for an object: one per set of members written
    (and per count of extras, up to what ``min/maxProperties`` need to know)."""
    max_p = flat.get("maxProperties")
    cap = 0 if extras is None else max_p if max_p is not None else flat.get("minProperties", 0)
    return 2 ** n_members * (cap + 1)


def _close_dependencies(deps: dict, required: set, names: list[str], dropped: set) -> set | None:
    """Required names after ``dependentRequired``: a required trigger makes its dependencies
    required; an optional trigger whose dependencies are not all named is dropped."""
    changed = True
    while changed:
        changed = False
        for trigger, needs in deps.items():
            if trigger in dropped or trigger not in names:
                continue
            if not all(n in names and n not in dropped for n in needs):
                if trigger in required:
                    return None
                dropped.add(trigger)
                changed = True
            elif trigger in required and not set(needs) <= required:
                required |= set(needs)
                changed = True
    return required


def _present_dependencies(deps: dict, values: dict, required: set) -> dict[str, set] | None:
    """The optional triggers among the generated members -> the members they need (a trigger
    whose dependency cannot be generated is left out; None when that trigger is required)."""
    out: dict[str, set] = {}
    changed = True
    while changed:
        changed = False
        for trigger, needs in deps.items():
            if trigger not in values or trigger in required:
                continue
            if not all(n in values for n in needs):
                del values[trigger]
                out.pop(trigger, None)
                changed = True
            elif trigger not in out:
                out[trigger] = set(needs)
    return None if any(t not in values for t in required if t in deps) else out


def _member_value(ctx: Context, flat: dict, name: str, pointer: str, refs: tuple) -> ir.Node | None:
    props = flat.get("properties", {})
    subs = [props[name]] if name in props else []
    subs += [s for p, s in flat.get("patternProperties", {}).items() if re.search(p, name)]
    if name not in props and len(subs) == 0:
        ap = flat.get("additionalProperties")
        if ap is False:
            return None
        if ap is not None:
            subs.append(ap)
    if any(s is False for s in subs):
        return None
    node: Any = True if not subs else subs[0] if len(subs) == 1 else {"allOf": subs}
    where = f"{pointer}/properties/{name}" if name in props else pointer
    return ctx.value(node, where, refs)


def _extras(ctx: Context, flat: dict, taken: set, pointer: str, refs: tuple,
            key_rx: tuple[ir.Node, bool] | None) -> ir.Node | None:
    """One extra member (``key:value``), or None when no extra member is allowed.
    ``key_rx`` (from ``propertyNames``: the key grammar, whether it never matches the empty name)
    replaces the keys of unconstrained extras; keys of narrower patterns are then not generated."""
    patterns = flat.get("patternProperties", {})
    every = list(patterns.values())  # an extra value satisfies every pattern's schema: sound
    alts = []
    for pat, sub in patterns.items():
        where = f"{pointer}/patternProperties/{pat}"
        rx = ctx.value({"allOf": every} if len(every) > 1 else sub, where, refs)
        if rx is None:
            continue
        if key_rx is not None:  # propertyNames keys: never empty when the pattern needs a character
            if not (is_universal(pat) or pat in _NONEMPTY_UNIVERSAL and key_rx[1]):
                continue
            key = key_rx[0]
        elif is_universal(pat) or pat in _NONEMPTY_UNIVERSAL:
            key = complement_key(taken, nonempty=pat in _NONEMPTY_UNIVERSAL, pointer=where)
        elif not any(re.search(pat, n) for n in taken):
            key = ir.Lex(f'"{pattern_to_regex(pat, where, PLAIN_CHAR)}"')
        else:
            continue  # keys of this pattern could collide with named ones: not generated
        alts.append(ir.seq(key, ctx.sep(":"), rx))
    ap = flat.get("additionalProperties")
    if ap is not None and ap is not False:
        node: Any = {"allOf": [ap] + every} if every else ap
        where = f"{pointer}/additionalProperties"
        rx = ctx.value(node, where, refs)
        if rx is not None:
            key = key_rx[0] if key_rx is not None else complement_key(taken, nonempty=False, pointer=where)
            alts.append(ir.seq(key, ctx.sep(":"), rx))
    return ir.alt(alts)


def _assemble(ctx: Context, flat: dict, members: list[tuple[ir.Node, bool]], extras: ir.Node | None,
              needs: dict[int, frozenset]) -> ir.Node | None:
    """The object's grammar; ``needs``: member index of an optional trigger -> the members it
    requires when present (``dependentRequired``)."""
    sep = ctx.sep(",")
    min_p, max_p = flat.get("minProperties", 0), flat.get("maxProperties")
    # With extras, a state also counts them, up to what min/maxProperties need to know.
    states = subset_states(flat, len(members), extras)
    if (ctx.any_order and (2 if extras is None else 1) <= len(members) <= MAX_ANY_ORDER
            and ctx.any_order_rules + states <= MAX_ANY_ORDER_RULES):
        ctx.any_order_rules += states
        return any_order(ctx, members, extras, needs, min_p, max_p)
    if needs or min_p > 1 or max_p is not None and (extras is not None or max_p < len(members)):
        node = counted_order(ctx, members, extras, needs, (min_p, max_p))  # exact; extras after the named
        if node is not False:
            return node
    members = schema_order_dependencies(members, needs)
    n_req = sum(r for _, r in members)
    if max_p is not None:
        if n_req > max_p:
            return None
        while len(members) > max_p:  # drop optional members from the end: a restriction
            idx = max(i for i, (_, r) in enumerate(members) if not r)
            members.pop(idx)
    if min_p > 1:  # make optional members required in order: a restriction
        for i, (m, r) in enumerate(members):
            if n_req >= min_p:
                break
            if not r:
                members[i], n_req = (m, True), n_req + 1
    e_min = max(min_p - len(members), 0) if min_p > 1 else 0
    e_max = None if max_p is None else max_p - len(members)
    if extras is None or e_max == 0:
        extras = None
        if e_min > 0:
            return None
    if extras is not None and e_max is None and e_min == 0 and members:
        return interleaved(ctx, members, ctx.named(extras), min_p == 0)  # extras anywhere between them
    items = list(members)
    if extras is not None:  # the extra members form one item after the named ones
        items.append((ir.join(extras, sep, max(e_min, 1), e_max), e_min > 0))
    if not items:
        return _braces(ctx, ir.EMPTY) if min_p == 0 else None
    body = _sequence(ctx, items, sep)
    if not any(r for _, r in items) and min_p == 0:
        body = ir.opt(body)
    return _braces(ctx, body)


def _braces(ctx: Context, body: ir.Node | None) -> ir.Node | None:
    return ir.seq(ir.Lit("{"), ctx.ws, body, ctx.ws, ir.Lit("}"))


def _sequence(ctx: Context, items: list[tuple[ir.Node, bool]], sep: ir.Node) -> ir.Node | None:
    """Non-empty comma-joined subsequences of ``items`` (in order) that keep every required one.

    Linear in size: up to the last required item, optional items are written ``(m,)?``; after it,
    ``(,m)?``. With no required item, see ``_all_optional``.
    """
    last = max((i for i, (_, r) in enumerate(items) if r), default=-1)
    if last < 0:
        return _all_optional(ctx, [m for m, _ in items], sep)
    head = [ir.seq(m, sep) if r else ir.opt(ir.seq(m, sep)) for m, r in items[:last]]
    return ir.seq(*head, items[last][0], *[ir.opt(ir.seq(sep, m)) for m, _ in items[last + 1:]])


def _all_optional(ctx: Context, ms: list[ir.Node], sep: ir.Node) -> ir.Node | None:
    """Non-empty subsequences of ``ms``, in order: F_i = m_i (sep F_{i+1})? | F_{i+1}, built
    from the end with each F a rule, so the grammar stays linear in the number of members."""
    out: ir.Node | None = None
    for m in reversed(ms):
        out = m if out is None else ir.alt([ir.seq(m, ir.opt(ir.seq(sep, out))), out])
        out = ctx.named(out)
    return out
