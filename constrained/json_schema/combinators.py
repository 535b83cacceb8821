"""The combining keywords that need proofs: ``not`` (``negate``, with the type-by-type
``complement``), ``oneOf`` (``one_of_branches``) and ``if``/``then``/``else`` on a discriminator
(``switch_schemas``); the disjointness proofs they rely on are in ``disjoint``.

``not``: ``not`` for the JSON Schema front end: turn a negated sub-schema into restrictions on what we
generate, or prove it cannot matter.

Supported forms (each exact on the type it touches, or a sound restriction):

- ``not {}`` / ``not true``: nothing is valid; ``not false`` / unsatisfiable: ignored.
- ``not {type: [...]}``: those types are removed.
- ``not {enum/const: [...]}``: ``null``/booleans/numbers are excluded exactly; strings too
  (a complement, or the lexeme algebra next to other string keywords); an object value ``v`` as
  the ``anyOf`` of the ways an object differs from it (a member of ``v`` missing, one more member,
  a member's value ``not const``), values no instance of the node can take are dropped.
- ``not`` of one bound (``minimum``, ``maxLength``, ``minItems``, ...): the opposite bound, on
  the bound's type only (the bound holds vacuously for the other types).
- ``not {required: [a, ...]}``: objects only, and ``a`` is never generated (when not required).
- ``not`` of a schema provably disjoint from the node: ignored.
- Otherwise ``complement``: type by type, strings through ``scalars`` (patterns, lengths,
  formats, enums, ``anyOf``/``oneOf``/``not`` of them: exact), objects when the negated schema
  is one ``propertyNames`` or ``patternProperties`` entry (some member must exist:
  ``names.resolve_some_key``).
- Anything else is kept pending (``_nots``, its pointer): an ``enum`` on the node resolves it
  (values are checked with ``jsonschema`` against the raw nodes, ``not`` included), and so do
  finite types (null, booleans, integers in a bounded range of at most ``MAX_ENUMERATED``
  values, for numbers their integers); otherwise the generator raises ``ConstraintError``
  (strict) when it reaches the node.

Complements: ``not S`` one JSON type at a time: the general rule behind ``negate``.

For each type ``t`` the node allows, ``S`` accepts either no ``t`` instance (``none``: ``not S``
keeps ``t``), every one (``all``: a keyword of another type is vacuous on ``t``, so ``not S``
drops ``t``) or some (``some``). Two ``some`` cases are enforced:

- strings: the strings ``S`` accepts as a ``scalars`` expression, complemented (exact);
- objects, when ``S`` is one ``propertyNames`` or one ``patternProperties`` entry: ``not S``
  says some member exists (a name failing ``propertyNames``, or a name matching the pattern with
  a value failing its schema), kept as ``_some_key`` for ``names.resolve_some_key``.

Any other ``some`` leaves the ``not`` to the caller (``complement`` returns ``NotImplemented``).

``oneOf``: ``oneOf`` for the JSON Schema front end: which branches to generate.

A generated value must satisfy exactly one branch. Branch i is generated only when no value we
generate for it satisfies another branch j (``generated_disjoint`` against j's own schema). To
make that provable, branches are first restricted: a branch never generates a member that another
branch requires and it leaves optional, and it always generates one member that another branch
forbids (``additionalProperties: false``) when it has such a member. Branches still unprovable
are dropped (a restriction); strict mode raises when none is left.

``if``/``then``/``else``: ``if``/``then``/``else`` on a discriminator property, as an ``anyOf`` of exact cases.

Config schemas write tagged unions as ``allOf: [{if: {properties: {kind: {const: "a"}}}, then:
A}, {if: ... "b" ..., then: B}, ...]``. Enforcing every ``if`` + ``then`` (our general rule) would
demand ``kind`` be "a" and "b" at once. Here the ``if``s that each test one property against one
constant are grouped by property into one ``anyOf``: for each constant c_k, objects with
``kind == c_k``, ``then_k`` and the other groups' ``else``s; plus a default case with ``kind``
none of the constants and every ``else``. Sound and exact on objects, except that objects
without the property are generated only when every ``if`` requires it (then the default covers
them); non-objects are not generated from a switch.
"""

from __future__ import annotations

from typing import Any

