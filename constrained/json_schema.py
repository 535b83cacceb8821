"""JSON Schema -> grammar front end (drafts 4 .. 2020-12), our own code.

The grammar (``grammar_ir``) is *sound*: every text it derives is the serialisation of an instance
that validates against the original schema. Where a keyword cannot be expressed exactly it is
enforced by restriction (an under-approximation, listed in docs/constrained.md) or, when even that
is impossible, it raises ``ConstraintError`` naming the keyword and its JSON pointer (strict mode)
or is relaxed and recorded in ``SchemaGrammar.relaxed`` (``strict=False``; the output is then
validated after generation).

Compilation walks the schema with ``_Compiler.value``: resolve ``$ref``/``allOf``/``if``/``not``
(``json_schema_not``) into one canonical node (``flatten``), split ``anyOf``/``oneOf`` into
alternatives, then emit the grammar of each allowed type: scalars as lexemes (regexes), arrays and
objects as grammar structure. A schema node met again while its own grammar is being built (a
recursive ``$ref``) becomes a named rule, so recursion is never unrolled; generic JSON values are
one recursive rule of any depth. ``None`` stands for an unsatisfiable sub-schema; ``$ref`` handling
(aliases, cycles) is in ``json_schema_refs``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import jsonschema
from radixlm.constrained import grammar_ir as ir
from radixlm.constrained import json_schema_not as negation
from radixlm.constrained import json_schema_refs as refs_
from radixlm.constrained import json_schema_types as types_
from radixlm.constrained.errors import ConstraintError
from radixlm.constrained.json_schema_normalize import canonical, clean, merge
from radixlm.constrained.json_schema_object import object_grammar
from radixlm.constrained.json_schema_one_of import one_of_branches
from radixlm.constrained.json_schema_refs import MAX_REF_CHAIN
from radixlm.constrained.json_schema_switch import discriminator, flatten_else, is_switch_case, switch_schemas

MAX_NESTING = 40  # nested schema levels on one path (keeps Python's recursion well in bounds)
ANY_VALUE = "any_value"  # the rule of an unconstrained JSON value


@dataclass
class SchemaGrammar:
    """The grammar for a schema and the keywords relaxed to get it (``strict=False`` only)."""

    grammar: ir.Grammar
    relaxed: list[str] = field(default_factory=list)
    recursive: bool = False  # some rule refers to itself (a recursive $ref)

    @property
    def lark(self) -> str:
        """The grammar in llguidance's Lark dialect."""
        return self.grammar.to_lark()


def schema_to_grammar(schema: dict | bool, whitespace_pattern: str | None = None,
                      strict: bool = True) -> SchemaGrammar:
    """Compile ``schema`` to a grammar of its serialisations (compact JSON unless
    ``whitespace_pattern`` is given). Raises ``ConstraintError`` on unsupported or unsatisfiable
    schemas, and on schemas whose every instance would nest without end (a required
    self-reference)."""
    comp = _Compiler(schema, whitespace_pattern, strict)
    start = comp.value(schema, "#", ())
    if start is None:
        raise _unsatisfiable(comp)
    grammar = ir.Grammar(start, comp.rules).pruned()
    if grammar is None:
        raise _no_finite_instance(comp)
    return SchemaGrammar(grammar, comp.relaxed, bool(comp.rule_sites))


def _unsatisfiable(comp: _Compiler) -> ConstraintError:
    if comp.cut is not None:
        return refs_.no_finite_instance(comp.cut, MAX_REF_CHAIN)
    return ConstraintError("schema is unsatisfiable", "#")


def _no_finite_instance(comp: _Compiler) -> ConstraintError:
    """Every instance needs a recursive value again at each level: name where it recurs."""
    pointer = next(iter(comp.rule_sites.values()), "#")
    return ConstraintError("schema has no finite instance: a recursive $ref is required again at "
                           "every level (a required self-reference never ends)", pointer, "$ref")


def any_json_grammar(ws: str = "") -> ir.Grammar:
    """The grammar of any JSON value (any depth)."""
    comp = _Compiler(True, ws or None, True)
    return ir.Grammar(comp.any_value(), comp.rules)


def json_object_grammar(ws: str = "") -> ir.Grammar:
    """The grammar of any JSON object (members of any JSON value, any depth)."""
    comp = _Compiler(True, ws or None, True)
    return ir.Grammar(comp.any_object(), comp.rules)


