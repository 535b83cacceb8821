"""``oneOf`` for the JSON Schema front end: which branches to generate.

A generated value must satisfy exactly one branch. Branch i is generated only when no value we
generate for it satisfies another branch j (``generated_disjoint`` against j's own schema). To
make that provable, branches are first restricted: a branch never generates a member that another
branch requires and it leaves optional, and it always generates one member that another branch
forbids (``additionalProperties: false``) when it has such a member. Branches still unprovable
are dropped (a restriction); strict mode raises when none is left.
"""

from __future__ import annotations

from radixlm.constrained.json_schema.context import Context
from radixlm.constrained.json_schema.disjoint import generated_disjoint, never_generated
from radixlm.constrained.json_schema.inference import types_of
from radixlm.constrained.json_schema.normalize import schemas_for_key


def one_of_branches(ctx: Context, branches: list[tuple[dict, tuple]], pointer: str) -> list[tuple[dict, tuple]]:
    """The (canonical node, refs) branches of a ``oneOf`` to generate."""
    originals = [_explicit_extras(ctx, b) for b, _ in branches]
    flats = require_forbidden_by_others(exclude_required_of_others(originals))
    keep = [i for i in range(len(flats))
            if all(generated_disjoint(ctx, flats[i], originals[j])
                   for j in range(len(flats)) if j != i)]
    if branches and not keep:
        ctx.unsupported(pointer, "oneOf", "has branches that may overlap, so "
                         "'exactly one' cannot be guaranteed")
        keep = list(range(len(flats)))
    return [(flats[i], branches[i][1]) for i in keep]


def _explicit_extras(ctx: Context, flat: dict) -> dict:
    """``flat`` with JSON Schema's default ``additionalProperties: true`` written out when extra
    members are generated for it, so the proofs below see the members we may generate."""
    if not ctx.unspecified_extras or "additionalProperties" in flat or "object" not in types_of(flat):
        return flat
    out = dict(flat, additionalProperties=True)
    return out if types_of(out) == types_of(flat) else flat


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


def require_forbidden_by_others(branches: list[dict]) -> list[dict]:
    """For ``oneOf`` over objects: branch i always generates one of its optional properties that
    another branch forbids outright (a restriction), so no value of branch i satisfies that one."""
    out = []
    for i, b in enumerate(branches):
        if "enum" in b or "anyOf" in b or "oneOf" in b or types_of(b) != ["object"]:
            out.append(b)
            continue
        required = list(b.get("required", []))
        for j, other in enumerate(branches):
            if j == i or any(schemas_for_key(other, n) is None for n in required):
                continue  # already disjoint from this one through a required member
            if any(never_generated(b, n) for n in other.get("required", [])):
                continue  # ... or through one the other requires and this one never generates
            forbidden = [n for n, s in b.get("properties", {}).items()
                         if s is not False and n not in required and schemas_for_key(other, n) is None]
            if forbidden:
                required.append(forbidden[0])
        out.append(dict(b, required=required) if required != b.get("required", []) else b)
    return out