from radixlm.constrained.errors import ConstraintError
from radixlm.constrained.ir import builder as ir
from radixlm.constrained.json_schema import scalars
from radixlm.constrained.json_schema.disjoint import disjoint, generated_disjoint, never_generated
from radixlm.constrained.json_schema.names import complement_key
from radixlm.constrained.json_schema.normalize import (
    ALL_TYPES,
    ANNOTATIONS,
    Context,
    exact_types,
    merge,
    schemas_for_key,
    types_of,
)
from radixlm.constrained.json_schema.scalars import integer_bounds

# The keywords that constrain each (non-string) type's instances.
TYPE_KEYS = {
    "object": ("properties", "required", "additionalProperties", "patternProperties", "minProperties",
               "maxProperties", "dependentRequired", "dependentSchemas", "propertyNames", "_some_key"),
    "array": ("items", "prefixItems", "minItems", "maxItems", "uniqueItems", "contains"),
    "number": ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"),
    "null": (), "boolean": (),
}
_KIND = {"integer": "number"}


def complement(ctx: Context, out: dict, flat: dict, pointer: str, refs: tuple):
    """``out`` restricted by ``not flat`` (None: nothing is valid), or ``NotImplemented`` when
    some type's part of ``flat`` is beyond these rules. ``pointer``: the ``not`` keyword."""
    types = list(out.get("type", ALL_TYPES))
    keep, extra = [], {}
    for t in types:
        if t == "string":
            e = scalars.node_expr(ctx, flat, pointer, refs)
            if e is None:
                return NotImplemented
            e = scalars.negated(e)
            try:
                scalars.check(e)
            except ConstraintError:
                return NotImplemented
            if e != scalars.FALSE:
                keep.append(t)
            if e not in (scalars.FALSE, scalars.TRUE):
                extra["_str_exprs"] = [e]
            continue
        cls = type_class(ctx, flat, t, pointer, refs)
        if cls == "none":
            keep.append(t)
        elif cls == "some":
            key = existential(flat, pointer) if t == "object" else None
            if key is None:
                return NotImplemented
            keep.append(t)
            extra["_some_key"] = [key]
    if not keep:
        return None
    result = dict(out, type=keep) if keep != types or "type" in out else dict(out)
    for k, v in extra.items():
        result[k] = out.get(k, []) + v
    return result


def type_class(ctx: Context, flat: dict, t: str, pointer: str, refs: tuple) -> str:
    """``none`` | ``all`` | ``some``: how many instances of type ``t`` the canonical node accepts
    (conservative: ``some`` when unsure)."""
    if t not in exact_types(flat):
        return "none"
    for key in ("anyOf", "oneOf"):
        if key in flat:
            rest = {k: v for k, v in flat.items() if k != key}
            classes = []
            for i, sub in enumerate(flat[key]):
                sub_flat, sub_refs = ctx.flatten(sub, f"{pointer}/{key}/{i}", refs)
                classes.append("none" if sub_flat is None else
                               type_class(ctx, merge(rest, sub_flat, pointer), t, pointer, sub_refs))
            if all(c == "none" for c in classes):
                return "none"
            one = classes.count("all") == 1 and classes.count("none") == len(classes) - 1
            return "all" if (key == "anyOf" and "all" in classes) or one else "some"
    kind = _KIND.get(t, t)
    if "enum" in flat:
        values = [v for v in flat["enum"] if kind_of(v) == kind and ctx.is_valid(flat["_sources"], v)]
        if not values:
            return "none"
        full = {"null": 1, "boolean": 2}.get(kind)
        return "all" if full is not None and len({repr(v) for v in values}) == full else "some"
    if flat.get("_nots") or any(kind_of(v) == kind for _, v in flat.get("_not_values", [])):
        return "some"
    if t == "number" and "type" in flat and "number" not in flat["type"]:
        return "some"  # integers only
    return "some" if any(k in flat for k in TYPE_KEYS[kind]) else "all"


def existential(flat: dict, pointer: str) -> tuple | None:
    """``_some_key`` entry for ``not flat`` on objects: ``("names", schema, pointer)`` (a member
    whose name fails ``propertyNames``) or ``("pattern", p, value schema, pointer)`` (a member
    whose name matches ``p`` and whose value fails the pattern's schema); None otherwise."""
    if any(k in flat for k in ("anyOf", "oneOf", "enum", "_nots")):
        return None
    keys = [k for k in TYPE_KEYS["object"] if k in flat]
    if keys == ["propertyNames"]:
        return ("names", flat["propertyNames"], pointer)
    if keys == ["patternProperties"] and len(flat["patternProperties"]) == 1:
        ((p, sub),) = flat["patternProperties"].items()
        return ("pattern", p, True if sub is False else {"not": sub}, pointer)
    return None


