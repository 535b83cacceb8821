"""Member names: ``propertyNames``, and the keys that are none of some words (extra members'
keys, ``not {enum}`` over strings: ``complement_key``).

``propertyNames`` for the JSON Schema front end.

Every member name must validate against the ``propertyNames`` schema. Named properties whose
name fails it are dropped (an unsatisfiable schema if one is required). When the names schema
has an ``enum``/``const``, the valid names form a finite set: each becomes an optional named
property (value schema from ``patternProperties``/``additionalProperties``) and no other member
is generated. Otherwise extra members use keys generated from the names schema itself, provided
no named property could also match it (keys then never collide); else extras are not generated
(a restriction).

``resolve_some_key`` enforces the members a ``not`` asks for (``complement``): some member name
must fail a ``propertyNames`` schema, or match a pattern; a checked witness name becomes required.

Key complements: Keys that are none of some words: the keys of an object's extra members (never a named one)
and of ``not {enum}`` over strings.
"""

from __future__ import annotations

import json
import re
from typing import Any

from radixlm.constrained.ir import builder as ir
from radixlm.constrained.json_schema.normalize import Context, schemas_for_key
from radixlm.constrained.pattern.ecma import PLAIN_CHAR
from radixlm.constrained.pattern.regex_text import escape_literal
from radixlm.constrained.pattern.samples import samples

_TRIE_CHARS = 48  # complement_key: up to this many characters of names, a regex form is kept too


def complement_key(words: set, nonempty: bool, pointer: str = "#") -> ir.Node:
    """A JSON string of plain characters that is none of ``words``, as the lexeme algebra (plain
    string ``&~`` the words).

    The algebra, not a trie regex of the complement, because llguidance's first mask inside the
    string is far cheaper over it (tens of µs against over a millisecond at 152k tokens,
    ``bench_extra_keys.py``), and many words never write a huge regex. While the words are small the trie rides along as
    the node's ``as_regex``, so a grammar that must become one regex (``Grammar.to_regex``)
    still can; ``pointer`` names the schema node in its error past that."""
    plain = [w for w in words if all(0x20 <= ord(c) and c not in '"\\' for c in w)]
    body = f'"{PLAIN_CHAR}{"+" if nonempty else "*"}"'
    if not plain:
        return ir.Lex(body)
    names = "|".join(escape_literal(json.dumps(w, ensure_ascii=False)) for w in sorted(plain))
    small = sum(len(w) for w in plain) <= _TRIE_CHARS
    return ir.LexOp("and", (body, ir.LexOp("not", (f"({names})",))), pointer,
                    as_regex=complement_string(words, nonempty) if small else None)


def complement_string(words: set, nonempty: bool) -> str:
    """A JSON string (quotes included) of plain characters that is none of ``words``."""
    trie: dict = {}
    for w in words:
        if all(0x20 <= ord(c) and c not in '"\\' for c in w):  # others never collide
            node = trie
            for c in w:
                node = node.setdefault(c, {})
            node[""] = {}
    return '"' + _complement_node(trie, root=True, nonempty=nonempty) + '"'


def _complement_node(node: dict, root: bool, nonempty: bool) -> str:
    children = sorted(c for c in node if c)
    cls = "".join("\\" + c if c in "\\]^-[" else c for c in children)
    other = f'[^"\\\\\\x00-\\x1f{cls}]{PLAIN_CHAR}*'
    alts = [other] + [f"{escape_literal(c)}{_complement_node(node[c], False, False)}" for c in children]
    body = alts[0] if len(alts) == 1 else "(" + "|".join(alts) + ")"
    may_end = "" not in node and not (root and nonempty)
    return f"({body})?" if may_end else body


def apply_property_names(ctx: Context, flat: dict, pointer: str,
                         refs: tuple) -> tuple[dict | None, tuple[str, bool] | None]:
    """(object node with ``propertyNames`` folded in, (regex of extra member keys, whether the
    empty name is excluded) or None when extras keep their usual keys). The node is None when
    nothing is valid."""
    names_schema = flat["propertyNames"]
    where = f"{pointer}/propertyNames"
    rest = {k: v for k, v in flat.items() if k != "propertyNames"}
    props = dict(rest.get("properties", {}))
    required = list(rest.get("required", []))
    for name in list(props) + [r for r in required if r not in props]:
        if not ctx.is_valid([names_schema], name):
            if name in required:
                return None, None
            props.pop(name, None)
    rest["properties"] = props
    names_flat, _ = ctx.flatten(names_schema, where, refs)
    if names_flat is None:  # no name is valid: only the empty object
        return (None, None) if required else (_closed(rest, {}), None)
    if "enum" in names_flat:
        return _enumerated(ctx, rest, names_flat["enum"], names_schema), None
    key_rx = ctx.value({"allOf": [names_schema, {"type": "string"}]}, where, refs)
    taken = set(props) | set(required) | set(rest.get("dependentRequired", {})) | set(rest.get("dependentSchemas", {}))
    if key_rx is None or any(ctx.is_valid([names_schema], n) for n in taken):
        return _closed(rest, props), None  # keys could collide with named/trigger ones: no extras
    return rest, (key_rx, not ctx.is_valid([names_schema], ""))


