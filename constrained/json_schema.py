"""JSON Schema -> regex front end (drafts 4 .. 2020-12), our own code.

The regex is *sound*: every string it matches is the serialisation of an instance that validates
against the original schema. Where a keyword cannot be expressed exactly it is enforced by
restriction (an under-approximation, listed in docs/constrained.md) or, when even that is
impossible, it raises ``ConstraintError`` naming the keyword and its JSON pointer (strict mode) or
is relaxed and recorded in ``SchemaRegex.relaxed`` (``strict=False``; the output is then validated
after generation).

Compilation walks the schema with ``_Compiler.value``: resolve ``$ref``/``allOf``/``if``/``not``
(``json_schema_not``) into one canonical node (``flatten``), split ``anyOf``/``oneOf`` into alternatives, then emit the
regex of each allowed type. ``None`` stands for an unsatisfiable sub-schema; ``$ref`` handling
(aliases, cycles, endless recursion) is in ``json_schema_refs``.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field
from typing import Any

import jsonschema
from radixlm.constrained import json_schema_not as negation
from radixlm.constrained import json_schema_refs as refs_
from radixlm.constrained import json_schema_types as types_
from radixlm.constrained.errors import ConstraintError, RegexTooLarge
from radixlm.constrained.json_schema_normalize import canonical, clean, merge
from radixlm.constrained.json_schema_object import object_regex
from radixlm.constrained.json_schema_one_of import one_of_branches
from radixlm.constrained.json_schema_refs import MAX_REF_CHAIN
from radixlm.constrained.json_schema_switch import discriminator, flatten_else, is_switch_case, switch_schemas
from radixlm.constrained.pattern_chars import escape_literal

DEFAULT_MAX_REF_DEPTH = 3
DEFAULT_ANY_DEPTH = 1
MAX_REGEX_CHARS = 250_000  # a few seconds of outlines-core compilation on a 32k vocabulary
# When the full regex is over MAX_REGEX_CHARS, optional members are dropped from objects nested
# deeper than these levels, trying each in turn (a restriction; see docs/constrained.md).
OPTIONAL_DEPTHS = (6, 5, 4, 3, 2, 1, 0)
MAX_NESTING = 40  # nested schema levels on one path (keeps Python's recursion well in bounds)


@dataclass
class SchemaRegex:
    """The regex for a schema and the keywords relaxed to get it (``strict=False`` only)."""

    regex: str
    relaxed: list[str] = field(default_factory=list)
    optional_depth: int | None = None  # objects deeper than this had their optional members dropped
    max_ref_depth: int | None = None  # the recursion depth used (lowered for large schemas)


def schema_to_regex(
    schema: dict | bool,
    whitespace_pattern: str | None = None,
    strict: bool = True,
    max_ref_depth: int = DEFAULT_MAX_REF_DEPTH,
    any_depth: int = DEFAULT_ANY_DEPTH,
    max_regex_chars: int | None = None,
) -> SchemaRegex:
    """Compile ``schema`` to a regex over its serialisations (compact JSON unless
    ``whitespace_pattern`` is given). Raises ``ConstraintError`` on unsupported or unsatisfiable
    schemas. A regex over ``max_regex_chars`` (default ``MAX_REGEX_CHARS``) is rebuilt with the
    size-budget restrictions (``SchemaRegex.max_ref_depth``/``optional_depth`` say which)."""
    too_large: RegexTooLarge | None = None
    attempts = [(max_ref_depth, None)]
    while attempts:
        ref_depth, depth = attempts.pop(0)
        comp = _Compiler(schema, whitespace_pattern, strict, ref_depth, any_depth, depth)
        comp.max_chars = max_regex_chars or MAX_REGEX_CHARS
        try:
            rx = comp.value(schema, "#", ())
        except RegexTooLarge as e:
            if too_large is None:  # over budget: recursion expands less, then deep optionals go
                too_large = e
                fewer = list(range(max_ref_depth - 1, 0, -1)) if comp.recursive else []
                attempts = [(r, None) for r in fewer] + [(1 if fewer else ref_depth, d) for d in OPTIONAL_DEPTHS]
            continue
        if rx is None:
            raise _unsatisfiable(comp, schema, whitespace_pattern, strict, any_depth)
        return SchemaRegex(rx, comp.relaxed, depth, ref_depth)
    assert too_large is not None
    raise too_large


def _unsatisfiable(comp: _Compiler, schema: Any, ws: str | None, strict: bool, any_depth: int) -> ConstraintError:
    """Why ``schema`` has no instance: recursion that never ends (when the $refs left unexpanded,
    read as any value, make it satisfiable), or plain unsatisfiability."""
    if comp.cut is not None:
        again = _Compiler(schema, ws, strict, comp.max_ref_depth, any_depth, comp.optional_depth, lenient_cuts=True)
        again.max_chars = comp.max_chars
        try:
            endless = again.value(schema, "#", ()) is not None
        except ConstraintError as e:  # too large still means satisfiable
            endless = isinstance(e, RegexTooLarge)
        if endless:
            return refs_.no_finite_instance(comp.cut, comp.max_ref_depth, MAX_REF_CHAIN)
    return ConstraintError("schema is unsatisfiable", "#")


def any_json_regex(depth: int, ws: str = "") -> str:
    """Regex of any JSON value nested at most ``depth`` containers deep."""
    return _Compiler(True, ws or None, True, 0, depth).any_value(depth)


class _Compiler:
    def __init__(self, root: Any, ws: str | None, strict: bool, max_ref_depth: int, any_depth: int,
                 optional_depth: int | None = None, lenient_cuts: bool = False):
        self.root = root
        self.ws = f"({ws})" if ws else ""
        self.strict = strict
        self.max_ref_depth = max_ref_depth
        self.any_depth = any_depth
        self.optional_depth = optional_depth
        self.object_depth = 0  # objects open on the current path
        self.recursive = False  # some $ref was expanded inside itself
        self.cut: tuple[str, str, bool] | None = None  # first $ref not expanded: (pointer, ref, repeated)
        self.lenient_cuts = lenient_cuts  # a $ref not expanded is any value (diagnosis only)
        self.ref_sites: dict[tuple, str] = {}  # refs on a path -> where its last ref was expanded
        self.max_chars = MAX_REGEX_CHARS  # the size budget (schema_to_regex's max_regex_chars)
        self.relaxed: list[str] = []
        self._memo: dict[tuple, str | None] = {}
        self._keep: list[Any] = []  # keeps memoised nodes alive so their ids stay unique
        self._depth = 0
        cls = jsonschema.validators.validator_for(root if isinstance(root, dict) else {})
        self._validator = cls(root if isinstance(root, (dict, bool)) else {},
                              format_checker=cls.FORMAT_CHECKER)

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
                return ({"_sources": [True]} if self.lenient_cuts else None), refs
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
    def value(self, node: Any, pointer: str, refs: tuple) -> str | None:
        # A regex depends on the object depth only up to where optional members are dropped.
        depth_key = 0 if self.optional_depth is None else min(self.object_depth, self.optional_depth + 1)
        key = (id(node), refs, depth_key)
        self._keep.append(node)
        if key in self._memo:  # siblings referencing one definition share its regex
            return self._memo[key]
        if self._depth >= MAX_NESTING:
            raise ConstraintError(f"schema nests deeper than {MAX_NESTING} levels", pointer)
        self._depth += 1
        try:
            flat, refs_after = self.flatten(node, pointer, refs)
            rx = None if flat is None else self.value_flat(flat, pointer, refs_after)
            if rx is None and isinstance(node, dict) and _forces_if(node):  # if+then impossible
                flat, refs_after = flatten_else(self, node, pointer, refs)
                rx = None if flat is None else self.value_flat(flat, pointer, refs_after)
        finally:
            self._depth -= 1
        if rx is not None:
            self.check_size(len(rx), pointer)
        self._memo[key] = rx
        return rx

    def check_size(self, chars: int, pointer: str) -> None:
        """Fail early (before memory runs out) when a regex grows past the limit."""
        if chars > self.max_chars:
            raise RegexTooLarge(f"schema expands to a regex of more than {self.max_chars} characters; "
                                  "even when generating only the required members of nested objects; "
                                  "lower max_ref_depth or simplify the schema", pointer)

    def value_flat(self, flat: dict, pointer: str, refs: tuple) -> str | None:
        if len(flat) == 1:  # only _sources: an unconstrained value, nested a bounded depth
            return self.any_value(self.any_depth)
        for key in ("anyOf", "oneOf"):
            if key in flat:
                return self.alternatives(flat, key, pointer, refs)
        if "enum" in flat:
            return self.enum(flat)
        negation.check_pending(self, flat)
        types = types_.types_of(flat)
        alts = [negation.typed(self, t, flat, pointer, refs) for t in types]
        return _alt([a for a in alts if a is not None])

    def alternatives(self, flat: dict, key: str, pointer: str, refs: tuple) -> str | None:
        rest = {k: v for k, v in flat.items() if k != key}
        branches = []
        for i, sub in enumerate(flat[key]):
            sub_flat, sub_refs = self.flatten(sub, f"{pointer}/{key}/{i}", refs)
            if sub_flat is not None:
                branches.append((merge(rest, sub_flat, pointer), sub_refs))
        if key == "oneOf":
            branches = one_of_branches(self, branches, pointer)
        alts = [self.value_flat(b, pointer, r) for b, r in branches]
        return _alt([a for a in alts if a is not None])

    def enum(self, flat: dict) -> str | None:
        seen, alts = set(), []
        for v in flat["enum"]:
            key = canonical(v)
            if key not in seen and self.is_valid(flat["_sources"], v):
                seen.add(key)
                alts.append(escape_literal(json.dumps(v, ensure_ascii=False, separators=(",", ":"))))
        return _alt(sorted(alts, key=len, reverse=True))  # leftmost-first: "12" before "1"

    @functools.cache  # noqa: B019 - the compiler lives for one schema
    def any_value(self, depth: int) -> str:
        scalars = [types_.NULL, types_.BOOLEAN, types_.NUMBER, types_.STRING]
        if depth <= 0:
            return _alt(scalars)
        inner, ws = self.any_value(depth - 1), self.ws
        arr = rf"\[{ws}({inner}({ws},{ws}{inner})*)?{ws}\]"
        member = rf"{types_.STRING}{ws}:{ws}{inner}"
        obj = rf"\{{{ws}({member}({ws},{ws}{member})*)?{ws}\}}"
        return _alt(scalars + [arr, obj])

    def object(self, flat: dict, pointer: str, refs: tuple) -> str | None:
        self.object_depth += 1
        try:
            return object_regex(self, flat, pointer, refs)
        finally:
            self.object_depth -= 1

    def drops_optional(self) -> bool:
        """Whether objects at the current depth generate required members only."""
        return self.optional_depth is not None and self.object_depth > self.optional_depth


def _forces_if(node: dict) -> bool:
    """Whether ``node``'s ``if`` falls under the general rule: ``if`` and ``then`` both enforced
    (sound whatever ``else`` says; a documented restriction). Discriminator ``if``s become switch
    cases instead, and a node with its own enum/const is checked against the raw node exactly."""
    return "if" in node and "enum" not in node and "const" not in node and discriminator(node["if"]) is None


def _alt(alts: list[str]) -> str | None:
    alts = list(dict.fromkeys(alts))
    if not alts:
        return None
    return alts[0] if len(alts) == 1 else "(" + "|".join(alts) + ")"