def kind_of(v) -> str:
    """The JSON kind of a value: null, boolean, number, string, array or object."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, (int, float)):
        return "number"
    return "string" if isinstance(v, str) else "array" if isinstance(v, list) else "object"


# not {k: v} -> {k2: f(v)} on k's type: the opposite bound (exact).
_FLIPS = {
    "minimum": ("exclusiveMaximum", lambda v: v), "exclusiveMinimum": ("maximum", lambda v: v),
    "maximum": ("exclusiveMinimum", lambda v: v), "exclusiveMaximum": ("minimum", lambda v: v),
    "minLength": ("maxLength", lambda v: v - 1), "maxLength": ("minLength", lambda v: v + 1),
    "minItems": ("maxItems", lambda v: v - 1), "maxItems": ("minItems", lambda v: v + 1),
    "minProperties": ("maxProperties", lambda v: v - 1), "maxProperties": ("minProperties", lambda v: v + 1),
}
_FLIP_TYPE = {"Length": "string", "Items": "array", "Properties": "object"}
MAX_ENUMERATED = 4096  # integers a pending `not` is resolved over by checking each one


def negate(ctx: Context, out: dict, neg: Any, pointer: str, refs: tuple) -> dict | None:
    """``out`` (a canonical node) restricted by ``not neg``; None when nothing is valid.
    ``pointer`` is the ``not`` keyword's own pointer."""
    flat, _ = ctx.flatten(neg, pointer, refs)
    if flat is None:
        return out
    keys = set(flat) - {"_sources"}
    if not keys:
        return None  # not {} / not true: nothing is valid
    if "enum" in out:  # our own values are filtered exactly against the raw nodes (not included)
        return out
    if keys == {"type"}:
        banned = set(flat["type"]) | ({"integer"} if "number" in flat["type"] else set())
        allowed = [t for t in out.get("type", ALL_TYPES) if t not in banned]
        if "number" in allowed and "integer" in banned:
            return _pending(out, pointer)
        out["type"] = allowed
        return out
    if keys == {"enum"}:
        return _not_values(ctx, out, flat["enum"], pointer)
    if len(keys) == 1 and next(iter(keys)) in _FLIPS:
        (key,) = keys
        if isinstance(flat[key], bool) or not isinstance(flat[key], (int, float)):
            return _pending(out, pointer)
        name, fn = _FLIPS[key]
        kind = next((t for suffix, t in _FLIP_TYPE.items() if key.endswith(suffix)), "number")
        return merge(out, {"_sources": [], "type": [kind], name: fn(flat[key])}, pointer)
    if keys == {"required"} and flat["required"]:
        name = flat["required"][0]  # at least one is absent: we never generate the first one
        if name not in out.get("required", []):
            return merge(out, {"_sources": [], "type": ["object"], "properties": {name: False}}, pointer)
    if disjoint(ctx, out, flat):
        return out  # nothing we generate can satisfy the negated schema anyway
    result = complement(ctx, out, flat, pointer, refs)
    return _pending(out, pointer) if result is NotImplemented else result


def _pending(out: dict, pointer: str) -> dict:
    return dict(out, _nots=out.get("_nots", []) + [pointer])


def _not_values(ctx: Context, out: dict, values: list, pointer: str) -> dict:
    """``out`` without the ``values``; those no instance of ``out`` can take are left out (the
    loose check is a superset of ``out``'s instances)."""
    values = [v for v in values if ctx.is_valid_loose(out["_sources"], v)]
    objects = [v for v in values if isinstance(v, dict)]
    for v in objects:  # o != v: a member of v missing, a member more, or a member's value differs
        branches = [{"properties": {k: False}} for k in v] + [{"minProperties": len(v) + 1}]
        branches += [{"properties": {k: {"not": {"const": x}}}} for k, x in v.items()]
        out = merge(out, {"_sources": [], "anyOf": branches}, pointer)
    rest = [(pointer, v) for v in values if not isinstance(v, dict)]
    return dict(out, _not_values=out.get("_not_values", []) + rest) if rest else out


