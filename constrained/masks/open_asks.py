"""What a token read from a state may be refused for by the runtime member check's open objects
(``checks.members``), so a step's candidates can be narrowed to the tokens that hold such bytes
(``masks.refusable_tokens.MemberTokens.narrowed``): most states refuse nothing but a few tokens, and a new
state's first mask then decides a handful instead of hundreds.
"""

from __future__ import annotations

import functools
from typing import Any

from radixlm.constrained.checks.members import can_add, can_close, extra_ok, open_keys
from radixlm.constrained.checks.reader import G_INKEY, U_VAL, is_checked
from radixlm.constrained.checks.tracker import UniqueTracker
from radixlm.constrained.masks.refusable_tokens import ASK_ADD, ASK_CLOSE, ASK_ESCAPE, ASK_KEY
from radixlm.constrained.tables import TableSlot


def asks(tracker: UniqueTracker, state: tuple) -> int | None:
    """What a token read from ``state`` may be refused for by the open checked objects, as
    ``masks.refusable_tokens.ASK_*`` bits: a ``}`` where one of them may not close yet, a member where one
    may take no more, a key's name where one takes no extra key now, a key's escape where one
    names a key with an escape (beyond completing a key, which ``narrowed`` always reads). In an
    open key, the key it completes may change what its object allows next: with no
    ``maxProperties``, ``dependentRequired`` or union, only whether another member may come, and
    only when it may be the last named one of an object without extra keys. None: read every
    candidate (a unique array is open, whose items the check reads too)."""
    frames, mode = state.frames, state.mode
    if mode >= U_VAL:
        return None
    cache = _BY_FRAMES.of(tracker, dict)
    flags = cache.get(frames, _UNSET)
    if flags is _UNSET:  # the states of one member's key, colon, value and comma share frames
        if len(cache) > 4096:
            cache.clear()
        flags = cache[frames] = _frames_ask(tracker, frames)
    if flags is None:
        return None
    paths, top = tracker.paths, frames[-1] if frames else ()
    if mode == G_INKEY and is_checked(top):  # what the key it completes changes
        spec = paths.specs[paths.members[top.pos]]
        if spec.alts is not None or spec.max_p is not None or spec.needs:
            flags |= ASK_CLOSE | ASK_ADD | ASK_KEY
        elif not spec.extras and len(open_keys(spec, top.seen)) < 2:  # it may be the last one
            flags |= ASK_ADD
    return flags


def _frames_ask(tracker: UniqueTracker, frames: tuple) -> int | None:
    """``asks`` of the open objects ``frames`` alone (None: a unique array is open)."""
    flags, paths = 0, tracker.paths
    for frame in frames:
        if frame.kind == "u":
            return None
        if not is_checked(frame):
            continue
        spec, seen = paths.specs[paths.members[frame.pos]], frame.seen
        if not can_close(spec, seen):
            flags |= ASK_CLOSE
        if not can_add(spec, seen):
            flags |= ASK_ADD
        if not extra_ok(spec, seen):
            flags |= ASK_KEY
        if escaped_names(spec):  # extra keys are plain: only a named key may hold a backslash
            flags |= ASK_ESCAPE
    return flags


_UNSET = object()
_BY_FRAMES = TableSlot("open_asks")  # per tracker: frames -> flags


@functools.lru_cache(maxsize=4096)
def escaped_names(spec: Any) -> bool:
    """Whether a named key of ``spec`` (or of a branch of its union) is spelled with an escape."""
    return any(b"\\" in raw for one in (spec.alts or (spec,)) for raw in one.keys)