def _enumerated(ctx: Context, node: dict, values: list, names_schema: Any) -> dict:
    props = dict(node["properties"])
    for v in values:
        if not isinstance(v, str) or v in props or not ctx.is_valid([names_schema], v):
            continue
        subs = schemas_for_key(node, v)
        if subs is None or (not subs and "additionalProperties" not in node
                            and not node.get("patternProperties")):
            continue  # forbidden, or an unspecified additionalProperties: not generated
        props[v] = True if not subs else subs[0] if len(subs) == 1 else {"allOf": subs}
    return _closed(node, props)


def _closed(node: dict, props: dict) -> dict:
    """``node`` with exactly ``props`` as its possible members."""
    return dict(node, properties=props, patternProperties={}, additionalProperties=False)


MAX_WITNESSES = 4  # candidate nodes tried per object with _some_key entries
_GENERIC = ("a", "0", "x", "_", "")


def resolve_some_key(ctx: Context, flat: dict, pointer: str) -> list[dict]:
    """Object nodes that satisfy every ``_some_key`` entry of ``flat`` (``complement``: "some
    member exists whose name fails ``propertyNames``", or "whose name matches ``p`` and whose
    value fails the pattern's schema") with one required member each: a witness name, checked
    exactly, that the node allows. A restriction (other names would do too), exact when one
    name is possible. In order of preference; empty when no candidate name works."""
    nodes = [{k: v for k, v in flat.items() if k != "_some_key"}]
    for entry in flat["_some_key"]:
        found = []
        for node in nodes:
            for name in _candidates(ctx, node, entry):
                with_member = _with_member(node, name, entry) if _names_ok(ctx, node, entry, name) else None
                if with_member is not None:
                    found.append(with_member)
                if len(found) >= MAX_WITNESSES:
                    break
        nodes = found[:MAX_WITNESSES]
    return nodes


def _candidates(ctx: Context, node: dict, entry: tuple) -> list[str]:
    """Names to try: the node's own names, the entry's samples, and both glued together."""
    own = list(node.get("required", [])) + list(node.get("properties", {}))
    if entry[0] == "pattern":
        wanted = samples(entry[1])
    else:
        names_flat, _ = ctx.flatten(entry[1], entry[2], ())
        wanted = [v for _, v in (names_flat or {}).get("_not_values", []) if isinstance(v, str)]
        wanted += [p for pat in (names_flat or {}).get("_patterns", []) for p in samples(pat)]
    shapes = [s for pat in node.get("patternProperties", {}) for s in samples(pat)]
    glued = [a + b for a in wanted for b in shapes] + [b + a for a in wanted for b in shapes]
    return list(dict.fromkeys(own + wanted + glued + shapes + list(_GENERIC)))


def _names_ok(ctx: Context, node: dict, entry: tuple, name: str) -> bool:
    """``name`` satisfies the entry and the node's ``propertyNames``."""
    if entry[0] == "pattern":
        if re.search(entry[1], name) is None:
            return False
    elif ctx.is_valid([entry[1]], name):
        return False
    if "propertyNames" in node and not ctx.is_valid([node["propertyNames"]], name):
        return False
    return name not in node.get("dependentSchemas", {})


def _with_member(node: dict, name: str, entry: tuple) -> dict | None:
    """``node`` with ``name`` required, its value also satisfying the entry's value schema; None
    when the node forbids the member."""
    required = list(dict.fromkeys(node.get("required", []) + [name]))
    value = entry[2] if entry[0] == "pattern" else True
    if node.get("maxProperties") is not None and len(required) >= node["maxProperties"]:
        return _exactly(node, required, name, value)
    if schemas_for_key(node, name) is None:
        return None
    if value is True:
        return dict(node, required=required)
    props = node.get("properties", {})
    if name in props:
        base = props[name]
    elif any(re.search(p, name) for p in node.get("patternProperties", {})):
        base = True  # the pattern schemas apply to named members too
    else:
        base = node.get("additionalProperties", True)
    if base is False:
        return None
    merged = value if base is True else {"allOf": [base, value]}
    return dict(node, required=required, properties=dict(props, **{name: merged}))


def _exactly(node: dict, required: list[str], name: str, value: Any) -> dict | None:
    """``node`` whose members are exactly ``required`` (``maxProperties`` allows no others), each
    value checked against the schemas every raw source gives its name. Exact where the merged
    ``patternProperties`` are not (``normalize.merge`` gives a pattern the other side's
    ``additionalProperties`` too, also for names the other side's patterns match)."""
    props = {}
    for n in required:
        subs = [node["properties"][n]] if n in node.get("properties", {}) else _source_schemas(node["_sources"], n)
        if subs is None or any(s is False for s in subs):
            return None
        subs = [s for s in subs if s is not True] + ([value] if n == name and value is not True else [])
        props[n] = True if not subs else subs[0] if len(subs) == 1 else {"allOf": subs}
    return dict(node, properties=props, required=required, patternProperties={}, additionalProperties=False)


def _source_schemas(sources: list, name: str) -> list | None:
    """The schemas a member ``name`` must satisfy under every raw source (None: forbidden)."""
    out = []
    for s in sources:
        if s is False:
            return None
        if isinstance(s, dict):
            subs = schemas_for_key(s, name)
            if subs is None:
                return None
            out += subs
    return out
