"""JSON Schema -> grammar compiler (drafts 4 .. 2020-12): the walk over the schema.

The grammar (``ir.builder``) is *sound*: every text it derives is the serialisation of an instance
that validates against the original schema. Where a keyword cannot be expressed exactly it is
enforced by restriction (an under-approximation, listed in docs/constrained.md) or, when even that
is impossible, it raises ``ConstraintError`` naming the keyword and its JSON pointer (strict mode)
or is relaxed and recorded in ``SchemaGrammar.relaxed`` (``strict=False``; the output is then
validated after generation).

Compilation walks the schema with ``Compiler.value``: resolve ``$ref``/``allOf``/``if``/``not``
(``combinators``) into one canonical node (``flatten``), split ``anyOf``/``oneOf`` into
alternatives, then emit the grammar of each allowed type (``typed``): scalars as lexemes
(regexes), arrays and objects as grammar structure. A schema node met again while its own grammar
is being built (a recursive ``$ref``) becomes a named rule, so recursion is never unrolled;
generic JSON values are one recursive rule of any depth. ``None`` stands for an unsatisfiable
sub-schema; ``$ref`` handling (aliases, cycles) is in ``normalize``. The keyword modules see the
compilation through a ``Context`` only.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import jsonschema
from radixlm.constrained.errors import ConstraintError
from radixlm.constrained.ir import builder as ir
from radixlm.constrained.json_schema import normalize, scalars
from radixlm.constrained.json_schema.arrays import array_grammar
from radixlm.constrained.json_schema.combinators import (
    boolean_regex,
    check_pending,
    discriminator,
    excluded,
    finite_values,
    flatten_else,
    is_switch_case,
    negate,
    one_of_branches,
    string_node,
    switch_schemas,
)
from radixlm.constrained.json_schema.names import resolve_some_key
from radixlm.constrained.json_schema.normalize import (
    MAX_REF_CHAIN,
    Context,
    RefExpansions,
    canonical,
    clean,
    merge,
    no_finite_instance,
    types_of,
)
from radixlm.constrained.json_schema.objects import drop_optional, finite_objects, object_grammar
from radixlm.constrained.json_schema.unique import UniquePaths, plain_whitespace, resolve_unique


def _typed(ctx: Context, t: str, flat: dict, pointer: str, refs: tuple) -> str | ir.Node | None:
    """A scalar's regex (str), an array's or object's grammar node, or None (no instance)."""
    if t == "null":
        return normalize.NULL
    if t == "boolean":
        return normalize.BOOLEAN
    if t in ("integer", "number"):
        return scalars.number(t, flat, pointer)
    if t == "string":
        return scalars.string(ctx, flat, pointer)
    if t == "array":
        return array_grammar(ctx, flat, pointer, refs)
    return object_grammar(ctx, flat, pointer, refs)


def typed(ctx: Context, t: str, flat: dict, pointer: str, refs: tuple) -> str | ir.Node | None:
    """``_typed`` with the values a ``not`` excludes left out."""
    kind = "number" if t == "integer" else t
    banned = excluded(flat, kind)
    values = finite_values(t, flat) if flat.get("_nots") else None
    if values is not None:  # a pending `not` over a finite type: check every value exactly
        ok = [json.dumps(v) for v in values if ctx.is_valid(flat["_sources"], v)]
        return None if not ok else ir.alt([ir.Lit(v) for v in ok])
    if t == "null" and banned:
        return None
    if t == "boolean":
        return boolean_regex(flat)
    if t == "string":
        rx = string_node(ctx, flat, pointer)
        if rx != "":
            return rx
    if banned and t == "array":  # (object values became an anyOf in _not_values)
        ctx.unsupported(banned[0][0].rsplit("/", 1)[0], "not", "of an array value is not supported")
    if t == "object" and flat.get("_some_key"):  # the first witness member that works
        for node in resolve_some_key(ctx, flat, pointer):
            out = _typed(ctx, t, node, pointer, refs)
            if out is not None:
                return out
        return None
    if banned and kind == "number":  # x != e  <=>  x < e or x > e: exact intervals between them
        cuts = sorted({v for _, v in banned})
        bounds = [(None, cuts[0])] + list(zip(cuts, cuts[1:])) + [(cuts[-1], None)]
        alts = []
        for lo, hi in bounds:
            extra = {k: v for k, v in (("exclusiveMinimum", lo), ("exclusiveMaximum", hi)) if v is not None}
            rx = _typed(ctx, t, merge(flat, dict(extra, _sources=[]), pointer), pointer, refs)
            if rx is not None:
                alts.append(rx)
        return None if not alts else alts[0] if len(alts) == 1 else "(" + "|".join(alts) + ")"
    return _typed(ctx, t, flat, pointer, refs)


