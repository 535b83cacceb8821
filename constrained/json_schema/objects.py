"""Grammar of JSON objects for one canonical schema node.

Objects of up to ``MAX_ANY_ORDER`` named members take them in any order, each at most once, with
extra members (``additionalProperties`` true or a schema, ``patternProperties``) anywhere between
them; larger ones take the named members in the order of ``properties`` and the extras after
them (a restriction). Optional members may be left out; extra keys can never equal a named
property. An unspecified ``additionalProperties`` allows extras, as JSON Schema says;
``Context.unspecified_extras=False`` generates none there (a restriction, like OpenAI's strict
mode, used for tool-call arguments).

For the engine's matcher (``Context.unique_runtime``) most objects instead get a linear grammar
whose members the matcher checks at runtime (``member_objects``, ``_runtime_checked``); the
constructions above remain their fallback where the check cannot follow.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from radixlm.constrained.ir import builder as ir
from radixlm.constrained.json_schema.context import Context
from radixlm.constrained.json_schema.key_complement import complement_key
from radixlm.constrained.json_schema.member_objects import checked_object
from radixlm.constrained.json_schema.names import apply_property_names
from radixlm.constrained.json_schema.normalize import merge
from radixlm.constrained.json_schema.object_order import (
    any_order,
    counted_order,
    interleaved,
    schema_order_dependencies,
)
from radixlm.constrained.pattern.ecma import PLAIN_CHAR, is_universal, pattern_to_regex

_NONEMPTY_UNIVERSAL = (".+", "^.+", "^.+$", ".+$")
MAX_ANY_ORDER = 8  # objects of at most this many named members (and no others) take any order
MAX_ANY_ORDER_RULES = 1024  # per schema: past it, further objects are checked at runtime (compile max, docs)
# Objects of more named members are checked at runtime (where they can be): up to 4 members the
# any-order rules are at most 16 subset states, and past that their compile cost outgrows the
# runtime check's dearer masks (benchmarks/history/ has the measurements).
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
    """The object as a checked one (``member_objects``), or its grammar-level construction
    (``fallback``) registered as an optional check (checked only beside other checked objects),
    or that construction alone. ``where``: (pointer, refs, key_rx); ``parts``: (name ->
    (member, required), extras, needs, the names the schema takes)."""
    pointer, refs, key_rx = where
    checked, extras, needs, taken = parts
    bounds = (flat.get("minProperties", 0), flat.get("maxProperties"))
    origin = ((flat, refs), frozenset(taken - set(checked)))

    def checked_with(block: frozenset, back: Callable[[], ir.Node | None], optional: bool) -> ir.Node | None:
        """The checked object, whose extra keys are never in ``block`` (``member_union``)."""
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
    """Whether the matcher checks this object's members at runtime (``member_objects``): only
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
