"""Lexemes (regexes) of the JSON scalar types and strings for one canonical schema node (arrays:
``json_schema_array``, objects: ``json_schema_object``, both grammar structure), plus the type
inference and the disjointness tests ``oneOf`` and ``not`` need."""

from __future__ import annotations

import json
import math
import re

from radixlm.constrained.errors import ConstraintError
from radixlm.constrained.first_chars import strings_first_disjoint
from radixlm.constrained.formats import FORMAT_REGEXES
from radixlm.constrained.int_range import INTEGER, integer_range_regex, number_range_regex
from radixlm.constrained.json_schema_array import array_grammar
from radixlm.constrained.json_schema_normalize import ALL_TYPES, schemas_for_key
from radixlm.constrained.json_schema_pattern import (
    STRING_CHAR,
    emit_tokens,
    parse_pattern,
    search_tokens,
)
from radixlm.constrained.multiple_of import multiples_regex
from radixlm.constrained.pattern_bounds import narrow_to_length, within_length
from radixlm.constrained.pattern_chars import escape_literal, sre_parse

NULL = "null"
BOOLEAN = "(true|false)"
NUMBER = number_range_regex(None, False, None, False)
STRING = f'"{STRING_CHAR}*"'

MAX_STRING_LENGTH = 100_000  # minLength/maxLength past this raise (a lexer state per count)

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


def typed(comp, t: str, flat: dict, pointer: str, refs: tuple):
    """A scalar's regex (str), an array's or object's grammar node, or None (no instance)."""
    if t == "null":
        return NULL
    if t == "boolean":
        return BOOLEAN
    if t in ("integer", "number"):
        return _number(comp, t, flat, pointer)
    if t == "string":
        return _string(comp, flat, pointer)
    if t == "array":
        return array_grammar(comp, flat, pointer, refs)
    return comp.object(flat, pointer, refs)


def _number(comp, t: str, flat: dict, pointer: str) -> str | None:
    divisors = flat.get("multipleOf", [])
    for d in divisors:
        if isinstance(d, bool) or not isinstance(d, (int, float)) or not math.isfinite(d) or d <= 0:
            raise ConstraintError(f"multipleOf must be a number > 0, got {d!r}", pointer, "multipleOf")
    lo, lo_x = flat.get("minimum"), False
    hi, hi_x = flat.get("maximum"), False
    if "exclusiveMinimum" in flat and (lo is None or flat["exclusiveMinimum"] >= lo):
        lo, lo_x = flat["exclusiveMinimum"], True
    if "exclusiveMaximum" in flat and (hi is None or flat["exclusiveMaximum"] <= hi):
        hi, hi_x = flat["exclusiveMaximum"], True
    if divisors:
        return multiples_regex(divisors, t == "integer", lo, lo_x, hi, hi_x)
    if t == "number":
        return number_range_regex(lo, lo_x, hi, hi_x)
    if lo is None and hi is None:
        return INTEGER
    ilo = None if lo is None else (math.floor(lo) + 1 if lo_x else math.ceil(lo))
    ihi = None if hi is None else (math.ceil(hi) - 1 if hi_x else math.floor(hi))
    return integer_range_regex(ilo, ihi)


def _string(comp, flat: dict, pointer: str) -> str | None:
    lo, hi = flat.get("minLength", 0), flat.get("maxLength")
    if hi is not None and hi < lo:
        return None
    constraints = [("pattern", p) for p in flat.get("_patterns", [])]
    constraints += [("format", f) for f in flat.get("_formats", [])]
    if len(constraints) > 1:
        lit = _literal(dict(flat, type=["string"]))
        if lit is not None:  # ^lit$ with other patterns/formats: lit itself, checked exactly
            ok = lo <= len(lit) and (hi is None or len(lit) <= hi) and comp.is_valid(flat["_sources"], lit)
            return escape_literal(json.dumps(lit)) if ok else None
        comp.unsupported(pointer, constraints[1][0], "combined with another pattern/format is not supported")
    if not constraints:
        if max(lo, hi or 0) > MAX_STRING_LENGTH:
            raise ConstraintError(f"string length bounds above {MAX_STRING_LENGTH} are not supported",
                                  pointer, "maxLength" if (hi or 0) > MAX_STRING_LENGTH else "minLength")
        if not lo and hi is None:
            return STRING
        # Each STRING_CHAR is one code point (surrogate escapes are left out), so counting
        # them is exact, escapes included.
        return f'"{STRING_CHAR}{{{lo},{"" if hi is None else hi}}}"'
    kind, value = constraints[0]
    if kind == "format":  # formats are full-match regexes in a syntax sre_parse reads too
        body, alts = FORMAT_REGEXES[value], [(True, True, list(sre_parse.parse(FORMAT_REGEXES[value])))]
    else:
        alts = parse_pattern(value, pointer)
        body = emit_tokens(search_tokens(alts), pointer)
    if (lo or hi is not None) and not within_length(alts, lo, hi):
        # Narrow the pattern's repetitions until every match has an allowed length.
        tokens, keyword = narrow_to_length(alts, lo, hi, pointer)
        if tokens is None:
            comp.unsupported(pointer, keyword, f"cannot be met by narrowing the {kind}'s repetitions")
        else:
            body = emit_tokens(tokens, pointer)
    return f'"({body})"'


