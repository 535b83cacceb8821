"""Several runtime-checked objects at one path (``anyOf``/``oneOf`` branches, a ``$ref`` used in
two places): one check for all of them, where that is sound.

The matcher cannot tell which branch the grammar is parsing, so a path's objects are checked
together (``MemberUnion``): a key is admitted when some branch still fits the keys so far, ``}``
when some branch's check holds (``checks.members``). That is sound when, for every two branches i
and j (``separating_blocks``), the keys that satisfy j's check never parse under i's grammar, or any
instance i's grammar parses with keys satisfying j's check is an instance of j:

- j requires a key that i never generates (not one of i's members, and i takes no extra
  members, or the schema names the key in i without generating it): the keys differ;
- i and j are built from the same canonical node but for ``required`` (``allOf`` with an
  ``anyOf`` of ``required`` lists): their members' values are the same schemas, so i's grammar
  (sound) makes them valid for j, and j's check holds.

Where j's required keys are all keys that i takes as extra members, i stops generating one of them
(a restriction), and the first case holds. Otherwise the objects fall back to their grammar-level construction (``unique_paths``).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, eq=False)
class MemberUnion:
    """The objects one path may hold, checked together (picklable; ``checks.members`` reads it
    like a ``MemberSpec``): ``alts`` their specs, ``keys``/``extras`` the union of theirs."""

    alts: tuple

    @functools.cached_property
    def keys(self) -> dict[bytes, str]:
        """The named members' raw keys -> names, over every branch."""
        return {k: n for a in self.alts for k, n in a.keys.items()}

    @functools.cached_property
    def names(self) -> frozenset[str]:
        """The named members' names, over every branch."""
        return frozenset(self.keys.values())

    @functools.cached_property
    def extras(self) -> bool:
        """Whether some branch takes extra members."""
        return any(a.extras for a in self.alts)


def generates(spec: Any, name: str) -> bool:
    """Whether a key ``name`` can occur in the object of ``spec`` (a named member, or an extra
    one that the schema does not name)."""
    return name in spec.names or (spec.extras and name not in spec.blocked)


def separating_blocks(entries: list[tuple[Any, tuple]]) -> list[frozenset] | None:
    """The extra keys each of the objects ``entries`` ((spec, origin) each; origin ``(flat,
    refs)``) must not generate so that they can be checked together (see the module docstring;
    empty sets: they can be as they are), or None when they cannot be. A key is blocked in i
    where i would take, as an extra member, a key that j requires (a restriction)."""
    blocks: list[set] = [set() for _ in entries]
    for i, (a, origin_a) in enumerate(entries):
        for j, (b, origin_b) in enumerate(entries):
            if i == j or a.same_as == b.same_as:
                continue
            if any(not generates(a, n) or n in blocks[i] for n in b.required):
                continue  # b's check needs a key that a never parses
            if _same_but_required(origin_a, origin_b):
                continue
            extra = sorted(n for n in b.required if n not in a.names)
            if not extra:
                return None
            blocks[i].add(extra[0])
    return [frozenset(b) for b in blocks]


def _same_but_required(a: tuple, b: tuple) -> bool:
    """Whether two objects come from the same canonical node (and ``$ref`` context) but for
    their ``required`` lists."""
    if not a or not b or a[1] != b[1]:
        return False
    strip = lambda flat: {k: v for k, v in flat.items() if k not in ("required", "_sources")}  # noqa: E731
    return strip(a[0]) == strip(b[0])


def union_of(specs: list) -> Any:
    """One check for the specs (distinct by ``same_as``): the spec itself when there is one."""
    distinct = list({s.same_as: s for s in specs}.values())
    return distinct[0] if len(distinct) == 1 else MemberUnion(tuple(distinct))
