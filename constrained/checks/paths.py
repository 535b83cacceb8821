"""The checked-path table: an automaton over JSON paths that the runtime checks (``checks/tracker.py``)
follow as the text arrives, built by the JSON Schema front end (``json_schema/unique.py``)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class UniquePaths:
    """An automaton over JSON paths (picklable: it crosses the compile-worker boundary).

    A state is a value position. ``unique[s]``: an array opening there is a ``uniqueItems``
    array of scalars; ``zero[s]``: its items are integers only (an item ``0`` cannot be
    extended into another value). ``items[s]``: the state of an array's items; ``keys[s]``: a
    member's raw key bytes (quotes included) -> state, else ``other[s]``. -1: no unique array
    can occur below.
    """

    start: int
    unique: tuple[bool, ...]
    zero: tuple[bool, ...]
    items: tuple[int, ...]
    keys: tuple[dict[bytes, int], ...]
    other: tuple[int, ...]
    members: tuple[int, ...] = ()  # per state: an object opening there is checked by specs[i] (-1: not)
    specs: tuple = ()  # json_schema.objects.MemberSpec of the runtime-checked objects
    # per state: a string opening there has its length counted by the matcher, (minLength,
    # maxLength or None), else None; empty when nothing is counted (``unique``)
    strings: tuple = ()
    counted: frozenset = frozenset()  # the counted lexemes the grammar no longer bounds
