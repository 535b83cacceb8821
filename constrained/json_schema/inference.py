"""Type inference for a canonical schema node: the JSON types to generate, and the types whose
instances a node may accept (for disjointness proofs)."""

from __future__ import annotations

from radixlm.constrained.json_schema.normalize import ALL_TYPES

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
