"""The canonical schema node and what every keyword module of the front end shares:
normalisation and ``merge``, ``$ref`` resolution, type inference, the unconstrained lexemes
(``NULL``, ``BOOLEAN``, ``NUMBER``, ``STRING``) and the compilation ``Context``.

Normalisation: Schema normalisation: keyword clean-up per node and ``allOf`` merging.

``clean(node)`` rewrites one raw schema node (any draft 4 .. 2020-12) into a canonical dict:
annotations and unknown keywords dropped, ``const`` -> ``enum``, draft-4 boolean exclusive bounds
-> numbers, array-form ``items`` -> ``prefixItems``, ``dependencies`` -> ``dependentRequired`` /
``dependentSchemas``, ``pattern``/``format`` -> lists (``_patterns``, ``_formats``), ``multipleOf``
and ``contains`` (with its ``minContains``/``maxContains``) -> lists. ``merge(a, b)``
intersects two canonical nodes (the instances valid under both). Every canonical node keeps the
raw nodes it came from in ``_sources``, so values (``enum``) can be checked exactly with
``jsonschema``.

``$ref``: Local ``$ref`` resolution for the JSON-schema front end: pointers, alias chains and cycles.

A cycle of ``$ref`` (through ``allOf``/``if``/``then`` too) that comes back to the same instance
position with no object or array in between (``a -> b -> a``) never terminates validation, so the
schema is invalid (``cyclic_ref``). Recursion through a container is fine: the front end turns it
into a grammar rule (and reports a required self-reference, which has no finite instance).

A ``$ref`` whose target is itself only a ``$ref`` (an alias) is followed in a loop, so a chain
of a thousand aliases costs one expansion, not a thousand levels of recursion.

Types: Type inference for a canonical schema node: the JSON types to generate, and the types whose
instances a node may accept (for disjointness proofs).

Context: ``Context``: what the keyword modules of the front end may use of one compilation.

The compiler (``compiler.Compiler``) owns the walk: memo, open nodes, recursion rules, ``$ref``
bookkeeping. The keyword modules (arrays, objects, names, negation, ...) get only this: the
whitespace and separators, the recursive entry points ``value`` and ``flatten``, the shared rule
table, the strict/lenient policy and the exact ``jsonschema`` checks.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

from radixlm.constrained.errors import ConstraintError
from radixlm.constrained.ir import builder as ir
from radixlm.constrained.pattern.ecma import STRING_CHAR
from radixlm.constrained.pattern.formats import FORMAT_REGEXES
from radixlm.constrained.pattern.numbers import number_range_regex

# Keywords that only annotate (or locate) a schema: dropped.
ANNOTATIONS = frozenset({
    "title", "description", "examples", "example", "default", "$comment", "$schema", "$id", "id",
    "readOnly", "writeOnly", "deprecated", "$anchor", "$dynamicAnchor", "$vocabulary", "$defs",
    "definitions", "contentMediaType", "contentEncoding", "contentSchema", "discriminator",
    "nullable", "xml", "externalDocs", "markdownDescription", "enumDescriptions",
})
# Keywords that change validity and that the compiler handles itself (possibly partially).
HANDLED = frozenset({
    "type", "enum", "const", "properties", "required", "additionalProperties", "patternProperties",
    "minProperties", "maxProperties", "dependentRequired", "dependentSchemas", "dependencies",
    "items", "prefixItems", "additionalItems", "minItems", "maxItems", "uniqueItems", "minLength",
    "maxLength", "pattern", "format", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
    "anyOf", "oneOf", "allOf", "$ref", "not", "if", "then", "else", "multipleOf", "propertyNames",
    "contains", "minContains", "maxContains",
    # Satisfied by construction: every generated member/item is evaluated by some keyword.
    "unevaluatedProperties", "unevaluatedItems",
})
# Keywords that change validity and that we cannot enforce in any form.
UNSUPPORTED = frozenset({
    "$dynamicRef", "$recursiveRef", "$recursiveAnchor",
})
ALL_TYPES = ("null", "boolean", "object", "array", "string", "number", "integer")


def canonical(value: Any) -> str:
    """A key equal for equal JSON values (1 and 1.0 equal, True and 1 not)."""
    return json.dumps(_tag(value), sort_keys=True)


def _tag(v: Any) -> Any:
    if isinstance(v, bool) or v is None:
        return ["b", v]
    if isinstance(v, (int, float)):
        return ["n", float(v)]
    if isinstance(v, list):
        return ["a", [_tag(x) for x in v]]
    if isinstance(v, dict):
        return ["o", {k: _tag(x) for k, x in v.items()}]
    return ["s", v]


def clean(node: dict, pointer: str, unsupported) -> dict:
    """Canonical copy of one raw node. ``unsupported(pointer, keyword, why)`` handles the rest."""
    out: dict[str, Any] = {"_sources": [node]}
    for key, val in node.items():
        if key in ANNOTATIONS or key == "unevaluatedProperties" or key == "unevaluatedItems":
            continue
        if key in UNSUPPORTED:
            unsupported(pointer, key, "is not supported")
        elif key not in HANDLED:
            continue  # unknown keywords do not change validity
        elif key == "const":
            out["enum"] = [val]
        elif key == "enum":
            if not isinstance(val, list):
                raise ConstraintError("enum must be an array", pointer, key)
            out["enum"] = list(val) if "enum" not in out else _intersect(out["enum"], val)
        elif key == "type":
            types = [val] if isinstance(val, str) else list(val)
            bad = [t for t in types if t not in ALL_TYPES]
            if bad:
                raise ConstraintError(f"unknown type {bad[0]!r}", pointer, key)
            out["type"] = types
        elif key == "pattern":
            out["_patterns"] = [val]
        elif key == "format":
            if val in FORMAT_REGEXES:
                out["_formats"] = [val]
        elif key == "items" and isinstance(val, list):
            out["prefixItems"] = val
            if "additionalItems" in node:
                out["items"] = node["additionalItems"]
        elif key == "additionalItems":
            continue  # only meaningful with array-form items, handled above
        elif key == "multipleOf":  # a list: allOf keeps every divisor
            out[key] = [val]
        elif key == "contains":  # a list of {schema, min, max, pointer}: allOf keeps every one
            out[key] = [{"schema": val, "min": node.get("minContains", 1), "max": node.get("maxContains"),
                         "pointer": pointer}]
        elif key in ("minContains", "maxContains"):
            continue  # only meaningful next to contains, handled above
        elif key == "dependencies":
            for name, dep in val.items():
                kind = "dependentRequired" if isinstance(dep, list) else "dependentSchemas"
                out.setdefault(kind, {})[name] = dep
        elif key in ("exclusiveMinimum", "exclusiveMaximum") and isinstance(val, bool):
            bound = "minimum" if key == "exclusiveMinimum" else "maximum"
            if val and bound in node:
                out[key] = node[bound]
        elif key in ("minimum", "maximum") and node.get("exclusive" + key[:1].upper() + key[1:]) is True:
            continue  # draft 4: the bound is exclusive, recorded above
        else:
            out[key] = val
    if "enum" in out and "enum" in node and "const" in node:
        out["enum"] = _intersect([node["const"]], node["enum"])
    return out


def _intersect(a: list, b: list) -> list:
    keys = {canonical(v) for v in b}
    return [v for v in a if canonical(v) in keys]


def _all_of(a: Any, b: Any) -> Any:
    if a is True or a == {}:
        return b
    if b is True or b == {}:
        return a
    if a is False or b is False:
        return False
    if a == b:  # allOf is idempotent; recursive schemas merge a node with itself a lot
        return a
    return {"allOf": [a, b]}


def schemas_for_key(node: dict, name: str) -> list | None:
    """Raw schemas a member ``name`` must satisfy under ``node``; None when ``node`` forbids it
    outright. An unspecified ``additionalProperties`` counts as true here (exact semantics)."""
    props = node.get("properties", {})
    subs = [props[name]] if name in props else []
    matched = [s for p, s in node.get("patternProperties", {}).items() if re.search(p, name)]
    subs += matched
    if name not in props and not matched and "additionalProperties" in node:
        subs.append(node["additionalProperties"])
    if any(s is False for s in subs):
        return None
    return subs


def _merge_objects(out: dict, a: dict, b: dict) -> None:
    names = list(a.get("properties", {})) + [n for n in b.get("properties", {}) if n not in a.get("properties", {})]
    props = {}
    for name in names:
        sa, sb = schemas_for_key(a, name), schemas_for_key(b, name)
        if sa is None or sb is None:
            props[name] = False
            continue
        merged: Any = True
        for s in sa + sb:
            merged = _all_of(merged, s)
        props[name] = merged
    if props:
        out["properties"] = props
    pats: dict[str, Any] = {}
    for own, other in ((a, b), (b, a)):
        for pat, sub in own.get("patternProperties", {}).items():
            # Keys matching this pattern may fall under the other side's additionalProperties.
            extra = other.get("additionalProperties", True)
            pats[pat] = _all_of(pats.get(pat, True), _all_of(sub, extra))
    if pats:
        out["patternProperties"] = pats
    if "additionalProperties" in a or "additionalProperties" in b:
        out["additionalProperties"] = _all_of(a.get("additionalProperties", True),
                                              b.get("additionalProperties", True))
    req = list(dict.fromkeys(a.get("required", []) + b.get("required", [])))
    if req:
        out["required"] = req
    for kind in ("dependentRequired", "dependentSchemas"):
        da, db = a.get(kind, {}), b.get(kind, {})
        if da or db:
            merged_deps = dict(da)
            for k, v in db.items():
                if k not in merged_deps:
                    merged_deps[k] = v
                elif kind == "dependentRequired":
                    merged_deps[k] = list(dict.fromkeys(merged_deps[k] + v))
                else:
                    merged_deps[k] = _all_of(merged_deps[k], v)
            out[kind] = merged_deps


_OBJECT_KEYS = {"properties", "patternProperties", "additionalProperties", "required",
                "dependentRequired", "dependentSchemas"}


def merge(a: dict, b: dict, pointer: str, max_product: int = 256) -> dict:
    """Canonical node whose instances are those valid under both canonical nodes ``a`` and ``b``."""
    out: dict[str, Any] = {"_sources": a["_sources"] + b["_sources"]}
    keys = set(a) | set(b)
    if keys & _OBJECT_KEYS:
        _merge_objects(out, a, b)
    for key in keys - _OBJECT_KEYS - {"_sources"}:
        if key not in a or key not in b:
            out[key] = a[key] if key in a else b[key]
            continue
        va, vb = a[key], b[key]
        if key == "type":
            out[key] = _merge_types(va, vb)
        elif key == "enum":
            out[key] = _intersect(va, vb)
        elif key in ("minimum", "exclusiveMinimum", "minLength", "minItems", "minProperties"):
            out[key] = max(va, vb)
        elif key in ("maximum", "exclusiveMaximum", "maxLength", "maxItems", "maxProperties"):
            out[key] = min(va, vb)
        elif key in ("_patterns", "_formats"):
            out[key] = list(dict.fromkeys(va + vb))
        elif key in ("_nots", "_not_values", "_str_exprs", "_some_key"):  # negations: all of them hold
            out[key] = va + vb
        elif key == "uniqueItems":
            out[key] = va or vb
        elif key in ("items", "propertyNames"):
            out[key] = _all_of(va, vb)
        elif key == "prefixItems":
            out[key] = _merge_prefix(a, b)
        elif key in ("anyOf", "oneOf"):
            out[key] = _product(key, va, vb, pointer, max_product)
        elif key == "multipleOf":  # every divisor holds; 3 and 3.0 differ (int vs float check)
            out[key] = list({(type(v), v): v for v in va + vb}.values())
        elif key == "contains":  # every contains holds
            out[key] = va + [e for e in vb if e not in va]
        else:
            out[key] = va
    return out


def _product(key: str, va: list, vb: list, pointer: str, max_product: int) -> list:
    """Branches of allOf(key va, key vb): every pair merged. A large ``anyOf`` product keeps the
    first ``max_product`` pairs by i + j (each branch early): sound, any pair satisfies both
    lists. A ``oneOf`` needs every pair for its disjointness proof."""
    if va == vb:  # allOf(anyOf X, anyOf X) is anyOf X (the same for oneOf)
        return list(va)
    pairs = [(i, j) for i in range(len(va)) for j in range(len(vb))]
    if len(pairs) > max_product:
        if key == "oneOf":
            raise ConstraintError("allOf of two oneOf lists is too large to merge", pointer, key)
        pairs = sorted(pairs, key=lambda p: (p[0] + p[1], p[0]))[:max_product]
    return [_all_of(va[i], vb[j]) for i, j in pairs]


def _merge_types(a: list, b: list) -> list:
    out = [t for t in a if t in b]
    if "integer" in a and "number" in b and "integer" not in out:
        out.append("integer")
    if "integer" in b and "number" in a and "integer" not in out:
        out.append("integer")
    return out


def _merge_prefix(a: dict, b: dict) -> list:
    pa, pb = a["prefixItems"], b["prefixItems"]
    out = []
    for i in range(max(len(pa), len(pb))):
        x = pa[i] if i < len(pa) else a.get("items", True)
        y = pb[i] if i < len(pb) else b.get("items", True)
        out.append(_all_of(x, y))
    return out


def anchored_literal(flat: dict) -> str | None:
    """``lit`` when the node only admits strings matching ``^lit$`` (Python's ``$`` also matches
    before a final newline: the caller checks ``lit + "\\n"`` too)."""
    if flat.get("type") != ["string"]:
        return None
    for pattern in flat.get("_patterns", []):
        m = re.fullmatch(r"\^([A-Za-z0-9_ :/-]*)\$", pattern)
        if m is not None:
            return m.group(1)
    return None


MAX_REF_CHAIN = 32  # $ref expansions on one path before a rule closes the recursion


def resolve(root: Any, ref: str, pointer: str) -> tuple[Any, str]:
    """The node a local ``$ref`` names, and its pointer (the ref itself)."""
    if not isinstance(ref, str):
        raise ConstraintError("$ref must be a string", pointer, "$ref")
    if not ref.startswith("#"):
        raise ConstraintError(f"remote $ref {ref!r} is not supported", pointer, "$ref")
    node: Any = root
    for part in [p for p in ref[1:].split("/") if p]:
        part = unquote(part.replace("~1", "/").replace("~0", "~"))
        if isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        elif isinstance(node, dict) and part in node:
            node = node[part]
        else:
            raise ConstraintError(f"$ref {ref!r} does not resolve", pointer, "$ref")
    return node, ref


def is_alias(node: Any) -> bool:
    """A node that is a ``$ref`` and nothing else that changes validity (annotations aside)."""
    return isinstance(node, dict) and "$ref" in node and all(
        k == "$ref" or (k not in HANDLED and k not in UNSUPPORTED) for k in node)


def follow(root: Any, node: dict, pointer: str, chain: tuple) -> tuple[Any, str, str, tuple]:
    """Expand ``node``'s ``$ref`` through any aliases: ``(target, its pointer, the last ref,
    chain)``. ``chain`` holds the refs already expanded at this instance position; meeting one
    again is a cycle with nothing in between (``ConstraintError``)."""
    ref = node["$ref"]
    while True:
        if ref in chain:
            raise cyclic_ref(chain, ref, pointer)
        chain += (ref,)
        target, pointer = resolve(root, ref, pointer)
        if not is_alias(target):
            return target, pointer, ref, chain
        ref = target["$ref"]


@dataclass
class RefExpansions:
    """The ``$ref`` bookkeeping of one compilation: the document ``root`` refs resolve in, the
    first expansion cut (``cut``: (pointer, ref), past ``MAX_REF_CHAIN`` refs on one path) and
    where each chain of refs was last expanded (``sites``, for the cut's document pointer)."""

    root: Any
    cut: tuple[str, str] | None = None
    sites: dict[tuple, str] = field(default_factory=dict)

    def expand(self, node: dict, pointer: str, refs: tuple, chain: tuple) -> tuple | None:
        """What ``node``'s ``$ref`` adds to its flattening, ``(target, pointer, refs, chain)``, or
        None past ``MAX_REF_CHAIN`` expansions on one path (the first cut is kept in ``cut``)."""
        target, target_pointer, ref, ref_chain = follow(self.root, node, pointer, chain)
        if len(refs) >= MAX_REF_CHAIN:
            self.cut = self.cut or (self._document_pointer(refs, pointer), ref)
            return None
        self.sites.setdefault(refs + (ref,), pointer)
        return target, target_pointer, refs + (ref,), ref_chain

    def _document_pointer(self, refs: tuple, pointer: str) -> str:
        """Where the ``$ref`` at ``pointer`` sits in the document: inside the target of the last
        ``$ref`` on the path. Other errors name the location along the instance, but in a recursion
        that grows by a level each time round (``#/properties/child/properties/child/...``)."""
        site = self.sites.get(refs)
        if refs and site is not None and pointer.startswith(site) and pointer != site:
            return refs[-1] + pointer[len(site):]
        return pointer


def cyclic_ref(chain: tuple, ref: str, pointer: str) -> ConstraintError:
    loop = chain[chain.index(ref):] + (ref,)
    if len(loop) > 5:  # a long chain: its ends say enough
        loop = loop[:3] + (f"... ({len(loop) - 4} more)",) + loop[-1:]
    loop = " -> ".join(loop)
    return ConstraintError(f"cyclic $ref {loop}: it comes back to the same value with no object or "
                           "array in between, so it never resolves to a schema", pointer, "$ref")


def no_finite_instance(cut: tuple[str, str], max_chain: int) -> ConstraintError:
    """The error for a schema that is unsatisfiable only because ``$ref`` expansion was cut at
    ``cut`` (``(pointer, ref)``: more than ``max_chain`` refs on one path)."""
    pointer, ref = cut
    return ConstraintError(f"schema has no instance within {max_chain} nested $ref expansions (the $ref "
                           f"to {ref!r} here is required beyond that)", pointer, "$ref")


_KEYWORD_TYPES = {
    "object": ("properties", "required", "additionalProperties", "patternProperties",
               "minProperties", "maxProperties", "dependentRequired", "dependentSchemas"),
    "array": ("items", "prefixItems", "minItems", "maxItems", "uniqueItems", "contains"),
    "string": ("minLength", "maxLength", "_patterns", "_formats"),
    "number": ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"),
}


def types_of(flat: dict) -> list[str]:
    """The types to generate: the declared ones, else those implied by type-specific keywords
    (a restriction: ``{"minLength": 1}`` also admits numbers, we only generate strings), else all."""
    if "type" in flat:
        types = list(flat["type"])
    else:
        types = [t for t, keys in _KEYWORD_TYPES.items() if any(k in flat for k in keys)]
        types = types or [t for t in ALL_TYPES if t != "integer"]
    if "number" in types and "integer" in types:
        types.remove("integer")
    return types


def exact_types(flat: dict) -> set[str]:
    """The types whose instances ``flat`` may accept (``integer`` counts under ``number``)."""
    types = set(flat.get("type", ALL_TYPES))
    if "number" in types:
        types.add("integer")
    return types


NULL = "null"
BOOLEAN = "(true|false)"
NUMBER = number_range_regex(None, False, None, False)
STRING = f'"{STRING_CHAR}*"'


ANY_VALUE = "any_value"  # the rule of an unconstrained JSON value
# Keywords the compiler decomposes itself: left out of the loose checks (see ``is_valid_loose``).
_DECOMPOSED = ("oneOf", "anyOf", "not", "allOf", "$ref", "if", "then", "else")

ValueFn = Callable[[Any, str, tuple], ir.Node | None]  # (node, pointer, refs) -> grammar (None: none)
FlattenFn = Callable[[Any, str, tuple], tuple[dict | None, tuple]]  # -> (canonical node, refs)


@dataclass
class Context:
    """One compilation as the keyword modules see it.

    ``value(node, pointer, refs)`` is the grammar of a sub-schema's instances (None: none);
    ``flatten(node, pointer, refs)`` its canonical node without ``$ref``/``allOf``/``if``/``not``
    (None: unsatisfiable) and the refs expanded on the way. ``validator`` is a ``jsonschema``
    validator of the root schema (refs resolve in it; its draft decides keyword semantics).
    """

    ws: ir.Node
    strict: bool
    validator: Any
    value: ValueFn
    flatten: FlattenFn
    rules: dict[str, ir.Node] = field(default_factory=dict)
    relaxed: list[str] = field(default_factory=list)  # keywords relaxed (lenient mode only)
    any_order: bool = True  # object members in any order (objects.MAX_ANY_ORDER), else schema order
    any_order_rules: int = 0  # rules the any-order objects took so far (objects.MAX_ANY_ORDER_RULES)
    # An unspecified additionalProperties allows extra members (JSON Schema semantics); False:
    # only a declared additionalProperties/patternProperties generates them (call layouts).
    unspecified_extras: bool = True
    # uniqueItems over free scalars: checked by the matcher at runtime (arrays._checked_unique),
    # only for consumers that run that check; rule name -> its restriction (``unique``).
    unique_runtime: bool = False
    unique_arrays: dict[str, Any] = field(default_factory=dict)
    # objects whose members the matcher checks at runtime (objects._runtime_checked): rule name ->
    # its ``objects.MemberObject`` (``unique`` falls back to its grammar-level construction).
    member_objects: dict[str, Any] = field(default_factory=dict)
    # raw node id -> (node, its validator, its loose copy): a proof checks the same few nodes
    # hundreds of times, and evolving a validator costs more than the check
    _checks: dict[int, tuple] = field(default_factory=dict, repr=False)

    def sep(self, punct: str) -> ir.Node:
        """``punct`` with optional whitespace around it."""
        return ir.seq(self.ws, ir.Lit(punct), self.ws)

    def named(self, node: ir.Node | None) -> ir.Node | None:
        """``node`` as a rule of its own (used where it is referenced more than once)."""
        if node is None or isinstance(node, (ir.Lit, ir.Lex, ir.Ref)):
            return node
        name = f"s{len(self.rules)}"
        self.rules[name] = node
        return ir.Ref(name)

    def reserve(self) -> ir.Ref:
        """A new rule whose body the caller sets in ``rules`` (for a body that refers to itself)."""
        name = f"s{len(self.rules)}"
        self.rules[name] = ir.EMPTY  # placeholder until the caller sets the body
        return ir.Ref(name)

    def unsupported(self, pointer: str, keyword: str, why: str) -> None:
        """Strict: raise. Lenient: record and let the caller drop the keyword."""
        if self.strict:
            raise ConstraintError(f"keyword {keyword!r} {why}; it cannot be enforced by the grammar "
                                  "(pass strict=False to relax it and validate afterwards)",
                                  pointer, keyword)
        self.relaxed.append(f"{pointer}/{keyword}")

    def is_valid(self, sources: list, value: Any) -> bool:
        """Exact check of ``value`` against every raw node in ``sources`` (refs resolve in root)."""
        return all(self._check(s)[1].is_valid(value) for s in sources)

    def _check(self, node: Any) -> tuple:
        """``(node, validator of node, loose validator of node)``, built once per node."""
        entry = self._checks.get(id(node))
        if entry is None or entry[0] is not node:
            loose = {k: v for k, v in node.items() if k not in _DECOMPOSED} if isinstance(node, dict) else node
            entry = (node, self.validator.evolve(schema=node), self.validator.evolve(schema=loose))
            self._checks[id(node)] = entry
        return entry

    def is_valid_loose(self, sources: list, value: Any) -> bool:
        """``is_valid`` without the top-level keywords the compiler decomposes (``oneOf``,
        ``anyOf``, ``not``, ``allOf``, ``$ref``, ``if``): a superset of the node's instances, for
        disjointness proofs (the parts that ``allOf``/``$ref``/``if`` merged are sources of their
        own). Checking the full sources would be circular: a ``oneOf`` node rejects a value that
        two of its branches accept."""
        return all(self._check(s)[2].is_valid(value) for s in sources)

    def any_value(self) -> ir.Ref:
        """The rule of any JSON value, nested to any depth."""
        if ANY_VALUE not in self.rules:
            self.rules[ANY_VALUE] = ir.EMPTY  # placeholder: the body refers to the rule itself
            scalars = [ir.Lit("null"), ir.Lex(BOOLEAN), ir.Lex(NUMBER), ir.Lex(STRING)]
            value = ir.Ref(ANY_VALUE)
            array = ir.seq(ir.Lit("["), self.ws, ir.join(value, self.sep(","), 0, None), self.ws, ir.Lit("]"))
            self.rules[ANY_VALUE] = ir.alt(scalars + [array, self.any_object()])
        return ir.Ref(ANY_VALUE)

    def any_object(self) -> ir.Node:
        """Any JSON object (members of any value)."""
        member = ir.seq(ir.Lex(STRING), self.sep(":"), self.any_value())
        return ir.seq(ir.Lit("{"), self.ws, ir.join(member, self.sep(","), 0, None), self.ws, ir.Lit("}"))
