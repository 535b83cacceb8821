"""The runtime check of an object's members (``json_schema/member_objects.MemberSpec``): which
key may come next, whether ``}`` or another member may, as ``UniqueTracker`` reads the text.

An object's state is the frozenset of its decoded keys so far. A key is admitted when it is new
and the members still required after it (the required ones and, transitively, the needs of the
triggers present) fit under ``maxProperties``: so the object can always be finished and no
step's mask is ever empty because of the check. Results are cached per (spec, keys): objects
repeat the same few states.

A path whose objects are checked together (``json_schema/member_union.MemberUnion``, ``alts``
their specs) admits a key when some branch still fits the keys (``fits``), and ``}`` or another
member when that branch's check allows it.
"""

from __future__ import annotations

import bisect
import functools
import json
import re
from typing import Any


@functools.lru_cache(maxsize=65536)
def missing(spec: Any, seen: frozenset) -> frozenset:
    """The names still required once ``seen`` are written (``required`` and the needs of every
    trigger present or required, transitively); for a union, those of the branch that fits with
    the fewest."""
    if spec.alts is not None:
        options = [missing(a, seen) for a in spec.alts if fits(a, seen)]
        return min(options, key=lambda m: (len(m), sorted(m))) if options else frozenset()
    need = set(spec.required)
    todo = list(need | seen)
    while todo:
        for m in spec.needs.get(todo.pop(), ()):
            if m not in need:
                need.add(m)
                todo.append(m)
    return frozenset(need - seen)


@functools.lru_cache(maxsize=65536)
def fits(spec: Any, seen: frozenset) -> bool:
    """Whether branch ``spec`` of a union can hold keys ``seen`` and still be finished."""
    if not all(n in spec.names or (spec.extras and n not in spec.blocked) for n in seen):
        return False
    return spec.max_p is None or len(seen) + len(missing(spec, seen)) <= spec.max_p


def admit(spec: Any, seen: frozenset, name: str) -> frozenset | None:
    """The object's keys after key ``name``, or None when it may not come now."""
    if name in seen or (name not in spec.names and not spec.extras):
        return None
    new = seen | {name}
    if spec.alts is not None:
        return new if any(fits(a, new) for a in spec.alts) else None
    if spec.max_p is not None and len(new) + len(missing(spec, new)) > spec.max_p:
        return None
    return new


def key_name(raw: bytes) -> str | None:
    """The decoded key of raw key bytes (quotes included), None if they do not decode."""
    try:
        if _PLAIN_KEY.fullmatch(raw):  # no escape (most keys): the bytes are the name, and
            # decoding them costs a third of ``json.loads``
            return raw[1:-1].decode("utf-8")
        return json.loads(raw.decode("utf-8"))
    except ValueError:  # UnicodeDecodeError included
        return None


_PLAIN_KEY = re.compile(rb'"[^"\\\x00-\x1f]*"')


@functools.lru_cache(maxsize=65536)
def can_close(spec: Any, seen: frozenset) -> bool:
    """Whether ``}`` may come now."""
    if spec.alts is not None:
        return any(fits(a, seen) and can_close(a, seen) for a in spec.alts)
    return len(seen) >= spec.min_p and not missing(spec, seen)


@functools.lru_cache(maxsize=65536)
def extra_ok(spec: Any, seen: frozenset) -> bool:
    """Whether an extra member (a key that is none of the named ones) may come now."""
    if spec.alts is not None:
        return any(fits(a, seen) and extra_ok(a, seen) for a in spec.alts)
    return spec.extras and (spec.max_p is None or len(seen) + 1 + len(missing(spec, seen)) <= spec.max_p)


@functools.lru_cache(maxsize=65536)
def open_keys(spec: Any, seen: frozenset) -> tuple[bytes, ...]:
    """The raw named keys that may come now."""
    return tuple(k for k, n in spec.keys.items() if admit(spec, seen, n) is not None)


def can_add(spec: Any, seen: frozenset) -> bool:
    """Whether another member may come now (``,`` or a first key)."""
    return extra_ok(spec, seen) or bool(open_keys(spec, seen))


def prefix_alive(spec: Any, seen: frozenset, prefix: bytes) -> bool:
    """Whether the open key ``prefix`` (raw, opening quote included) can still become a key
    that may come now: an extra one (plain characters go on into a fresh key), or a named one."""
    if extra_ok(spec, seen) and b"\\" not in prefix:
        return True
    keys = _sorted_open_keys(spec, seen)
    i = bisect.bisect_left(keys, prefix)  # the least key not below the prefix starts with it, if any
    return i < len(keys) and keys[i].startswith(prefix)


@functools.lru_cache(maxsize=65536)
def _sorted_open_keys(spec: Any, seen: frozenset) -> tuple[bytes, ...]:
    """``open_keys``, sorted (prefix lookups)."""
    return tuple(sorted(open_keys(spec, seen)))


def forced_key(spec: Any, seen: frozenset, prefix: bytes) -> bytes:
    """The bytes every key that may come now continues ``prefix`` (raw, from its opening quote;
    empty at a key's start) with, where no extra key may come (empty otherwise)."""
    if extra_ok(spec, seen):
        return b""
    keys = [k for k in open_keys(spec, seen) if k.startswith(prefix) and len(k) > len(prefix)]
    if not keys:
        return b""
    first, last = min(keys), max(keys)
    n = len(prefix)
    while n < len(first) and first[n] == last[n]:
        n += 1
    return first[len(prefix):n]
