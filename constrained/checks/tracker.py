r"""The runtime half of ``uniqueItems`` over free scalars: a byte-level JSON reader layered on the
matcher core, which no regular or context-free grammar can replace.

``UniqueTracker`` (one per compiled grammar, shared) reads the accepted bytes token by token and
follows the front end's path automaton (``checks.reader.UniquePaths``) to know when an
array that must be unique is open; there it collects the completed items (decoded: ``"\u0061"``
equals ``"a"``; numbers compared as numbers, ``1 == 1.0``; ``true`` is not ``1``, as
``jsonschema`` says). ``feed(state, token_bytes)`` returns the next state, or None when the token
completes a duplicate item, or leaves an item open whose every completion is one (a literal
already written, or an integer ``0``). States are immutable tuples, so the matcher keeps one per
accepted token (``rollback`` pops them, ``copy`` shares them); ``masks.duplicate_items`` removes the same
tokens from the mask.

Strings at the positions ``UniquePaths.strings`` names have their length counted
(``checks.tracker``): the count rides in the state's last field while such a string is open, and
``feed`` refuses a token that writes past ``maxLength`` or closes before ``minLength``.
``feed(..., lengths=False)`` reads the same but refuses nothing for lengths: the runtime member
check feeds that way, so what it learns of a state holds whatever the count (its memo leaves
the count out).

Outside strings the reader treats only ASCII whitespace as whitespace
(``unique.plain_whitespace`` admits only whitespace patterns within it); any other
unexpected byte rejects the token (the grammar never allows one).

Members: The runtime check of an object's members (``json_schema/objects.MemberSpec``): which
key may come next, whether ``}`` or another member may, as ``UniqueTracker`` reads the text.

An object's state is the frozenset of its decoded keys so far. A key is admitted when it is new
and the members still required after it (the required ones and, transitively, the needs of the
triggers present) fit under ``maxProperties``: so the object can always be finished and no
step's mask is ever empty because of the check. Results are cached per (spec, keys): objects
repeat the same few states.

A path whose objects are checked together (``json_schema/unique.MemberUnion``, ``alts``
their specs) admits a key when some branch still fits the keys (``fits``), and ``}`` or another
member when that branch's check allows it.

String lengths: How the matcher counts a JSON string's length as its bytes arrive: in code points of the
decoded string, as ``minLength``/``maxLength`` measure it (``json_schema.unique``).

A character counts at its first byte: a UTF-8 lead byte or ASCII byte, or the backslash of an
escape (``\n`` and ``\u0061`` are one character each; the grammar's string lexeme admits no
surrogate escapes, so a ``\u`` escape is always one code point). ``esc`` is where a read stops
inside an escape: 0 outside one, -1 after its backslash, 1-4 the ``\u`` hex digits still due.
The tracker (``checks.tracker``) and the vocabulary tables (``masks.string_lengths``) both read
through ``read_counted``, so the mask and ``accept_token`` count alike.

Forced text under the runtime checks (``forced_with_checks``, ``required_keys``): the core's forced
bytes cut before a byte the checks refuse, then extended by the keys a checked object forces (its
linear grammar leaves the core unaware that only one key, or ``"`` rather than ``}``, may come).
"""

from __future__ import annotations

import bisect
import functools
import json
import re
from typing import Any

from radixlm.constrained.checks.reader import (
    ERROR,
    G_AFTER,
    G_COLON,
    G_DONE,
    G_INKEY,
    G_KEY,
    G_LIT,
    G_NUM,
    G_STR,
    G_VAL,
    LEAVE,
    LITERALS,
    NUM_CHARS,
    STR_SKIP,
    U_LIT,
    U_NUM,
    U_VAL,
    WS,
    ArrayFrame,
    CheckedObject,
    ObjectFrame,
    ReaderState,
    UniqueArray,
    UniquePaths,
    array_run,
    dead_open,
    holds_a_set,
    is_checked,
    item_key,
)
from radixlm.constrained.vocab import LazyTables

_PLAIN = re.compile(rb'[^"\\]+')
TAILS = bytes(range(0x80, 0xC0))  # UTF-8 continuation bytes: their character counted already


def read_counted(data: bytes, i: int, esc: int, count: int) -> tuple[int, int, int, bool]:
    """Read string content from ``data[i]``: ``(esc, count, i, closed)``, stopping past the
    closing quote (``closed``) or at the end of ``data``."""
    n = len(data)
    while i < n:
        if esc:
            if esc == -1:
                esc = 4 if data[i] == 0x75 else 0  # \u: four hex digits follow
            else:
                esc -= 1
            i += 1
            continue
        m = _PLAIN.match(data, i)
        if m is not None:
            run = m.group()
            count += len(run.translate(None, TAILS))
            i = m.end()
            continue
        if data[i] == 0x22:
            return 0, count, i + 1, True
        count += 1  # a backslash: one escaped character
        esc, i = -1, i + 1
    return esc, count, i, False


