"""Objects whose members the matcher checks at runtime: a linear grammar (``{``, any members
comma-separated, ``}``) plus a ``MemberSpec`` that the runtime check
(``constrained/checks/members.py``) enforces: no key twice, every required member (and every
``dependentRequired`` need of a present trigger) and ``minProperties`` members before ``}``,
at most ``maxProperties`` members.

The object is a rule of its own, registered in ``Context.member_objects`` with a builder of its
grammar-level construction (``object_order``), which ``unique_paths.resolve_unique`` falls back
to where the runtime check cannot tell which object stands at a path. Objects the grammar would
take in any order are registered too, as *optional* checks: ``unique_paths`` keeps them checked only
where they share a path with other checked objects (``member_union`` checks those together), and
gives the others back their any-order construction.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from dataclasses import dataclass

from radixlm.constrained.ir import builder as ir
from radixlm.constrained.json_schema.context import Context


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
    alts = None  # one object's check (``member_union.MemberUnion``: several)

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
    origin: tuple = ()  # (flat, refs): the canonical node it was built from (member_union)
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
