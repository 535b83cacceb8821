"""Forced text under the runtime checks: the core's forced bytes cut before a byte the checks
refuse, then extended by the keys a checked object forces (its linear grammar leaves the core
unaware that only one key, or ``"`` rather than ``}``, may come)."""

from __future__ import annotations

from typing import Any

from radixlm.constrained.checks.reader import G_AFTER, G_INKEY, G_KEY, is_checked
from radixlm.constrained.checks.tracker import UniqueTracker, can_add, can_close, forced_key, missing

_ROUNDS = 16  # key extensions per call (each one may let the core force more)
_WS = b" \t\n\r"


def forced_with_checks(tracker: UniqueTracker, core: Any, vocab: Any, state: tuple, data: bytes) -> bytes:
    """``data`` (the core's forced bytes from ``state``) as far as the checks allow, plus what
    a checked object then forces."""
    out = bytearray()
    probe = None
    for _ in range(_ROUNDS):
        for i in range(len(data)):
            nxt = tracker.feed(state, data[i:i + 1])
            if nxt is None:
                return bytes(out + data[:i])
            state = nxt
        out += data
        if not tracker.paths.specs:
            return bytes(out)
        if probe is None:
            probe = core.deep_copy()
        if data and not _consume(probe, vocab, data):
            return bytes(out)
        data = _forced_key(tracker, probe, vocab, state)
        if not data:
            return bytes(out)
        if not _consume(probe, vocab, data):
            return bytes(out)
        more = probe.compute_ff_bytes()
        for i in range(len(data)):
            state = tracker.feed(state, data[i:i + 1])
            if state is None:
                return bytes(out)
        out += data
        data = more
    return bytes(out)


def _forced_key(tracker: UniqueTracker, probe: Any, vocab: Any, state: tuple) -> bytes:
    """The bytes a checked object forces at ``state`` (its key position or inside a key)."""
    frames, mode = state.frames, state.mode
    if not frames or not is_checked(frames[-1]) or mode not in (G_KEY, G_INKEY, G_AFTER):
        return b""
    top = frames[-1]
    spec = tracker.paths.specs[tracker.paths.members[top.pos]]
    if mode == G_AFTER:  # "," or "}": one of them may be refused
        if any(_accepts(probe, vocab, bytes([b])) for b in _WS):
            return b""
        close, add = can_close(spec, top.seen), can_add(spec, top.seen)
        return b"}" if close and not add else b"," if add and not close else b""
    if mode == G_KEY:
        if can_close(spec, top.seen) and _accepts(probe, vocab, b"}"):
            return b""
        if any(_accepts(probe, vocab, bytes([b])) for b in _WS):
            return b""
        return forced_key(spec, top.seen, b"")
    return forced_key(spec, top.seen, state.buf)


def required_keys(tracker: UniqueTracker, state: tuple) -> list[bytes]:
    """The raw keys (quotes included) the innermost checked object still needs before its ``}``,
    in schema order; empty outside a checked object."""
    frames = state.frames
    if not tracker.paths.specs or not frames or not is_checked(frames[-1]):
        return []
    top = frames[-1]
    spec = tracker.paths.specs[tracker.paths.members[top.pos]]
    need = missing(spec, top.seen)
    return [raw for raw, name in spec.keys.items() if name in need]


def _accepts(core: Any, vocab: Any, byte: bytes) -> bool:
    t = vocab.byte_tokens[byte[0]]
    return t >= 0 and core.validate_tokens([t]) == 1


def _consume(core: Any, vocab: Any, data: bytes) -> bool:
    ids = [vocab.byte_tokens[b] for b in data]
    return all(t >= 0 for t in ids) and core.try_consume_tokens(ids) == len(ids)