def check_pending(ctx: Context, flat: dict) -> None:
    """Raise (strict) for a pending ``not`` the generator cannot enforce on this node: one whose
    generated types are not all finite (``finite_values``)."""
    if any(finite_values(t, flat) is None for t in types_of(flat)):
        for pointer in flat.get("_nots", []):
            ctx.unsupported(pointer.rsplit("/", 1)[0], "not", "with this sub-schema is not supported")


def finite_values(t: str, flat: dict) -> list | None:
    """Every instance of type ``t`` we would generate for ``flat`` (integers only for numbers),
    when there are at most ``MAX_ENUMERATED``; else None."""
    if t == "null":
        return [None]
    if t == "boolean":
        return [True, False]
    if t not in ("integer", "number"):
        return None
    lo, hi = integer_bounds(flat)
    if lo is None or hi is None or hi - lo >= MAX_ENUMERATED:
        return None
    return list(range(lo, hi + 1))


def excluded(flat: dict, kind: str) -> list[tuple[str, Any]]:
    """The ``(pointer, value)`` exclusions of one JSON kind (``null``, ``boolean``, ``number``,
    ``string``, ``array``, ``object``)."""
    return [(p, v) for p, v in flat.get("_not_values", []) if kind_of(v) == kind]


def boolean_regex(flat: dict) -> str | None:
    """``true``/``false`` minus the excluded ones."""
    banned = {v for _, v in excluded(flat, "boolean")}
    alts = [w for w, b in (("true", True), ("false", False)) if b not in banned]
    return None if not alts else alts[0] if len(alts) == 1 else "(true|false)"


def string_node(ctx: Context, flat: dict, pointer: str) -> str | ir.Node | None:
    """The strings of a node with exclusions or ``_str_exprs``, or ``""`` when it has none (the
    caller then emits the normal string regex)."""
    words = [v for _, v in excluded(flat, "string")]
    if not words and not flat.get("_str_exprs"):
        return ""
    others = any(k in flat for k in ("_patterns", "_formats", "_str_exprs", "minLength", "maxLength"))
    if not others:  # a plain complement: the algebra, as extra keys are (``complement_key``)
        return complement_key(set(words), nonempty=False, pointer=pointer)
    return scalars.string_lexeme(ctx, scalars.conjunction(flat, pointer), pointer,
                                      scalars.keyword_of(flat))



def one_of_branches(ctx: Context, branches: list[tuple[dict, tuple]], pointer: str) -> list[tuple[dict, tuple]]:
    """The (canonical node, refs) branches of a ``oneOf`` to generate."""
    originals = [_explicit_extras(ctx, b) for b, _ in branches]
    flats = require_forbidden_by_others(exclude_required_of_others(originals))
    keep = [i for i in range(len(flats))
            if all(generated_disjoint(ctx, flats[i], originals[j])
                   for j in range(len(flats)) if j != i)]
    if branches and not keep:
        ctx.unsupported(pointer, "oneOf", "has branches that may overlap, so "
                         "'exactly one' cannot be guaranteed")
        keep = list(range(len(flats)))
    return [(flats[i], branches[i][1]) for i in keep]


def _explicit_extras(ctx: Context, flat: dict) -> dict:
    """``flat`` with JSON Schema's default ``additionalProperties: true`` written out when extra
    members are generated for it, so the proofs below see the members we may generate."""
    if not ctx.unspecified_extras or "additionalProperties" in flat or "object" not in types_of(flat):
        return flat
    out = dict(flat, additionalProperties=True)
    return out if types_of(out) == types_of(flat) else flat


def exclude_required_of_others(branches: list[dict]) -> list[dict]:
    """For ``oneOf`` over objects: branch i never generates a member that another branch
    requires and branch i leaves optional (a restriction), so that the branches become provably
    disjoint on what we generate."""
    out = []
    for i, b in enumerate(branches):
        if "enum" in b or "anyOf" in b or "oneOf" in b or types_of(b) != ["object"]:
            out.append(b)
            continue
        props = dict(b.get("properties", {}))
        for j, other in enumerate(branches):
            names = [n for n in other.get("required", []) if n not in b.get("required", [])]
            if j != i and names and not any(never_generated(dict(b, properties=props), n) for n in names):
                props[names[0]] = False
        out.append(dict(b, properties=props) if props != b.get("properties", {}) else b)
    return out


