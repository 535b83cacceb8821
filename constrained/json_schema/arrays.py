"""Grammars of JSON arrays for one canonical schema node: ``items``/``prefixItems``,
``minItems``/``maxItems``, ``uniqueItems`` and ``contains``/``minContains``/``maxContains``.
Counts are grammar repetitions (``Rep``), exact at any size up to ``MAX_ITEMS``."""

from __future__ import annotations

import json
from typing import Any

from radixlm.constrained.errors import ConstraintError
from radixlm.constrained.ir import builder as ir
from radixlm.constrained.json_schema.disjoint import disjoint
from radixlm.constrained.json_schema.normalize import Context, canonical, types_of
from radixlm.constrained.json_schema.unique import Restriction

MAX_ITEMS = 10_000  # maxItems above this is lowered to it (sound); minItems above it raises
MAX_UNIQUE_ENUM = 8  # uniqueItems over an enum of at most this many values is exact (2^k rules)
_CHECKED_TYPES = {"string", "number", "integer"}  # free uniqueItems items checked at runtime


def array_grammar(ctx: Context, flat: dict, pointer: str, refs: tuple) -> ir.Node | None:
    """Grammar of the arrays we generate for one canonical node (None: none is valid)."""
    lo, hi = flat.get("minItems", 0), flat.get("maxItems")
    terms = _contains_terms(ctx, flat)
    lo = max(lo, terms[0])
    if flat.get("uniqueItems"):
        values = _unique_candidates(ctx, flat, pointer, refs, terms[0])
        if values is not None:
            return _unique_enum_array(ctx, values, lo, hi)
        checked, rx = _checked_unique(ctx, flat, pointer, refs, (terms[0], lo, hi))
        if checked:
            return rx
        if lo > 1:
            ctx.unsupported(pointer, "uniqueItems", "with minItems > 1 is not supported")
        else:  # enforced by restriction: at most one item is always unique
            hi = 1 if hi is None else min(hi, 1)
    if hi is not None and hi < lo:
        return None
    if lo > MAX_ITEMS:
        raise ConstraintError(f"minItems above {MAX_ITEMS} is not supported", pointer, "minItems")
    if hi is not None and hi > MAX_ITEMS:
        hi = MAX_ITEMS
    prefix = []
    for i, sub in enumerate(flat.get("prefixItems", [])):
        rx = ctx.value(sub, f"{pointer}/prefixItems/{i}", refs)
        if rx is None:
            break
        prefix.append(rx)
    items = flat.get("items", True)
    closed = len(prefix) < len(flat.get("prefixItems", [])) or items is False
    rest = None if closed else (ctx.any_value() if items is True
                                else ctx.value(items, f"{pointer}/items", refs))
    if hi is not None:
        prefix = prefix[:hi]
    need, musts, caps = terms
    if not need and not caps:
        return _items(ctx, prefix, rest, lo, hi)
    rx = _contains_array(ctx, flat, pointer, refs, (prefix, rest, lo, hi), (need, musts, caps))
    if rx is None and caps:  # maybe satisfiable, but not by arrays we can prove
        ctx.unsupported(caps[0][1], "maxContains", "is only supported when the other items "
                         "provably never satisfy 'contains'")
        rx = _contains_array(ctx, flat, pointer, refs, (prefix, rest, lo, hi), (need, musts, []))
    return rx


def _items(ctx: Context, prefix: list, rest, lo: int, hi: int | None) -> ir.Node | None:
    """The array of the given prefix items then items ``rest`` (None: no more), lo..hi of them."""
    if len(prefix) < lo and rest is None:
        return None
    sep = ctx.sep(",")
    need = max(lo - len(prefix), 0)  # items after the prefix items, at least
    room = None if hi is None else hi - len(prefix)
    if not prefix:
        body = ir.EMPTY if rest is None or room == 0 else ir.join(rest, sep, need, room)
        if body is None or (body == ir.EMPTY and lo > 0):
            return None
    else:
        tail = ir.EMPTY
        if rest is not None and (room is None or room > 0):
            tail = ir.rep(ir.seq(sep, rest), need, room)
        body = _nest(prefix, tail, lo, sep)
    return _brackets(ctx, body)


def _brackets(ctx: Context, body: ir.Node | None) -> ir.Node | None:
    return ir.seq(ir.Lit("["), ctx.ws, body, ctx.ws, ir.Lit("]"))