MAX_NESTING = 40  # nested schema levels on one path (keeps Python's recursion well in bounds)


@dataclass
class SchemaGrammar:
    """The grammar for a schema and the keywords relaxed to get it (``strict=False`` only)."""

    grammar: ir.Grammar
    relaxed: list[str] = field(default_factory=list)
    recursive: bool = False  # some rule refers to itself (a recursive $ref)
    unique: UniquePaths | None = None  # the runtime-checked uniqueItems arrays (unique_runtime=True)

    @property
    def lark(self) -> str:
        """The grammar in llguidance's Lark dialect."""
        return self.grammar.to_lark()


# Root-level front-end options: {"property_order": "schema", "additional_properties": "declared"}.
OPTIONS_KEY = "x-radixlm"


def schema_to_grammar(schema: dict | bool, whitespace_pattern: str | None = None,
                      strict: bool = True, any_order: bool = True,
                      unspecified_extras: bool = True, unique_runtime: bool = False) -> SchemaGrammar:
    """Compile ``schema`` to a grammar of its serialisations (compact JSON unless
    ``whitespace_pattern`` is given). Raises ``ConstraintError`` on unsupported or unsatisfiable
    schemas, and on schemas whose every instance would nest without end (a required
    self-reference). ``any_order=False`` keeps object members in schema order (for callers that
    inline the grammar into one regex, where the any-order rules would multiply out); so does
    ``"x-radixlm": {"property_order": "schema"}`` at the schema's root (a tool-call layout).
    An object whose ``additionalProperties`` is unspecified takes extra members, as JSON Schema
    says; ``unspecified_extras=False`` (or ``"additional_properties": "declared"`` among the
    options) generates extra members only where the schema declares them (a restriction).
    ``unique_runtime=True`` (for the matcher, which checks them) emits ``uniqueItems`` arrays of
    free scalars without the one-item restriction, located in ``SchemaGrammar.unique``."""
    options = schema.get(OPTIONS_KEY) if isinstance(schema, dict) else None
    if isinstance(options, dict):
        if options.get("property_order") == "schema":
            any_order = False  # the caller needs its members in schema order (a call layout)
        if options.get("additional_properties") == "declared":
            unspecified_extras = False
    comp = Compiler(schema, whitespace_pattern, strict, any_order)
    comp.ctx.unspecified_extras = unspecified_extras
    comp.ctx.unique_runtime = unique_runtime and plain_whitespace(whitespace_pattern)
    start = comp.value(schema, "#", ())
    if start is None:
        raise _unsatisfiable(comp)
    drop_optional(comp.ctx)
    rules = finite_objects(comp.ctx, start) if comp.ctx.member_objects else comp.ctx.rules
    grammar = ir.Grammar(start, rules).pruned()
    if grammar is None:
        raise _no_finite_instance(comp)
    grammar, unique = resolve_unique(comp.ctx, grammar) if (comp.ctx.unique_arrays or comp.ctx.member_objects
                                                            or comp.ctx.unique_runtime) else (grammar, None)
    return SchemaGrammar(grammar, comp.ctx.relaxed, bool(comp.rule_sites), unique)


def _unsatisfiable(comp: Compiler) -> ConstraintError:
    if comp.refs.cut is not None:
        return no_finite_instance(comp.refs.cut, MAX_REF_CHAIN)
    return ConstraintError("schema is unsatisfiable", "#")


def _no_finite_instance(comp: Compiler) -> ConstraintError:
    """Every instance needs a recursive value again at each level: name where it recurs."""
    pointer = next(iter(comp.rule_sites.values()), "#")
    return ConstraintError("schema has no finite instance: a recursive $ref is required again at "
                           "every level (a required self-reference never ends)", pointer, "$ref")


def any_json_grammar(ws: str = "") -> ir.Grammar:
    """The grammar of any JSON value (any depth)."""
    ctx = Compiler(True, ws or None, True).ctx
    return ir.Grammar(ctx.any_value(), ctx.rules)


def json_object_grammar(ws: str = "") -> ir.Grammar:
    """The grammar of any JSON object (members of any JSON value, any depth)."""
    ctx = Compiler(True, ws or None, True).ctx
    return ir.Grammar(ctx.any_object(), ctx.rules)


