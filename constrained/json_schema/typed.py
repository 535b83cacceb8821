"""The grammar of one JSON type's instances for a canonical schema node: scalars as regexes
(``scalars``), arrays and objects as grammar structure (``arrays``, ``objects``)."""

from __future__ import annotations

from radixlm.constrained.ir import builder as ir
from radixlm.constrained.json_schema import lexemes, scalars
from radixlm.constrained.json_schema.arrays import array_grammar
from radixlm.constrained.json_schema.context import Context
from radixlm.constrained.json_schema.objects import object_grammar


def typed(ctx: Context, t: str, flat: dict, pointer: str, refs: tuple) -> str | ir.Node | None:
    """A scalar's regex (str), an array's or object's grammar node, or None (no instance)."""
    if t == "null":
        return lexemes.NULL
    if t == "boolean":
        return lexemes.BOOLEAN
    if t in ("integer", "number"):
        return scalars.number(t, flat, pointer)
    if t == "string":
        return scalars.string(ctx, flat, pointer)
    if t == "array":
        return array_grammar(ctx, flat, pointer, refs)
    return object_grammar(ctx, flat, pointer, refs)