def _contains_terms(ctx: Context, flat: dict) -> tuple[int, list, list]:
    """(k, schemas, caps): at least k items must satisfy every schema (several ``contains``, from
    ``allOf``, are all satisfied by the same items); ``caps`` are the (schema, pointer) of the
    ``maxContains`` to enforce: no item but those k may satisfy the schema."""
    entries = flat.get("contains", [])
    probe = ctx.validator.evolve  # the draft's semantics: draft 4 has no contains, 6/7 no min/max
    if not entries or probe(schema={"contains": False}).is_valid([]):
        return 0, [], []
    honoured = not probe(schema={"contains": True, "maxContains": 0}).is_valid([0])
    least = [e["min"] if honoured else 1 for e in entries]
    need, caps = max(least), []
    for e in entries:
        if honoured and e["max"] is not None:
            if need > e["max"]:
                ctx.unsupported(e["pointer"], "maxContains", f"({e['max']}) is below minContains ({need})")
            else:
                caps.append((e["schema"], e["pointer"]))
    return need, [e["schema"] for e, n in zip(entries, least) if n > 0], caps


def _contains_array(ctx: Context, flat: dict, pointer: str, refs: tuple, shape: tuple, terms: tuple) -> str | None:
    """Arrays with ``need`` items satisfying every ``musts`` schema: after all prefix items when
    the further items allow it, else in the first prefix positions that allow it. With ``caps``
    every other item must provably satisfy no cap schema (the others are not generated)."""
    prefix, rest, lo, hi = shape
    need, musts, caps = terms
    raw = flat.get("prefixItems", [])[:len(prefix)]
    avoids = [_avoids(ctx, s, caps, pointer, refs) for s in raw]
    if need and all(avoids):
        tail = _contains_rest(ctx, flat, pointer, refs, (len(prefix), rest, lo, hi), need, musts, bool(caps))
        if tail is not None:
            sep = ctx.sep(",")
            return _brackets(ctx, ir.seq(*[ir.seq(p, sep) for p in prefix], tail))
    out, hits, last = [], 0, -1
    for i, sub in enumerate(raw):
        rx = ctx.value({"allOf": [sub, *musts]}, f"{pointer}/contains", refs) if hits < need else None
        if rx is None and not avoids[i]:
            break  # an item here might match a cap: the arrays end before it
        out.append(prefix[i] if rx is None else rx)
        if rx is not None:
            hits, last = hits + 1, i
    if hits < need:
        return None
    if caps and (len(out) < len(prefix) or not _avoids(ctx, flat.get("items", True), caps, pointer, refs)):
        rest = None
    return _items(ctx, out, rest, max(lo, last + 1), hi)


def _avoids(ctx: Context, schema, caps: list, pointer: str, refs: tuple) -> bool:
    """True when no instance of ``schema`` satisfies a cap schema (a proof by disjointness)."""
    if not caps:
        return True
    node, _ = ctx.flatten(schema, pointer, refs)
    if node is None:
        return True
    for cap, _ in caps:
        target, _ = ctx.flatten(cap, pointer, refs)
        if target is not None and not disjoint(ctx, node, target):
            return False
    return True


def _contains_rest(ctx: Context, flat: dict, pointer: str, refs: tuple, shape: tuple, need: int,
                   musts: list, only_hits: bool) -> str | None:
    """The items after ``n`` prefix items, ``need`` of them satisfying every schema of ``musts``:
    ``(R,)* C (,R)*`` when unbounded and both regexes are small, else the matching items first
    (a restriction: matching the two in parallel multiplies their automaton states), or only
    the matching items (``only_hits``). None when they do not fit or cannot match."""
    n, rest, lo, hi = shape
    room = None if hi is None else hi - n
    extra = max(lo - n, need) - need  # other items that must appear as well
    if rest is None or (room is not None and room < need) or (only_hits and extra):
        return None
    hit = ctx.value({"allOf": [flat.get("items", True), *musts]}, f"{pointer}/contains", refs)
    if hit is None:
        return None
    sep = ctx.sep(",")
    more = ir.rep(ir.seq(sep, hit), need - 1, need - 1)
    if only_hits or room == need:
        return ir.seq(hit, more)
    if room is None:  # hits anywhere among the other items
        others = ir.rep(ir.seq(sep, rest), 0, None)
        hits = ir.rep(ir.seq(sep, hit, others), need - 1, need - 1)
        return ir.seq(ir.rep(ir.seq(rest, sep), extra, None), hit, others, hits)
    return ir.seq(hit, more, ir.rep(ir.seq(sep, rest), extra, room - need))


def _nest(prefix: list, tail: ir.Node, lo: int, sep: ir.Node) -> ir.Node | None:
    """prefix[0] (sep prefix[1] (... tail)?)? with the first ``lo`` items mandatory."""
    out: ir.Node | None = tail
    for i in range(len(prefix) - 1, -1, -1):
        out = ir.seq(prefix[i], out) if i == 0 else ir.seq(sep, prefix[i], out)
        if i >= lo:
            out = ir.opt(out)
    return out