def chars_until_close(data: bytes, esc: int) -> tuple[int, bool]:
    """``(characters, closed)`` of a token's bytes read as string content from ``esc``: the
    characters before its closing quote, or all of them when it does not close."""
    _, count, _, closed = read_counted(data, 0, esc, 0)
    return count, closed


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


class UniqueTracker:
    """Follows the accepted bytes through a grammar's ``UniquePaths`` (shared, stateless).

    A state is a ``ReaderState`` (``checks/reader.py``): the open containers (``ArrayFrame``,
    ``ObjectFrame``, ``CheckedObject`` for an object whose members are checked, ``UniqueArray``),
    the reader's mode, the path state of the next value, and the open key's or item's raw bytes.
    ``clean`` is the characters so far of an open counted string (``bounds``), else 0 outside
    unique arrays.
    """

    def __init__(self, paths: UniquePaths) -> None:
        self.paths = paths
        self.initial = ReaderState((), G_VAL, paths.start, b"", 0, 0)
        self.tables = LazyTables()  # the mask filters' per-tracker memos (``masks``)

    def bounds(self, state: tuple) -> tuple[int, int | None] | None:
        """``(minLength, maxLength)`` of the counted string open in ``state``, else None."""
        strings = self.paths.strings
        if state.mode != G_STR or not strings or state.vpos < 0:
            return None
        return strings[state.vpos]

    def in_unique(self, state: tuple) -> bool:
        """Whether the innermost container is a unique array (where masks need the check)."""
        return state.mode >= U_VAL

    def feed(self, state: tuple, data: bytes, lengths: bool = True) -> tuple | None:
        """The state after ``data`` (one token's bytes), or None when they complete a duplicate
        item (or end on an item that can only become one), are not JSON the reader follows, or
        (``lengths``) break a counted string's bounds."""
        frames, mode, vpos, buf0, esc, clean = state  # all of ``ReaderState``, in order (hot path)
        buf, i, n = bytearray(buf0), 0, len(data)
        while i < n:
            if mode >= U_VAL:
                seen, zero = frames[-1].seen, frames[-1].zero
                mode, esc, clean, i, event = array_run(mode, buf, esc, clean, data, i)
                if event is None:
                    break
                if event is ERROR:
                    return None
                if event is LEAVE:
                    frames = frames[:-1]
                    mode = G_AFTER if frames else G_DONE
                    continue
                key = item_key(*event)
                if key in seen:
                    return None
                frames = frames[:-1] + (UniqueArray("u", seen | {key}, zero),)
                continue
            out = self._general(frames, mode, vpos, buf, esc, clean if mode == G_STR else 0, data, i, lengths)
            if out is None:
                return None
            frames, mode, vpos, esc, clean, i = out
        if mode in (U_LIT, U_NUM) and dead_open(mode, bytes(buf), frames[-1].seen, frames[-1].zero):
            return None
        if mode == G_INKEY and is_checked(frames[-1]):  # an open key that can only be refused
            spec = self.paths.specs[self.paths.members[frames[-1].pos]]
            if not prefix_alive(spec, frames[-1].seen, bytes(buf)):
                return None
        return ReaderState(frames, mode, vpos, bytes(buf), esc, clean)

    def _general(self, frames: tuple, mode: int, vpos: int, buf: bytearray, esc: int, count: int,
                 data: bytes, i: int, lengths: bool) -> tuple | None:
        """Read outside unique arrays until one opens or ``data`` ends: ``(frames, mode, vpos,
        esc, count, i)``, or None on bytes the reader does not follow (or that break a counted
        string's bounds, with ``lengths``)."""
        n = len(data)
        strings = self.paths.strings
        while i < n:
            if mode == G_STR and strings and vpos >= 0 and strings[vpos] is not None:
                lo, hi = strings[vpos]
                esc, count, i, closed = read_counted(data, i, esc, count)
                if lengths and ((hi is not None and count > hi) or (closed and count < lo)):
                    return None
                if closed:
                    mode, count = (G_AFTER if frames else G_DONE), 0
                continue
            if mode == G_STR or mode == G_INKEY:
                out = self._string(frames, mode, vpos, buf, esc, data, i)
                if out is None:
                    return None
                frames, mode, vpos, esc, i = out
                continue
            b = data[i]
            if mode == G_NUM or mode == G_LIT:
                if b in (NUM_CHARS if mode == G_NUM else b"truefalsn"):
                    i += 1
                else:
                    mode = G_AFTER if frames else G_DONE
                continue
            i += 1
            if b in WS:
                continue
            out = self._structure(frames, mode, vpos, buf, b)
            if out is None:
                return None
            frames, mode, vpos = out
            if mode == U_VAL:
                return frames, mode, vpos, 0, 0, i
        return frames, mode, vpos, esc, count, i

    def _string(self, frames: tuple, mode: int, vpos: int, buf: bytearray, esc: int,
                data: bytes, i: int) -> tuple:
        """One run of a string value or key (``G_STR``/``G_INKEY``): ``(frames, mode, vpos, esc,
        i)``, or None for a key its checked object does not admit. A key's bytes are kept when
        its object's state is live (``vpos`` >= 0 while it is read)."""
        keep = mode == G_INKEY and vpos >= 0
        if esc:  # the escaped byte (an escape's hex digits are never quotes)
            if keep:
                buf.append(data[i])
            return frames, mode, vpos, 0, i + 1
        m = STR_SKIP.match(data, i)
        if m is not None:
            if keep:
                buf += m.group()
            return frames, mode, vpos, esc, m.end()
        if data[i] == 0x5C:
            if keep:
                buf.append(0x5C)
            return frames, mode, vpos, -1, i + 1
        if mode == G_STR:
            return frames, (G_AFTER if frames else G_DONE), vpos, 0, i + 1
        pos, p = frames[-1].pos, self.paths  # the key is complete: its member's value position
        raw = bytes(buf) + b'"'
        if is_checked(frames[-1]):  # a checked object: the key must be admitted
            name = key_name(raw)
            seen = None if name is None else admit(p.specs[p.members[pos]], frames[-1].seen, name)
            if seen is None:
                return None
            frames = frames[:-1] + (CheckedObject("o", pos, seen),)
        vpos = self.key_vpos(pos, raw)
        del buf[:]  # read no more: states after the key then repeat across keys (mask memos)
        return frames, G_COLON, vpos, 0, i + 1

    def key_vpos(self, pos: int, raw: bytes) -> int:
        """The path state of the value after key ``raw`` (quotes included) of the object at
        path state ``pos``."""
        return self.paths.keys[pos].get(raw, self.paths.other[pos]) if pos >= 0 else -1

    def _members_allow(self, top: tuple, mode: int, b: int) -> bool:
        """Whether checked object ``top`` allows byte ``b`` (``}``, ``,``, a key's quote) now."""
        spec = self.paths.specs[self.paths.members[top.pos]]
        if b == 0x7D and mode in (G_AFTER, G_KEY):
            return can_close(spec, top.seen)
        if (b == 0x2C and mode == G_AFTER) or (b == 0x22 and mode == G_KEY):
            return can_add(spec, top.seen)
        return True

    def in_checked(self, state: tuple) -> bool:
        """Whether a runtime-checked object is open (where masks need the member check); an open
        unique array counts too (its items are read there)."""
        return any(holds_a_set(f) for f in state.frames)

    def _structure(self, frames: tuple, mode: int, vpos: int, buf: bytearray, b: int) -> tuple | None:
        """``(frames, mode, vpos)`` after a byte outside strings and scalars (mode ``U_VAL``: a
        unique array opened), or None when JSON allows no such byte here."""
        p = self.paths
        if mode == G_VAL:
            if b == 0x22:
                return frames, G_STR, vpos
            if b == 0x7B:
                if vpos >= 0 and p.members and p.members[vpos] >= 0:
                    return frames + (CheckedObject("o", vpos, frozenset()),), G_KEY, vpos
                return frames + (ObjectFrame("o", vpos),), G_KEY, vpos
            if b == 0x5B:
                if vpos >= 0 and p.unique[vpos]:
                    del buf[:]
                    return frames + (UniqueArray("u", frozenset(), p.zero[vpos]),), U_VAL, -1
                vpos = p.items[vpos] if vpos >= 0 else -1
                return frames + (ArrayFrame("a", vpos),), G_VAL, vpos
            if b == 0x2D or 0x30 <= b <= 0x39:
                return frames, G_NUM, vpos
            if b in LITERALS:
                return frames, G_LIT, vpos
            if b == 0x5D and frames and frames[-1].kind == "a":
                return frames[:-1], (G_AFTER if len(frames) > 1 else G_DONE), vpos
            return None
        if not frames:
            return None
        top = frames[-1]
        if is_checked(top) and not self._members_allow(top, mode, b):
            return None
        if mode == G_AFTER and b == 0x2C:
            return (frames, G_VAL, top.items) if top.kind == "a" else (frames, G_KEY, vpos)
        if mode in (G_AFTER, G_KEY) and b == (0x5D if top.kind == "a" else 0x7D):
            return frames[:-1], (G_AFTER if len(frames) > 1 else G_DONE), vpos
        if mode == G_KEY and b == 0x22:
            del buf[:]
            if top.pos >= 0:  # while the key is read, vpos is its object's state
                buf.append(b)
            return frames, G_INKEY, top.pos
        if mode == G_COLON and b == 0x3A:
            return frames, G_VAL, vpos
        return None


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
