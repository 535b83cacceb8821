"""Regexes of the JSON scalar types, strings and arrays for one canonical schema node, plus the
type inference and ``oneOf`` disjointness test the compiler needs."""

from __future__ import annotations

import math
import re

from .formats import FORMAT_REGEXES
from .int_range import INTEGER, integer_range_regex, number_range_regex
from .json_schema_normalize import ALL_TYPES, schemas_for_key
from .json_schema_pattern import PLAIN_CHAR, STRING_CHAR, pattern_to_regex, sre_parse

NULL = "null"
BOOLEAN = "(true|false)"
NUMBER = number_range_regex(None, False, None, False)
STRING = f'"{STRING_CHAR}*"'

# Large bounded repetitions make the automaton huge (one copy per count); bounds above these are
# lowered to them (never below the minimum): a documented restriction, still sound.
MAX_STRING_REPEAT = 100
MAX_ITEMS_REPEAT = 10

_KEYWORD_TYPES = {
    "object": ("properties", "required", "additionalProperties", "patternProperties",
               "minProperties", "maxProperties", "dependentRequired", "dependentSchemas"),
    "array": ("items", "prefixItems", "minItems", "maxItems", "uniqueItems"),
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


def typed(comp, t: str, flat: dict, pointer: str, refs: tuple) -> str | None:
    if t == "null":
        return NULL
    if t == "boolean":
        return BOOLEAN
    if t in ("integer", "number"):
        return _number(comp, t, flat, pointer)
    if t == "string":
        return _string(comp, flat, pointer)
    if t == "array":
        return _array(comp, flat, pointer, refs)
    return comp.object(flat, pointer, refs)


def _number(comp, t: str, flat: dict, pointer: str) -> str | None:
    mult = flat.get("multipleOf")
    if mult is not None and not (mult == 1 and t == "integer"):
        if mult == 1:
            t = "integer"
        else:
            comp.unsupported(pointer, "multipleOf", f"({mult}) is not supported")
    lo, lo_x = flat.get("minimum"), False
    hi, hi_x = flat.get("maximum"), False
    if "exclusiveMinimum" in flat and (lo is None or flat["exclusiveMinimum"] >= lo):
        lo, lo_x = flat["exclusiveMinimum"], True
    if "exclusiveMaximum" in flat and (hi is None or flat["exclusiveMaximum"] <= hi):
        hi, hi_x = flat["exclusiveMaximum"], True
    if t == "number":
        return number_range_regex(lo, lo_x, hi, hi_x)
    if lo is None and hi is None:
        return INTEGER
    ilo = None if lo is None else (math.floor(lo) + 1 if lo_x else math.ceil(lo))
    ihi = None if hi is None else (math.ceil(hi) - 1 if hi_x else math.floor(hi))
    return integer_range_regex(ilo, ihi)


def _width(body: str) -> tuple[int, int]:
    lo, hi = sre_parse.parse(body).getwidth()
    return lo, hi


def _string(comp, flat: dict, pointer: str) -> str | None:
    lo, hi = flat.get("minLength", 0), flat.get("maxLength")
    if hi is not None and hi < lo:
        return None
    constraints = [("pattern", p) for p in flat.get("_patterns", [])]
    constraints += [("format", f) for f in flat.get("_formats", [])]
    if len(constraints) > 1:
        comp.unsupported(pointer, constraints[1][0], "combined with another pattern/format is not supported")
    if not constraints:
        if hi is not None and hi > MAX_STRING_REPEAT:
            hi = max(lo, MAX_STRING_REPEAT)
        if not lo and hi is None:
            return STRING
        # Counted copies of the escape alternatives blow up the automaton: bounded strings use
        # characters that need no escape (a restriction; each is one code point, so exact).
        return f'"{PLAIN_CHAR}{{{lo},{"" if hi is None else hi}}}"'
    kind, value = constraints[0]
    if kind == "format":
        body, width_src = FORMAT_REGEXES[value], FORMAT_REGEXES[value]
    else:
        body, width_src = pattern_to_regex(value, pointer), value
    if lo or hi is not None:
        wlo, whi = _width(width_src) if kind == "format" or _anchored(value) else (0, 1 << 30)
        if wlo < lo or (hi is not None and whi > hi):
            comp.unsupported(pointer, "maxLength" if hi is not None else "minLength",
                             f"together with {kind} is not supported")
    return f'"({body})"'


def _anchored(pattern: str) -> bool:
    return pattern.startswith("^") and pattern.endswith("$") and not pattern.endswith("\\$")


def _array(comp, flat: dict, pointer: str, refs: tuple) -> str | None:
    lo, hi = flat.get("minItems", 0), flat.get("maxItems")
    if flat.get("uniqueItems"):
        if lo > 1:
            comp.unsupported(pointer, "uniqueItems", "with minItems > 1 is not supported")
        else:  # enforced by restriction: at most one item is always unique
            hi = 1 if hi is None else min(hi, 1)
    if hi is not None and hi < lo:
        return None
    if hi is not None and hi > MAX_ITEMS_REPEAT:
        hi = max(lo, MAX_ITEMS_REPEAT)
    prefix = []
    for i, sub in enumerate(flat.get("prefixItems", [])):
        rx = comp.value(sub, f"{pointer}/prefixItems/{i}", refs)
        if rx is None:
            break
        prefix.append(rx)
    items = flat.get("items", True)
    closed = len(prefix) < len(flat.get("prefixItems", [])) or items is False
    rest = None if closed else (comp.any_value(comp.any_depth) if items is True
                                else comp.value(items, f"{pointer}/items", refs))
    if hi is not None:
        prefix = prefix[:hi]
    if len(prefix) < lo and rest is None:
        return None
    ws, sep = comp.ws, f"{comp.ws},{comp.ws}"
    # Tail after all prefix items: the extra items, at least lo - len(prefix) of them.
    need = max(lo - len(prefix), 0)
    room = None if hi is None else hi - len(prefix)
    tail = ""
    if rest is not None and (room is None or room > 0):
        tail = f"({sep}{rest}){{{need},{'' if room is None else room}}}" if prefix else ""
    body = _nest(prefix, tail, lo, sep)
    if not prefix:
        if rest is None or room == 0:
            return rf"\[{ws}\]" if lo == 0 else None
        first_hi = "" if room is None else room - 1
        body = f"{rest}({sep}{rest}){{{max(need - 1, 0)},{first_hi}}}"
        if lo == 0:
            body = f"({body})?"
    return rf"\[{ws}{body}{ws}\]"


def _nest(prefix: list[str], tail: str, lo: int, sep: str) -> str:
    """prefix[0] (sep prefix[1] (... tail)?)? with the first ``lo`` items mandatory."""
    out = tail
    for i in range(len(prefix) - 1, -1, -1):
        lead = "" if i == 0 else sep
        out = f"{lead}{prefix[i]}{out}"
        if i >= lo:
            out = f"({out})?"
    return out


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
