"""The order of an object's members: any order (one rule per set of members written so far), or
schema order with extra members anywhere between the named ones. ``objects`` decides which."""

from __future__ import annotations

from radixlm.constrained.ir import builder as ir
from radixlm.constrained.json_schema.context import Context


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