def _unique_candidates(ctx: Context, flat: dict, pointer: str, refs: tuple, need: int) -> list[Any] | None:
    """The distinct values of ``uniqueItems`` items when they are an enum of at most
    ``MAX_UNIQUE_ENUM`` scalars, or booleans/null (and nothing else shapes the array), else None."""
    items = flat.get("items", True)
    if need or flat.get("prefixItems") or not isinstance(items, dict):
        return None
    node, _ = ctx.flatten(items, f"{pointer}/items", refs)
    if node is None or any(k in node for k in ("anyOf", "oneOf")):
        return None
    enum = node.get("enum")
    if enum is None and set(node) == {"_sources", "type"} and set(node["type"]) <= {"boolean", "null"}:
        enum = [True, False, None]  # booleans and null: a small enum (filtered below)
    if enum is None:
        return None
    seen, values = set(), []
    for v in enum:
        key = canonical(v)
        if isinstance(v, (dict, list)) or key in seen or not ctx.is_valid(node["_sources"], v):
            continue
        seen.add(key)
        values.append(v)
    return values if len(values) <= MAX_UNIQUE_ENUM else None


def _unique_enum_array(ctx: Context, values: list[Any], lo: int, hi: int | None) -> ir.Node | None:
    """Arrays of distinct ``values``, lo..hi of them: one rule per set of values still unused,
    so a duplicate can never be generated (exact: the arrays are all such sequences)."""
    hi = len(values) if hi is None else min(hi, len(values))
    if lo > hi:
        return None
    lits = {i: ir.Lit(json.dumps(v, ensure_ascii=False, separators=(",", ":"))) for i, v in enumerate(values)}
    sep, memo = ctx.sep(","), {}

    def rest(unused: frozenset) -> ir.Node | None:
        """After ``len(values) - len(unused)`` items: stop, or a comma and one more unused value."""
        if unused not in memo:
            used = len(values) - len(unused)
            more = ir.alt([ir.seq(lits[i], rest(unused - {i})) for i in sorted(unused)]) if used < hi else None
            stop = ir.EMPTY if used >= lo else None
            memo[unused] = ctx.named(ir.alt([stop, ir.seq(sep, more) if more is not None else None]))
        return memo[unused]

    every = frozenset(lits)
    first = ir.alt([ir.seq(lits[i], rest(every - {i})) for i in sorted(every)]) if hi > 0 else None
    body = ir.EMPTY if first is None else (first if lo > 0 else ir.opt(first))
    return ir.seq(ir.Lit("["), ctx.ws, body, ctx.ws, ir.Lit("]"))


def _checked_unique(ctx: Context, flat: dict, pointer: str, refs: tuple, shape: tuple) -> tuple[bool, ir.Node | None]:
    """(True, grammar) for a ``uniqueItems`` array whose duplicates the matcher forbids at
    runtime (``constrained/checks/tracker.py``): scalar items of which there are always unused
    values, whatever came before (``_scalar_items``). The array is a rule of its own,
    registered with its restriction in ``ctx.unique_arrays`` (``unique.resolve_unique``
    falls back to it where the runtime check cannot follow). (False, None): not such an array."""
    need, lo, hi = shape
    if not ctx.unique_runtime or need or flat.get("prefixItems") or lo > MAX_ITEMS:
        return False, None
    items, where = flat.get("items", True), f"{pointer}/items"
    scalar = _scalar_items(ctx, items, where, refs)
    rest = None if scalar is None else ctx.value(scalar[1], where, refs)
    if rest is None:
        return False, None
    body = _items(ctx, [], rest, lo, min(hi, MAX_ITEMS) if hi is not None else None)
    if body is None:
        return True, None
    whole = rest if scalar[1] is items else ctx.value(items, where, refs)
    one = _items(ctx, [], whole, lo, 1 if hi is None else min(hi, 1)) if lo <= 1 else None
    name = f"uniq{len(ctx.unique_arrays)}"
    ctx.rules[name] = body
    ctx.unique_arrays[name] = Restriction(pointer, one, "integer" in scalar[0] and "number" not in scalar[0],
                                          "array" in scalar[0])
    return True, ir.Ref(name)


def _scalar_items(ctx: Context, items: Any, pointer: str, refs: tuple) -> tuple[set, Any] | None:
    """(types, schema) of the items a runtime-checked unique array generates: strings, numbers
    or integers (booleans and null beside them) constrained by ``type`` and ``minLength`` only,
    or unconstrained items (any JSON value: containers are compared whole). The container types
    of a ``type`` list are left out (a restriction). None: not such items (a ``pattern``, a
    bound, an enum... could leave no unused value)."""
    node, _ = ctx.flatten(items, pointer, refs) if isinstance(items, (dict, bool)) else (None, ())
    if node is None:
        return None
    if len(node) == 1:  # unconstrained (any JSON value): an open container can always differ
        return {"string", "number", "boolean", "null", "array", "object"}, True
    types = set(types_of(node))
    scalars = types & (_CHECKED_TYPES | {"boolean", "null"})
    if set(node) - {"_sources", "type", "minLength"} or not scalars & _CHECKED_TYPES:
        return None
    return scalars, items if scalars == types else {"allOf": [items, {"type": sorted(scalars)}]}