def disjoint(comp, a: dict, b: dict) -> bool:
    """True when no instance can satisfy both canonical nodes (a conservative proof)."""
    for x, y in ((a, b), (b, a)):
        if "enum" in x:
            return not any(comp.is_valid_loose(y["_sources"], v) for v in x["enum"])
    for x, y in ((a, b), (b, a)):
        lit = _literal(x)
        if lit is not None and not any(comp.is_valid_loose(y["_sources"], s) for s in (lit, lit + "\n")):
            return True
    ta, tb = _exact_types(a), _exact_types(b)
    if not ta & tb:
        return True
    if ta <= {"object"} or tb <= {"object"}:
        return _objects_disjoint(comp, a, b)
    return False


def _literal(flat: dict) -> str | None:
    """``lit`` when the node only admits strings matching ``^lit$`` (Python's ``$`` also matches
    before a final newline: the caller checks ``lit + "\n"`` too)."""
    if flat.get("type") != ["string"]:
        return None
    for pattern in flat.get("_patterns", []):
        m = re.fullmatch(r"\^([A-Za-z0-9_ :/-]*)\$", pattern)
        if m is not None:
            return m.group(1)
    return None


def _exact_types(flat: dict) -> set[str]:
    types = set(flat.get("type", ALL_TYPES))
    if "number" in types:
        types.add("integer")
    return types


def _objects_disjoint(comp, a: dict, b: dict) -> bool:
    for x, y in ((a, b), (b, a)):
        for name in x.get("required", []):
            ys = schemas_for_key(y, name)
            if ys is None:
                return True
            xs = schemas_for_key(x, name)
            if name in y.get("required", []) and xs and ys:
                fx, _ = comp.flatten({"allOf": xs}, "#", ())
                fy, _ = comp.flatten({"allOf": ys}, "#", ())
                if fx is None or fy is None or disjoint(comp, fx, fy):
                    return True
    return False



def generated_disjoint(comp, gen: dict, other: dict) -> bool:
    """True when no instance *we generate* for ``gen`` satisfies ``other`` (a conservative proof
    that uses our restrictions: only ``types_of`` types, no undeclared object members)."""
    if "enum" in gen or disjoint(comp, gen, other):
        return disjoint(comp, gen, other)  # enum: exactly the values we may generate
    if any(k in gen for k in ("anyOf", "oneOf")):
        return False  # the branches may generate other types than types_of says
    tg = _exact_types({"type": types_of(gen)})
    if not tg & _exact_types(other):
        return True
    if tg <= {"string"}:
        return strings_first_disjoint(comp, gen, other)
    if not tg <= {"object"}:
        return False
    return (_objects_disjoint(comp, gen, other)  # exact, for objects
            or any(never_generated(gen, n) for n in other.get("required", [])))


def never_generated(flat: dict, name: str) -> bool:
    """True when the objects we generate for ``flat`` never have the member ``name``."""
    if schemas_for_key(flat, name) is None or flat.get("properties", {}).get(name) is False:
        return True
    if any(k in flat for k in ("additionalProperties", "patternProperties", "dependentSchemas")):
        return False
    keyed = any(k in flat for k in ("properties", "required"))  # else a bare object: any members
    return keyed and name not in flat.get("properties", {}) and name not in flat.get("required", [])