class _Compiler:
    def __init__(self, root: Any, ws: str | None, strict: bool):
        self.root = root
        self.ws: ir.Node = ir.lex(ws) if ws else ir.EMPTY
        self.strict = strict
        self.cut: tuple[str, str] | None = None  # first $ref not expanded: (pointer, ref)
        self.ref_sites: dict[tuple, str] = {}  # refs on a path -> where its last ref was expanded
        self.relaxed: list[str] = []
        self.rules: dict[str, ir.Node] = {}
        self.rule_sites: dict[str, str] = {}  # rule -> pointer of the node it was made for
        self._memo: dict[int, ir.Node | None] = {}
        self._open: dict[int, str | None] = {}  # nodes being compiled -> their rule, once needed
        self._open_at: dict[int, str] = {}  # ... and where they were first met
        self._keep: list[Any] = []  # keeps memoised nodes alive so their ids stay unique
        self._depth = 0
        cls = jsonschema.validators.validator_for(root if isinstance(root, dict) else {})
        self._validator = cls(root if isinstance(root, (dict, bool)) else {},
                              format_checker=cls.FORMAT_CHECKER)

    def named(self, node: ir.Node | None) -> ir.Node | None:
        """``node`` as a rule of its own (used where it is referenced more than once)."""
        if node is None or isinstance(node, (ir.Lit, ir.Lex, ir.Ref)):
            return node
        name = f"s{len(self.rules)}"
        self.rules[name] = node
        return ir.Ref(name)

    def sep(self, punct: str) -> ir.Node:
        """``punct`` with optional whitespace around it."""
        return ir.seq(self.ws, ir.Lit(punct), self.ws)

    # ---- errors -------------------------------------------------------------------------------
    def unsupported(self, pointer: str, keyword: str, why: str) -> None:
        """Strict: raise. Lenient: record and let the caller drop the keyword."""
        if self.strict:
            raise ConstraintError(f"keyword {keyword!r} {why}; it cannot be enforced by the grammar "
                                  "(pass strict=False to relax it and validate afterwards)",
                                  pointer, keyword)
        self.relaxed.append(f"{pointer}/{keyword}")

    def is_valid(self, sources: list, value: Any) -> bool:
        """Exact check of ``value`` against every raw node in ``sources`` (refs resolve in root)."""
        return all(self._validator.evolve(schema=s).is_valid(value) for s in sources)

    def is_valid_loose(self, sources: list, value: Any) -> bool:
        """``is_valid`` without the top-level keywords the compiler decomposes (``oneOf``,
        ``anyOf``, ``not``, ``allOf``, ``$ref``, ``if``): a superset of the node's instances, for
        disjointness proofs (the parts that ``allOf``/``$ref``/``if`` merged are sources of their
        own). Checking the full sources would be circular: a ``oneOf`` node rejects a value that
        two of its branches accept."""
        drop = ("oneOf", "anyOf", "not", "allOf", "$ref", "if", "then", "else")
        loose = [{k: v for k, v in s.items() if k not in drop} if isinstance(s, dict) else s for s in sources]
        return self.is_valid(loose, value)

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
                    self.unsupported)
        parts: list[tuple[Any, str, tuple, tuple]] = []
        if "$ref" in node:
            part = refs_.expand(self, node, pointer, refs, chain)
            if part is None:  # recursion cut here
                return None, refs
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
        for key in ("$ref", "allOf", "if", "then", "else", "not"):
            out.pop(key, None)
        base, grown = len(refs), refs
        for sub, sub_pointer, sub_refs, sub_chain in parts:
            flat, sub_refs = self.flatten(sub, sub_pointer, sub_refs, sub_chain)
            if flat is None:
                if sub_pointer.endswith(("/if", "/then")):  # if+then impossible: take not-if+else
                    return flatten_else(self, node, pointer, refs)
                return None, refs
            out = merge(out, flat, pointer)
            grown = grown + sub_refs[base:]  # the refs each part expanded, for its children
        if "not" in node:
            out = negation.negate(self, out, node["not"], f"{pointer}/not", refs)
            if out is None:
                return None, refs
        return out, grown

    # ---- values -------------------------------------------------------------------------------
    def value(self, node: Any, pointer: str, refs: tuple) -> ir.Node | None:
        """The grammar of ``node``'s instances (None: none). A node is compiled once; met again
        inside its own compilation it becomes a rule reference (recursion)."""
        key = id(node)
        self._keep.append(node)
        if key in self._memo:  # siblings referencing one definition share its grammar (a rule)
            out = self._memo[key]
            if isinstance(out, (ir.Seq, ir.Alt, ir.Rep)):
                out = self._memo[key] = self.named(out)
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
                flat, refs_after = flatten_else(self, node, pointer, refs)
                out = None if flat is None else self.value_flat(flat, pointer, refs_after)
        finally:
            self._depth -= 1
            name = self._open.pop(key)
        if name is not None:  # recursive: the body becomes the rule (absent: unsatisfiable)
            if out is not None:
                self.rules[name] = out
            out = ir.Ref(name) if out is not None else None
        self._memo[key] = out
        return out

    def value_flat(self, flat: dict, pointer: str, refs: tuple) -> ir.Node | None:
        if len(flat) == 1:  # only _sources: an unconstrained value
            return self.any_value()
        for key in ("anyOf", "oneOf"):
            if key in flat:
                return self.alternatives(flat, key, pointer, refs)
        if "enum" in flat:
            return self.enum(flat)
        negation.check_pending(self, flat)
        types = types_.types_of(flat)
        return ir.alt([_node(negation.typed(self, t, flat, pointer, refs)) for t in types])

    def alternatives(self, flat: dict, key: str, pointer: str, refs: tuple) -> ir.Node | None:
        rest = {k: v for k, v in flat.items() if k != key}
        branches = []
        for i, sub in enumerate(flat[key]):
            sub_flat, sub_refs = self.flatten(sub, f"{pointer}/{key}/{i}", refs)
            if sub_flat is not None:
                branches.append((merge(rest, sub_flat, pointer), sub_refs))
        if key == "oneOf":
            branches = one_of_branches(self, branches, pointer)
        return ir.alt([self.value_flat(b, pointer, r) for b, r in branches])

    def enum(self, flat: dict) -> ir.Node | None:
        seen, alts = set(), []
        for v in flat["enum"]:
            key = canonical(v)
            if key not in seen and self.is_valid(flat["_sources"], v):
                seen.add(key)
                alts.append(self.literal(v))
        return ir.alt(alts)

    def literal(self, value: Any) -> ir.Node:
        """The grammar of exactly ``value`` (with the whitespace pattern between its tokens)."""
        if isinstance(value, list):
            return ir.seq(ir.Lit("["), self.ws, *_joined([self.literal(v) for v in value], self.sep(",")),
                          self.ws, ir.Lit("]"))
        if isinstance(value, dict):
            members = [ir.seq(ir.Lit(json.dumps(k, ensure_ascii=False)), self.sep(":"), self.literal(v))
                       for k, v in value.items()]
            return ir.seq(ir.Lit("{"), self.ws, *_joined(members, self.sep(",")), self.ws, ir.Lit("}"))
        return ir.Lit(json.dumps(value, ensure_ascii=False, separators=(",", ":")))

    def any_value(self) -> ir.Ref:
        """The rule of any JSON value, nested to any depth."""
        if ANY_VALUE not in self.rules:
            self.rules[ANY_VALUE] = ir.EMPTY  # placeholder: the body refers to the rule itself
            scalars = [ir.Lit("null"), ir.Lex(types_.BOOLEAN), ir.Lex(types_.NUMBER), ir.Lex(types_.STRING)]
            value = ir.Ref(ANY_VALUE)
            array = ir.seq(ir.Lit("["), self.ws, ir.join(value, self.sep(","), 0, None), self.ws, ir.Lit("]"))
            self.rules[ANY_VALUE] = ir.alt(scalars + [array, self.any_object()])
        return ir.Ref(ANY_VALUE)

    def any_object(self) -> ir.Node:
        """Any JSON object (members of any value)."""
        member = ir.seq(ir.Lex(types_.STRING), self.sep(":"), self.any_value())
        return ir.seq(ir.Lit("{"), self.ws, ir.join(member, self.sep(","), 0, None), self.ws, ir.Lit("}"))

    def object(self, flat: dict, pointer: str, refs: tuple) -> ir.Node | None:
        return object_grammar(self, flat, pointer, refs)


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
