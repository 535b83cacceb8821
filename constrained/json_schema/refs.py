"""Local ``$ref`` resolution for the JSON-schema front end: pointers, alias chains and cycles.

A cycle of ``$ref`` (through ``allOf``/``if``/``then`` too) that comes back to the same instance
position with no object or array in between (``a -> b -> a``) never terminates validation, so the
schema is invalid (``cyclic_ref``). Recursion through a container is fine: the front end turns it
into a grammar rule (and reports a required self-reference, which has no finite instance).

A ``$ref`` whose target is itself only a ``$ref`` (an alias) is followed in a loop, so a chain
of a thousand aliases costs one expansion, not a thousand levels of recursion.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

from radixlm.constrained.errors import ConstraintError
from radixlm.constrained.json_schema.normalize import HANDLED, UNSUPPORTED

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
