"""Whether ``UniqueTracker.feed`` refuses some bytes from a state, shared across states that differ
only in their checked objects' keys so far, for the runtime member check (``masks.closing_tails``).

A new object state (one more member written) is a new state for the member check's memo, and its
first mask feeds a few dozen tails (``",`` ``"}`` ``":{"`` ...) through the tracker's Python, some
10 µs each with caches left cold by the core's mask. Yet the bytes that follow a closed value or
key read an object's keys only through what they allow next, unless they complete a key of that
object themselves. So a tail's verdict is filed per tracker under the state with each checked
object's keys replaced by what the bytes can learn of them (``_asks``, ``_signature``): nothing,
without a ``,`` or ``}``; whether it may close and take another member; or also which keys may
come, where the bytes open a key and go on with its name. Objects written in any order, and the
members of one object before and after each other, then share verdicts.

Exact when the bytes can read an object's keys no other way (``_shareable``):
- a key of an object already open is completed only after a ``,`` (two quotes after it:
  ``masks.refusable_tokens.may_write_a_key``) or from ``G_KEY`` (two quotes); a key opened inside the bytes
  after ``{`` belongs to a new object, whose keys start empty in every state alike;
- ``}``, ``,`` and a key's opening quote ask ``can_close`` and ``can_add``;
- a key left open at the end asks ``prefix_alive``: with an extra key allowed and no backslash, it
  is alive whatever the keys; else the named keys that may come decide (both in the signature);
- open keys (``G_INKEY``) are never shared: the bytes may complete them.
``vpos`` is left out after a value (``G_AFTER``) and before a key (``G_KEY``): it is overwritten
before it is read there (the next key, or the array's items).
"""

from __future__ import annotations

from radixlm.constrained.checks.members import can_add, can_close, extra_ok, open_keys
from radixlm.constrained.checks.reader import G_AFTER, G_COLON, G_INKEY, G_KEY, ReaderState, is_checked
from radixlm.constrained.checks.tracker import UniqueTracker
from radixlm.constrained.masks.refusable_tokens import may_write_a_key, quote_then_more
from radixlm.constrained.tables import TableSlot

CACHE_ENTRIES = 1 << 13  # per tracker: verdicts kept (cleared whole past the bound; some 2 MB)
_CACHES = TableSlot("shared_verdicts")  # per tracker: (verdicts, frame signatures)


class FromState:
    """Verdicts of bytes fed from one state: the state's shared keys are built once, for the
    few dozen bytes a step decides from it."""

    __slots__ = ("tracker", "state", "keys", "cache")

    def __init__(self, tracker: UniqueTracker, state: tuple) -> None:
        self.tracker, self.state = tracker, state
        self.keys: dict[int, tuple] = {}  # what the bytes ask (``_asks``) -> the shared state
        self.cache = _cache_of(tracker)

    def refused(self, data: bytes) -> bool:
        """``tracker.feed(state, data, lengths=False) is None``."""
        state = self.state
        if not _shareable(state, data):
            return self.tracker.feed(state, data, lengths=False) is None
        level = _asks(state.mode, data)
        key = self.keys.get(level)
        if key is None:
            key = self.keys[level] = _abstract(self.tracker, state, level, self.cache[1])
        verdicts = self.cache[0]
        verdict = verdicts.get((key, data))
        if verdict is None:
            verdict = self.tracker.feed(state, data, lengths=False) is None
            if len(verdicts) >= CACHE_ENTRIES:
                verdicts.clear()
            verdicts[(key, data)] = verdict
        return verdict


def after_key(tracker: UniqueTracker, frames: tuple, vpos: int, tail: bytes) -> tuple | None:
    """Where ``tail`` asks nothing of the open objects (``_asks``: no ``,`` or ``}``), the key its
    verdict is filed under when read right after a key that leaves ``frames`` open and ``vpos``
    as its value's path state (``G_COLON``), for ``lookup``: found without feeding the key.
    None where the tail asks more."""
    state = ReaderState(frames, G_COLON, vpos, b"", 0, 0)  # as ``UniqueTracker.feed`` leaves a key closed
    if _asks(G_COLON, tail) or not _shareable(state, tail):
        return None
    return _abstract(tracker, state, 0, _cache_of(tracker)[1]), tail


def lookup(tracker: UniqueTracker, key: tuple) -> bool | None:
    """The verdict filed under ``key`` (``after_key``), or None."""
    return _cache_of(tracker)[0].get(key)


def _asks(mode: int, data: bytes) -> int:
    """What ``data`` may ask of the objects open before it: nothing (0) without a ``,`` or ``}``
    and not from ``G_KEY``; whether they may close or take a member (1), which is all a key
    opened bare asks (``prefix_alive`` of a lone quote is ``can_add``); or also which keys (2)
    where it opens a key and goes on with a name."""
    comma = data.find(b",")
    if quote_then_more(data, comma) or (mode == G_KEY and quote_then_more(data, 0)):
        return 2
    return 1 if comma >= 0 or b"}" in data or mode == G_KEY else 0


def _shareable(state: tuple, data: bytes) -> bool:
    """Whether ``data`` from ``state`` can read a checked object's keys only through their
    signature (the module docstring's conditions)."""
    mode = state.mode
    if mode == G_INKEY or b"\\" in data or may_write_a_key(data):
        return False
    return mode != G_KEY or data.count(b'"') < 2


def _abstract(tracker: UniqueTracker, state: tuple, level: int, signatures: dict) -> tuple:
    """``state`` with each checked object's keys replaced by what bytes asking ``level``
    (``_asks``) can learn of them (``signatures``: the tracker's cache), and a dead ``vpos``
    dropped."""
    out = []
    for frame in state.frames:
        if is_checked(frame):
            sig = signatures.get((frame, level))
            if sig is None:
                if len(signatures) >= CACHE_ENTRIES:
                    signatures.clear()
                sig = signatures[(frame, level)] = _signature(tracker, frame, level)
            out.append(sig)
        else:
            out.append(frame)
    return state._replace(frames=tuple(out), vpos=-1 if state.mode in (G_AFTER, G_KEY) else state.vpos)


def _signature(tracker: UniqueTracker, frame: tuple, level: int) -> tuple:
    """What bytes asking ``level`` of a checked object can learn of its keys: nothing; whether
    ``}`` and another member may come; and whether an extra key may, or else the named keys
    that may."""
    pos, seen = frame.pos, frame.seen
    if not level:
        return "s", pos
    spec = tracker.paths.specs[tracker.paths.members[pos]]
    if level == 1:
        return "s", pos, can_close(spec, seen), can_add(spec, seen)
    extra = extra_ok(spec, seen)
    return "s", pos, can_close(spec, seen), can_add(spec, seen), extra, (None if extra else open_keys(spec, seen))


def _cache_of(tracker: UniqueTracker) -> tuple[dict, dict]:
    """The (created on first use) verdicts and frame signatures of ``tracker``."""
    return _CACHES.of(tracker, lambda: ({}, {}))