def require_forbidden_by_others(branches: list[dict]) -> list[dict]:
    """For ``oneOf`` over objects: branch i always generates one of its optional properties that
    another branch forbids outright (a restriction), so no value of branch i satisfies that one."""
    out = []
    for i, b in enumerate(branches):
        if "enum" in b or "anyOf" in b or "oneOf" in b or types_of(b) != ["object"]:
            out.append(b)
            continue
        required = list(b.get("required", []))
        for j, other in enumerate(branches):
            if j == i or any(schemas_for_key(other, n) is None for n in required):
                continue  # already disjoint from this one through a required member
            if any(never_generated(b, n) for n in other.get("required", [])):
                continue  # ... or through one the other requires and this one never generates
            forbidden = [n for n, s in b.get("properties", {}).items()
                         if s is not False and n not in required and schemas_for_key(other, n) is None]
            if forbidden:
                required.append(forbidden[0])
        out.append(dict(b, required=required) if required != b.get("required", []) else b)
    return out


def discriminator(if_schema: Any) -> tuple[str, Any, bool] | None:
    """(property, constant, whether the ``if`` requires the property), or None when ``if`` is not
    a single-property constant test."""
    if not isinstance(if_schema, dict):
        return None
    keys = set(if_schema) - ANNOTATIONS
    if not keys <= {"properties", "required", "type"} or if_schema.get("type", "object") != "object":
        return None
    props = if_schema.get("properties")
    if not isinstance(props, dict) or len(props) != 1:
        return None
    (name, sub), = props.items()
    if not isinstance(sub, dict):
        return None
    sub_keys = set(sub) - ANNOTATIONS - {"type"}
    if sub_keys == {"const"}:
        value = sub["const"]
    elif sub_keys == {"enum"} and isinstance(sub["enum"], list) and len(sub["enum"]) == 1:
        value = sub["enum"][0]
    else:
        return None
    required = if_schema.get("required", [])
    if required not in ([], [name]):
        return None
    return name, value, required == [name]


def is_switch_case(part: Any) -> bool:
    """Whether an ``allOf`` part is a bare ``if``/``then``/``else`` with a discriminator ``if``."""
    return (isinstance(part, dict) and "if" in part and set(part) - ANNOTATIONS <= {"if", "then", "else"}
            and discriminator(part["if"]) is not None)


def switch_schemas(cases: list[dict]) -> list[dict]:
    """One ``anyOf`` schema per discriminator property, equivalent on objects to ``allOf: cases``."""
    groups: dict[str, list[dict]] = {}
    for case in cases:
        groups.setdefault(discriminator(case["if"])[0], []).append(case)
    return [_switch(name, group) for name, group in groups.items()]


def _switch(name: str, cases: list[dict]) -> dict:
    tests = [discriminator(c["if"]) for c in cases]
    branches: list[dict] = []
    for k in range(len(cases)):
        value = tests[k][1]
        parts: list[Any] = [{"type": "object", "required": [name], "properties": {name: {"const": value}}}]
        for j, other in enumerate(cases):  # the other tests fail unless they test the same value
            holds = tests[j][1] == value and type(tests[j][1]) is type(value)
            sub = other.get("then" if holds else "else")
            if sub is not None:
                parts.append(sub)
        branches.append({"allOf": parts})
    values = [t[1] for t in tests]
    default: dict = {"type": "object", "properties": {name: {"not": {"enum": values}}}}
    if not all(t[2] for t in tests):  # an absent property passes an ``if`` that does not require it
        default["required"] = [name]
    branches.append({"allOf": [default] + [c["else"] for c in cases if "else" in c]})
    return {"anyOf": branches}


def flatten_else(ctx: Context, node: dict, pointer: str, refs: tuple) -> tuple[dict | None, tuple]:
    """``node`` when its ``if`` fails: ``not if`` and ``else`` replace ``if`` and ``then``."""
    rest = {k: v for k, v in node.items() if k not in ("if", "then", "else")}
    flat, grown = ctx.flatten(rest, pointer, refs)
    if flat is None:
        return None, refs
    base = len(refs)
    if "else" in node:
        other, sub_refs = ctx.flatten(node["else"], f"{pointer}/else", refs)
        if other is None:
            return None, refs
        flat, grown = merge(flat, other, pointer), grown + sub_refs[base:]
    return negate(ctx, flat, node["if"], f"{pointer}/if", refs), grown