class Compiler:
    """One compilation of one schema: the memoised walk (``value``, ``flatten``), its recursion
    rules and ``$ref`` bookkeeping. ``ctx`` is what the keyword modules get of it."""

    def __init__(self, root: Any, ws: str | None, strict: bool, any_order: bool = True):
        cls = jsonschema.validators.validator_for(root if isinstance(root, dict) else {})
        validator = cls(root if isinstance(root, (dict, bool)) else {}, format_checker=cls.FORMAT_CHECKER)
        self.ctx = Context(ws=ir.lex(ws) if ws else ir.EMPTY, strict=strict, validator=validator,
                           value=self.value, flatten=self.flatten, any_order=any_order)
        self.refs = RefExpansions(root)
        self.rule_sites: dict[str, str] = {}  # rule -> pointer of the node it was made for
        self._memo: dict[int, ir.Node | None] = {}
        self._open: dict[int, str | None] = {}  # nodes being compiled -> their rule, once needed
        self._open_at: dict[int, str] = {}  # ... and where they were first met
        self._keep: list[Any] = []  # keeps memoised nodes alive so their ids stay unique
        self._depth = 0

    # ---- flattening ---------------------------------------------------------------------------
    def flatten(self, node: Any, pointer: str, refs: tuple, chain: tuple = ()) -> tuple[dict | None, tuple]:
        """One canonical node without $ref/allOf/if/not, or None when unsatisfiable. ``chain``:
        the refs expanded at this same instance position (one coming back is a cycle)."""
        if node is True or node == {}:
            return {"_sources": [True]}, refs
        if node is False:
            return None, refs
        if not isinstance(node, dict):
            raise ConstraintError(f"a schema must be an object or a boolean, got {type(node).__name__}",
                                  pointer)
        # The target is a source of its own: jsonschema need not chase the $ref (or its aliases).
        out = clean({k: v for k, v in node.items() if k != "$ref"} if "$ref" in node else node, pointer,
                    self.ctx.unsupported)
        parts = self._parts(node, pointer, refs, chain)
        if parts is None:  # recursion cut at the $ref
            return None, refs
        for key in ("$ref", "allOf", "if", "then", "else", "not"):
            out.pop(key, None)
        base, grown = len(refs), refs
        for sub, sub_pointer, sub_refs, sub_chain in parts:
            flat, sub_refs = self.flatten(sub, sub_pointer, sub_refs, sub_chain)
            if flat is None:
                if sub_pointer.endswith(("/if", "/then")):  # if+then impossible: take not-if+else
                    return flatten_else(self.ctx, node, pointer, refs)
                return None, refs
            out = merge(out, flat, pointer)
            grown = grown + sub_refs[base:]  # the refs each part expanded, for its children
        if "not" in node:
            out = negate(self.ctx, out, node["not"], f"{pointer}/not", refs)
            if out is None:
                return None, refs
        return out, grown

    def _parts(self, node: dict, pointer: str, refs: tuple, chain: tuple) -> list[tuple] | None:
        """The sub-schemas merged into ``node``: its ``$ref`` target, ``allOf`` parts, switch
        cases and an enforced ``if``/``then``, each ``(schema, pointer, refs, chain)``. None when
        the ``$ref`` expansion is cut."""
        parts: list[tuple[Any, str, tuple, tuple]] = []
        if "$ref" in node:
            part = self.refs.expand(node, pointer, refs, chain)
            if part is None:
                return None
            parts.append(part)
        cases = [sub for sub in node.get("allOf", []) if is_switch_case(sub)]
        if "if" in node and discriminator(node["if"]) is not None:
            cases.append({k: node[k] for k in ("if", "then", "else") if k in node})
        for i, sub in enumerate(node.get("allOf", [])):
            if not is_switch_case(sub):
                parts.append((sub, f"{pointer}/allOf/{i}", refs, chain))
        for sub in switch_schemas(cases):  # tagged unions written as if/then on one property
            parts.append((sub, f"{pointer}/allOf", refs, chain))
        if _forces_if(node):
            parts.append((node["if"], f"{pointer}/if", refs, chain))
            if "then" in node:
                parts.append((node["then"], f"{pointer}/then", refs, chain))
        return parts

    # ---- values -------------------------------------------------------------------------------
    def value(self, node: Any, pointer: str, refs: tuple) -> ir.Node | None:
        """The grammar of ``node``'s instances (None: none). A node is compiled once; met again
        inside its own compilation it becomes a rule reference (recursion)."""
        key = id(node)
        self._keep.append(node)
        if key in self._memo:  # siblings referencing one definition share its grammar (a rule)
            out = self._memo[key]
            if isinstance(out, (ir.Seq, ir.Alt, ir.Rep)):
                out = self._memo[key] = self.ctx.named(out)
            return out
        if key in self._open:
            name = self._open[key] or f"r{len(self.rule_sites)}"
            self._open[key] = name
            self.rule_sites.setdefault(name, self._open_at[key])
            return ir.Ref(name)
        if self._depth >= MAX_NESTING:
            raise ConstraintError(f"schema nests deeper than {MAX_NESTING} levels", pointer)
        self._depth += 1
        self._open[key] = None
        self._open_at[key] = pointer
        try:
            flat, refs_after = self.flatten(node, pointer, refs)
            out = None if flat is None else self.value_flat(flat, pointer, refs_after)
            if out is None and isinstance(node, dict) and _forces_if(node):  # if+then impossible
                flat, refs_after = flatten_else(self.ctx, node, pointer, refs)
                out = None if flat is None else self.value_flat(flat, pointer, refs_after)
        finally:
            self._depth -= 1
            name = self._open.pop(key)
        if name is not None:  # recursive: the body becomes the rule (absent: unsatisfiable)
            if out is not None:
                self.ctx.rules[name] = out
            out = ir.Ref(name) if out is not None else None
        self._memo[key] = out
        return out

    def value_flat(self, flat: dict, pointer: str, refs: tuple) -> ir.Node | None:
        """The grammar of a canonical node's instances (None: none)."""
        if len(flat) == 1:  # only _sources: an unconstrained value
            return self.ctx.any_value()
        for key in ("anyOf", "oneOf"):
            if key in flat:
                return self.alternatives(flat, key, pointer, refs)
        if "enum" in flat:
            return self.enum(flat)
        check_pending(self.ctx, flat)
        return ir.alt([_node(typed(self.ctx, t, flat, pointer, refs)) for t in types_of(flat)])

    def alternatives(self, flat: dict, key: str, pointer: str, refs: tuple) -> ir.Node | None:
        """The grammar of an ``anyOf``/``oneOf`` node: its branches merged with the rest of it."""
        rest = {k: v for k, v in flat.items() if k != key}
        branches = []
        for i, sub in enumerate(flat[key]):
            sub_flat, sub_refs = self.flatten(sub, f"{pointer}/{key}/{i}", refs)
            if sub_flat is not None:
                branches.append((merge(rest, sub_flat, pointer), sub_refs))
        if key == "oneOf":
            branches = one_of_branches(self.ctx, branches, pointer)
        return ir.alt([self.value_flat(b, pointer, r) for b, r in branches])

    def enum(self, flat: dict) -> ir.Node | None:
        """The enum values the node's raw sources accept, each once."""
        seen, alts = set(), []
        for v in flat["enum"]:
            key = canonical(v)
            if key not in seen and self.ctx.is_valid(flat["_sources"], v):
                seen.add(key)
                alts.append(self.literal(v))
        return ir.alt(alts)

    def literal(self, value: Any) -> ir.Node:
        """The grammar of exactly ``value`` (with the whitespace pattern between its tokens)."""
        ws, sep = self.ctx.ws, self.ctx.sep
        if isinstance(value, list):
            return ir.seq(ir.Lit("["), ws, *_joined([self.literal(v) for v in value], sep(",")), ws, ir.Lit("]"))
        if isinstance(value, dict):
            members = [ir.seq(ir.Lit(json.dumps(k, ensure_ascii=False)), sep(":"), self.literal(v))
                       for k, v in value.items()]
            return ir.seq(ir.Lit("{"), ws, *_joined(members, sep(",")), ws, ir.Lit("}"))
        return ir.Lit(json.dumps(value, ensure_ascii=False, separators=(",", ":")))


def _node(part: str | ir.Node | None) -> ir.Node | None:
    """A scalar regex from the type modules as a lexeme; grammar nodes as they are."""
    return ir.lex(part) if isinstance(part, str) else part


def _joined(items: list[ir.Node], sep: ir.Node) -> list[ir.Node]:
    out: list[ir.Node] = []
    for i, item in enumerate(items):
        out += [sep, item] if i else [item]
    return out


def _forces_if(node: dict) -> bool:
    """Whether ``node``'s ``if`` falls under the general rule: ``if`` and ``then`` both enforced
    (sound whatever ``else`` says; a documented restriction). Discriminator ``if``s become switch
    cases instead, and a node with its own enum/const is checked against the raw node exactly."""
    return "if" in node and "enum" not in node and "const" not in node and discriminator(node["if"]) is None
