"""Regex of JSON objects for one canonical schema node.

Named properties come first, in the order of ``properties``, each at most once; optional ones
may be left out. Extra members (``additionalProperties`` true or a schema, ``patternProperties``)
follow them, with keys that can never equal a named property. An unspecified
``additionalProperties`` generates no extra members (a restriction, like OpenAI's strict mode).
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from radixlm.constrained.json_schema_names import apply_property_names
from radixlm.constrained.json_schema_normalize import merge
from radixlm.constrained.json_schema_pattern import PLAIN_CHAR, is_universal, pattern_to_regex
from radixlm.constrained.pattern_chars import escape_literal

_NONEMPTY_UNIVERSAL = (".+", "^.+", "^.+$", ".+$")


def object_regex(comp, flat: dict, pointer: str, refs: tuple) -> str | None:
    required = list(flat.get("required", []))
    for name, sub in flat.get("dependentSchemas", {}).items():
        if name in required:  # the dependency holds for sure: merge it in and start over
            rest = dict(flat, dependentSchemas={k: v for k, v in flat["dependentSchemas"].items() if k != name})
            sub_flat, refs = comp.flatten(sub, f"{pointer}/dependentSchemas/{name}", refs)
            for where in (sub_flat or {}).get("_nots", []):  # a `not` only an enum could enforce
                comp.unsupported(where.rsplit("/", 1)[0], "not", "with this sub-schema is not supported")
            return None if sub_flat is None else object_regex(comp, merge(rest, sub_flat, pointer), pointer, refs)
    if not any(k in flat for k in ("properties", "patternProperties", "additionalProperties", "required")):
        flat = dict(flat, additionalProperties=True)  # a bare {"type": "object"}: any members
    key_rx = None
    if "propertyNames" in flat:
        flat, key_rx = apply_property_names(comp, flat, pointer, refs)
        if flat is None:
            return None
    pruned = comp.drops_optional()
    if pruned:  # the schema's regex is over budget: this deep, only required members
        flat = _required_only(flat)
    props = flat.get("properties", {})
    names = list(props) + [r for r in required if r not in props]
    dropped = set(flat.get("dependentSchemas", {}))  # optional triggers of a dependent schema
    required_set = _close_dependencies(flat.get("dependentRequired", {}), set(required), names, dropped)
    if required_set is None:
        return None
    members: list[tuple[str, bool]] = []
    for name in names:
        if name in dropped:
            continue
        rx = _member_value(comp, flat, name, pointer, refs)
        if rx is None:
            if name in required_set:
                return None
            continue
        key = escape_literal(json.dumps(name, ensure_ascii=False))
        members.append((f"{key}{comp.ws}:{comp.ws}{rx}", name in required_set))
    taken = set(names) | set(flat.get("dependentRequired", {})) | dropped
    enough = len(members) >= flat.get("minProperties", 0)
    extras = None if pruned and enough else _extras(comp, flat, taken, pointer, refs, key_rx)
    return _assemble(comp, flat, members, extras, pointer)


def _required_only(flat: dict) -> dict:
    """``flat`` with its optional named properties dropped, except the first ones that
    ``minProperties`` needs."""
    props, required = flat.get("properties", {}), set(flat.get("required", []))
    need = max(flat.get("minProperties", 0) - len(required), 0)
    optional = [n for n in props if n not in required][:need]
    return dict(flat, properties={n: s for n, s in props.items() if n in required or n in optional})


def _close_dependencies(deps: dict, required: set, names: list[str], dropped: set) -> set | None:
    """Required names after ``dependentRequired``: a present trigger makes its dependencies
    required; an optional trigger whose dependencies are not all named is dropped."""
    changed = True
    while changed:
        changed = False
        for trigger, needs in deps.items():
            if trigger in dropped or trigger not in names:
                continue
            if not all(n in names and n not in dropped for n in needs):
                if trigger in required:
                    return None
                dropped.add(trigger)
                changed = True
            elif not set(needs) <= required:
                required |= set(needs)
                changed = True
    return required


def _member_value(comp, flat: dict, name: str, pointer: str, refs: tuple) -> str | None:
    props = flat.get("properties", {})
    subs = [props[name]] if name in props else []
    subs += [s for p, s in flat.get("patternProperties", {}).items() if re.search(p, name)]
    if name not in props and len(subs) == 0:
        ap = flat.get("additionalProperties")
        if ap is False:
            return None
        if ap is not None:
            subs.append(ap)
    if any(s is False for s in subs):
        return None
    node: Any = True if not subs else subs[0] if len(subs) == 1 else {"allOf": subs}
    where = f"{pointer}/properties/{name}" if name in props else pointer
    return comp.value(node, where, refs)


def _extras(comp, flat: dict, taken: set, pointer: str, refs: tuple,
            key_rx: tuple[str, bool] | None) -> str | None:
    """One extra member (``key:value``) as a regex, or None when no extra member is allowed.
    ``key_rx`` (from ``propertyNames``: the key regex, whether it never matches the empty name)
    replaces the keys of unconstrained extras; keys of narrower patterns are then not generated."""
    patterns = flat.get("patternProperties", {})
    every = list(patterns.values())  # an extra value satisfies every pattern's schema: sound
    alts = []
    for pat, sub in patterns.items():
        where = f"{pointer}/patternProperties/{pat}"
        rx = comp.value({"allOf": every} if len(every) > 1 else sub, where, refs)
        if rx is None:
            continue
        if key_rx is not None:  # propertyNames keys: never empty when the pattern needs a character
            if not (is_universal(pat) or pat in _NONEMPTY_UNIVERSAL and key_rx[1]):
                continue
            key = key_rx[0]
        elif is_universal(pat) or pat in _NONEMPTY_UNIVERSAL:
            key = complement_string(taken, nonempty=pat in _NONEMPTY_UNIVERSAL)
        elif not any(re.search(pat, n) for n in taken):
            key = f'"{pattern_to_regex(pat, where, PLAIN_CHAR)}"'
        else:
            continue  # keys of this pattern could collide with named ones: not generated
        alts.append(f"{key}{comp.ws}:{comp.ws}{rx}")
    ap = flat.get("additionalProperties")
    if ap is not None and ap is not False:
        node: Any = {"allOf": [ap] + every} if every else ap
        rx = comp.value(node, f"{pointer}/additionalProperties", refs)
        if rx is not None:
            key = key_rx[0] if key_rx is not None else complement_string(taken, nonempty=False)
            alts.append(f"{key}{comp.ws}:{comp.ws}{rx}")
    if not alts:
        return None
    return alts[0] if len(alts) == 1 else "(" + "|".join(alts) + ")"


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


def _assemble(comp, flat: dict, members: list[tuple[str, bool]], extras: str | None,
              pointer: str) -> str | None:
    ws, sep = comp.ws, f"{comp.ws},{comp.ws}"
    min_p, max_p = flat.get("minProperties", 0), flat.get("maxProperties")
    n_req = sum(r for _, r in members)
    if max_p is not None:
        if n_req > max_p:
            return None
        while len(members) > max_p:  # drop optional members from the end: a restriction
            idx = max(i for i, (_, r) in enumerate(members) if not r)
            members.pop(idx)
    if min_p > 1:  # make optional members required in order: a restriction
        for i, (m, r) in enumerate(members):
            if n_req >= min_p:
                break
            if not r:
                members[i], n_req = (m, True), n_req + 1
    e_min = max(min_p - len(members), 0) if min_p > 1 else 0
    e_max = None if max_p is None else max_p - len(members)
    if extras is None or e_max == 0:
        extras = None
        if e_min > 0:
            return None
    items = list(members)
    if extras is not None:  # the extra members form one item after the named ones
        rep = f"{{{max(e_min - 1, 0)},{'' if e_max is None else e_max - 1}}}"
        items.append((f"{extras}({sep}{extras}){rep}", e_min > 0))
    if not items:
        return rf"\{{{ws}\}}" if min_p == 0 else None
    body = _sequence(items, sep)
    if not any(r for _, r in items) and min_p == 0:
        body = f"({body})?"
    comp.check_size(len(body), pointer)
    return rf"\{{{ws}{body}{ws}\}}"


def _sequence(items: list[tuple[str, bool]], sep: str) -> str:
    """Non-empty comma-joined subsequences of ``items`` (in order) that keep every required one.

    Linear in both regex text and automaton states (the DFA is not minimised, so the naive "pick
    the first member, then the optional rest" alternation would copy every tail). Up to the last
    required item, optional items are written ``(m,)?``; after it, ``(,m)?``. With no required
    item, see ``_all_optional``.
    """
    last = max((i for i, (_, r) in enumerate(items) if r), default=-1)
    if last < 0:
        return _all_optional([m for m, _ in items], sep)
    head = "".join(f"{m}{sep}" if r else f"({m}{sep})?" for m, r in items[:last])
    return head + items[last][0] + "".join(f"({sep}{m})?" for m, _ in items[last + 1:])


def _all_optional(ms: list[str], sep: str) -> str:
    """Non-empty subsequences of ``ms``: with blocks B_1..B_k, F_j = N(B_j) | P(B_j) F_{j+1}, where
    N(B) = the non-empty subsequences of B alone (the last member emitted is in B) and P(B) = any
    subsequence of B, each member followed by a comma. N(m_1..m_b) = m_1 | (m_1,)? N(m_2..m_b).
    Blocks of about sqrt(n) members keep the group nesting (a parser limit) near 4 sqrt(n)."""
    size = max(4, math.isqrt(len(ms) - 1) + 1)
    blocks = [ms[i:i + size] for i in range(0, len(ms), size)]
    out = ""
    for block in reversed(blocks):
        n_form = block[-1]
        for m in reversed(block[:-1]):
            n_form = f"({m}|({m}{sep})?{n_form})"
        if not out:
            out = n_form
            continue
        p_form = "".join(f"({m}{sep})?" for m in block)
        out = f"({n_form}|{p_form}{out})"
    return out
