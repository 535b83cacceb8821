"""``Context``: what the keyword modules of the front end may use of one compilation.

The compiler (``compiler.Compiler``) owns the walk: memo, open nodes, recursion rules, ``$ref``
bookkeeping. The keyword modules (arrays, objects, names, negation, ...) get only this: the
whitespace and separators, the recursive entry points ``value`` and ``flatten``, the shared rule
table, the strict/lenient policy and the exact ``jsonschema`` checks.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from radixlm.constrained.errors import ConstraintError
from radixlm.constrained.ir import builder as ir
from radixlm.constrained.json_schema.lexemes import BOOLEAN, NUMBER, STRING

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
    # only for consumers that run that check; rule name -> its restriction (unique_paths).
    unique_runtime: bool = False
    unique_arrays: dict[str, Any] = field(default_factory=dict)
    # objects whose members the matcher checks at runtime (objects._runtime_checked): rule name ->
    # its member_objects.MemberObject (unique_paths falls back to its grammar-level construction).
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
