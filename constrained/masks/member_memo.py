"""The runtime member check's memo (``masks.members``): per tracker, one entry per state holding
its candidates and what feeding each gave, so a repeated state feeds nothing.

Whether ``UniqueTracker.feed`` refuses a token depends only on the state and the token, and states
repeat (every token inside one string or number value, every value of a path). An entry keeps
the tokens it clears grouped by mask word (``cut``), so a repeated state costs a few vector
operations.

Memo keys (``memo_key``): an open key that can only become a fresh extra key is memoized once,
whatever its bytes so far. While a key is read the tracker keeps its bytes, so every open key of a random or unusual name is
a state of its own and its first mask feeds every candidate (the cost of the runtime member check
in a walk). Yet what ``UniqueTracker.feed`` refuses there depends on those bytes only through the
names the key could still become. When no name the check or the path table knows (named members,
keys already written, blocked names, the names ``dependentRequired`` mentions, in every branch of
a union, and the keys the path table files) starts with the key's text, every completion is a
fresh extra key: admitted or not alike, its value at the extras' path alike. Such states share one
memo entry, keyed with the bytes left out.

One exception keeps the sharing exact: a token can close the key and write another whole key of
the same object, which is refused only if it repeats the first one. Such a later key needs a ``,``
and two quotes after it, so the tokens with those (``masks.refusable_tokens``' ``live``: a few dozen of a
real vocabulary) are ``LIVE`` in a shared entry, fed on the concrete state every time. Any other
token's verdict cannot depend on the key's bytes: the key it closes is fresh whatever they are,
and a key it opens or a nested object's keys are read apart from it.

Shared verdicts: Whether ``UniqueTracker.feed`` refuses some bytes from a state, shared across states that differ
only in their checked objects' keys so far, for the runtime member check's tail verdicts (below).

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

Tail verdicts (``refusals``, ``refusal_list``): which of a step's candidate tokens ``UniqueTracker.feed`` refuses (with ``lengths=False``), for
the runtime member check's masks (``masks.members``).

Inside an open string value or key, the bytes before a token's closing quote lead to one state
(a value's, or a key's completed as a fresh extra one) or to one per name the check tells apart
(``known_names``), so the token's verdict is its tail's: what follows the quote, fed
once from the state the quote leads to. A step's candidates share a few dozen tails, so a new state
costs a feed per distinct tail, not a feed per token (``masks.refusable_tokens`` files where each token closes
a string, and its head and tail). A token that opens a string from outside one (``"`` where a value
or a key may start, ``,"`` after a member) is read the same way past its opening bytes. A tail is
fed through the shared verdicts above, which share verdicts between states that differ only in their
objects' keys so far. Fed whole instead:
- a key that may write a whole second key of the object after it (``masks.refusable_tokens``'
  ``may_write_a_key``): refused only if it repeats the first, whose name decides;
- a key spelled with an escape;
- anything else outside strings, or inside a ``\\u`` escape.
Inside a string value a token that does not close it is never refused (lengths are the string
masks' concern); inside a key, one that does not close it is refused only if the key can no longer
become one its object may take (``checks.tracker.prefix_alive``, read on the key's bytes after it).
"""

from __future__ import annotations

import bisect
import threading
from collections import OrderedDict
from typing import Any

import numpy as np
from radixlm.constrained.checks.reader import (
    G_AFTER,
    G_COLON,
    G_INKEY,
    G_KEY,
    G_STR,
    G_VAL,
    ReaderState,
    is_checked,
)
from radixlm.constrained.checks.tracker import (
    UniqueTracker,
    admit,
    can_add,
    can_close,
    extra_ok,
    key_name,
    open_keys,
    prefix_alive,
)
from radixlm.constrained.masks.refusable_tokens import may_write_a_key, quote_split_for, quote_then_more
from radixlm.constrained.vocab import TableSlot

MEMO_STATES = 2048  # per tracker: states remembered (each holds a byte per candidate)
UNKNOWN, KEPT, LIVE, REFUSED = 0, 1, 2, 3  # even: fed whenever the core allows it
memos = TableSlot("member_memo")  # per tracker: its ``Memo`` (``memos.clear()``: every tracker starts afresh)


class MemoEntry:
    """One state's candidates (``ids``: int64, sorted and unique; ``place``: their mask words and
    bits), what feeding each gave (``status``: int8), the tokens cleared whatever the core allows
    (``always``) and whether only ``KEPT`` candidates survive (``only``: an open key with no extra
    key).

    ``view`` is what a step reads, one snapshot replaced whole when verdicts come in, so readers
    take no lock: ``ids``, the candidates' mask words, their ``pending`` bits (a candidate's bit
    while it is ``UNKNOWN`` or ``LIVE``: fed when the core allows it; 0 once settled), which are
    ``LIVE`` (None when none is), and ``cut`` (the mask words and the bits to keep in them: without
    the refused tokens, or, if ``only``, just the ``KEPT`` ones). The pending bits are aligned
    with ``ids`` rather than gathered, so settling a few verdicts copies one array and clears
    their bits instead of re-indexing every candidate (a new state's first mask settles some)."""

    __slots__ = ("ids", "place", "status", "always", "only", "view", "lock")

    def __init__(self, ids: np.ndarray, place: tuple, status: np.ndarray, always: np.ndarray,
                 only: bool) -> None:
        self.ids, self.place, self.always, self.only = ids, place, always, only
        self.lock = threading.Lock()
        self.status = status
        word, bit = place
        if not status.any():  # all UNKNOWN: ``bit`` itself is pending (settling copies it first)
            self.view = (ids, word, bit, None, self._cut(status))
            return
        live = status == LIVE
        pending = np.where((status & 1) == 0, bit, np.uint32(0))
        self.view = (ids, word, pending, live if live.any() else None, self._cut(status))

    @classmethod
    def grown(cls, ids: np.ndarray, place: tuple, status: np.ndarray, always: list, at: np.ndarray,
              refused: list, live: np.ndarray | None) -> MemoEntry:
        """The entry of a state met a second time: ``status`` already holds its first visit's
        verdicts for the candidates at ``at`` (``refused``: the refused among them, token ids),
        ``live`` marks the ``LIVE`` ones (None: none). Built from those lists rather than by
        scanning every status: a few operations instead of a dozen, on caches left cold."""
        self = cls.__new__(cls)
        self.ids, self.place, self.status, self.only = ids, place, status, False
        self.always = unique_ids(always) if always else _EMPTY
        self.lock = threading.Lock()
        word, bit = place
        pending = bit.copy()
        pending[at] = 0
        self.view = (ids, word, pending, live, _cut_of(refused + always))
        return self

    def settle(self, at: np.ndarray, verdicts: np.ndarray) -> None:
        """Record what feeding candidates gave (``at``: their indices; ``verdicts``: ``KEPT`` or
        ``REFUSED`` each); a step that read the view before feeds them itself."""
        with self.lock:
            fresh = self.status[at] == UNKNOWN
            if not fresh.any():
                return
            at, verdicts = at[fresh], verdicts[fresh]
            status = self.status.copy()
            status[at] = verdicts
            ids, word, pending, live, cut = self.view
            pending = pending.copy()
            pending[at] = 0
            self.status = status
            if (verdicts == (KEPT if self.only else REFUSED)).any():  # else (mostly) the cut stands
                cut = self._cut(status)
            self.view = (ids, word, pending, live, cut)

    def _cut(self, status: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(words, bits to keep)``: every bit but the refused tokens' and ``always``'s, or (if
        ``only``) just the ``KEPT`` tokens' bits."""
        picked = self.ids[status == (KEPT if self.only else REFUSED)]  # sorted: ``ids`` are
        if self.only:
            return by_word(picked, ordered=True)
        if not len(picked) and not len(self.always):
            return _NO_CUT
        cut_word, cut_bit = (by_word(np.concatenate((picked, self.always))) if len(self.always)
                             else by_word(picked, ordered=True))
        return cut_word, ~cut_bit


_NO_CUT = (np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.uint32))
_EMPTY = _NO_CUT[0]  # never written to


def _cut_of(tokens: list) -> tuple[np.ndarray, np.ndarray]:
    """``(words, bits to keep)`` clearing the token ids ``tokens`` (a few), grouped by word."""
    if not tokens:
        return _NO_CUT
    words: dict[int, int] = {}
    for t in tokens:
        words[t >> 5] = words.get(t >> 5, 0) | (1 << (t & 31))
    order = sorted(words)
    return (np.array(order, dtype=np.int64),
            np.array([~words[w] & 0xFFFFFFFF for w in order], dtype=np.uint32))


def by_word(ids: np.ndarray, ordered: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """``(words, bits)``: the distinct mask words of ``ids`` and, per word, its tokens' bits
    (``ordered``: ``ids`` are already sorted int64 without repeats)."""
    ids = ids if ordered else unique_ids(ids)
    word = ids >> 5
    bit = np.uint32(1) << (ids & 31).astype(np.uint32)
    if not len(ids):
        return word, bit
    starts = np.flatnonzero(_first_of_runs(word))
    return word[starts], np.bitwise_or.reduceat(bit, starts)


def unique_ids(ids) -> np.ndarray:
    """``ids`` (a list or an array) as a sorted int64 array without repeats; ``np.unique``
    costs several times more on the few hundred ids of a step."""
    ids = np.sort(np.asarray(ids, dtype=np.int64))
    return ids[_first_of_runs(ids)]


def _first_of_runs(a: np.ndarray) -> np.ndarray:
    """Whether each element of the sorted ``a`` differs from the one before it."""
    first = np.empty(len(a), dtype=bool)
    first[:1] = True
    np.not_equal(a[1:], a[:-1], out=first[1:])
    return first


def sorted_member(ids: np.ndarray, among: np.ndarray) -> np.ndarray:
    """Whether each of ``ids`` is in ``among`` (both sorted int64 arrays): ``np.isin`` for few."""
    if not len(among):
        return np.zeros(len(ids), dtype=bool)
    at = np.minimum(np.searchsorted(among, ids), len(among) - 1)
    return among[at] == ids


class Memo:
    """A tracker's entries by state, least recently used first; bounded by ``MEMO_STATES``."""

    def __init__(self) -> None:
        self.entries: OrderedDict = OrderedDict()
        self.lock = threading.Lock()

    def get(self, state: tuple) -> MemoEntry | None:
        """The entry of ``state`` (marked recently used), or None. No lock: each of the two
        ``OrderedDict`` calls is atomic, and a ``put`` that drops the entry between them only
        loses its mark."""
        entry = self.entries.get(state)
        if entry is not None:
            try:
                self.entries.move_to_end(state)
            except KeyError:
                pass
        return entry

    def put(self, state: tuple, entry: MemoEntry) -> None:
        """File ``entry`` for ``state``, dropping the least recently used past the bound."""
        with self.lock:
            self.entries[state] = entry
            while len(self.entries) > MEMO_STATES:
                self.entries.popitem(last=False)


def memo_for(tracker: UniqueTracker) -> Memo:
    """The (created on first use) memo of ``tracker``."""
    return memos.of(tracker, Memo)


FRESH_KEY = b"\x00fresh"  # the left-out bytes: never a key's prefix (a key starts with a quote)
_NAMES = TableSlot("known_names")  # per tracker: (path state, checked) -> known_names


def memo_key(tracker: UniqueTracker, state: tuple) -> tuple[tuple, bool]:
    """``(key, shared)``: the state itself, or (``shared``) the state with an open key's bytes
    replaced by ``FRESH_KEY`` when the key can only become a fresh extra key."""
    frames, mode, prefix, esc = state.frames, state.mode, state.buf, state.esc
    if mode != G_INKEY or esc or not prefix or b"\\" in prefix or not frames:
        # an open counted string's length is no part of what the check feeds (it feeds with
        # ``lengths=False``): one entry for every count
        return (state._replace(clean=0) if state.clean and mode == G_STR else state), False
    top = frames[-1]
    if top.kind != "o" or top.pos < 0:
        return state, False
    if is_checked(top) and not extra_ok(tracker.paths.specs[tracker.paths.members[top.pos]], top.seen):
        return state, False  # only named keys may come: the key's bytes decide (``_key_only``)
    if known_prefix(tracker, top, prefix[1:]):
        return state, False
    return state._replace(buf=FRESH_KEY), True


def known_prefix(tracker: UniqueTracker, top: tuple, text: bytes) -> bool:
    """Whether a name the check or the path table tells apart from a fresh extra key in object
    frame ``top`` (``known_names``, or a key written in it) starts with ``text``."""
    names = known_names(tracker, top)
    i = bisect.bisect_left(names, text)
    if i < len(names) and names[i].startswith(text):
        return True
    return is_checked(top) and any(n.startswith(text) for n in written_names(top))


def written_names(top: tuple) -> frozenset[bytes]:
    """The keys written so far in the checked object frame ``top`` (UTF-8; cached per frame, as
    every mask in an open key asks)."""
    found = _written.get(top)
    if found is None:
        if len(_written) > 4096:  # bounded: frames differ by the keys written so far
            _written.clear()
        found = _written[top] = frozenset(n.encode("utf-8", "surrogatepass") for n in top.seen)
    return found


_written: dict[tuple, frozenset[bytes]] = {}


def known_names(tracker: UniqueTracker, top: tuple) -> list[bytes]:
    """Every name (UTF-8, sorted) whose identity the check or the path table tells apart from a
    fresh extra key in object frames like ``top`` (the object's and its path's; the keys written
    so far are ``written_names``); cached per tracker and object path."""
    return _known(tracker, top)[0]


def known_name_set(tracker: UniqueTracker, top: tuple) -> frozenset[bytes]:
    """``known_names`` as a set."""
    return _known(tracker, top)[1]


def _known(tracker: UniqueTracker, top: tuple) -> tuple[list[bytes], frozenset[bytes]]:
    """``known_names`` of frames like ``top``, sorted and as a set (cached per path: the keys
    written so far change with every member, and their names are few)."""
    cache = _NAMES.of(tracker, dict)
    checked = is_checked(top)
    found = cache.get((top.pos, checked))
    if found is None:
        names = {key_name(raw) for raw in tracker.paths.keys[top.pos]}
        if checked:
            spec = tracker.paths.specs[tracker.paths.members[top.pos]]
            for one in spec.alts or (spec,):  # a union's own fields are its branches'
                names |= set(one.keys.values()) | set(one.blocked) | set(one.required)
                for trigger, needs in one.needs.items():
                    names |= {trigger, *needs}
        ordered = sorted(n.encode("utf-8", "surrogatepass") for n in names if n is not None)
        found = cache[(top.pos, checked)] = (ordered, frozenset(ordered))
    return found


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


# outside strings: the bytes that open one, per reader mode (``,"`` after a member or an item)
_OPENERS = {G_VAL: b'"', G_KEY: b'"', G_AFTER: b',"'}
_NO_QUOTE = (-1, None, None, False, False)  # a token without a quote, read from inside a string


def refusals(tracker: UniqueTracker, vocab: Any, state: tuple, ids: np.ndarray) -> np.ndarray:
    """Whether ``tracker.feed(state, token, lengths=False)`` refuses each of ``ids`` (int64):
    bool, aligned with ``ids``."""
    return np.array(refusal_list(tracker, vocab, state, ids.tolist()), dtype=bool)


def refusal_list(tracker: UniqueTracker, vocab: Any, state: tuple, tokens: list[int]) -> list[bool]:
    """``refusals`` of the token ids ``tokens``, as a list. A step decides a few dozen at most,
    so this reads them as Python lists: a batch's numpy calls would cost more than its tokens."""
    if not tokens:
        return []
    table, split = vocab.token_bytes, quote_split_for(vocab)
    inside = _Inside.of(tracker, state)
    if inside is not None:
        reading = split.reading[1 if state.esc else 0]
        verdicts = [inside.decide(t, table, reading.get(t, _NO_QUOTE), 0) for t in tokens]
    else:
        verdicts = _past_opener(tracker, table, split, state, tokens)
    if None not in verdicts:
        return verdicts
    whole = FromState(tracker, state)
    return [whole.refused(table[t] or b"") if v is None else v for t, v in zip(tokens, verdicts, strict=True)]


def _past_opener(tracker: UniqueTracker, table: Any, split: Any, state: tuple, tokens: list[int]) -> list:
    """Verdicts of the tokens that open a string from ``state`` (outside one), decided past their
    opening bytes; None for the rest (fed whole)."""
    opener = _OPENERS.get(state.mode) if not state.esc else None
    out: list[bool | None] = [None] * len(tokens)
    if opener is None:
        return out
    reading, inside, inner = split.reading[opener], None, _UNSET
    for j, t in enumerate(tokens):
        read = reading.get(t)
        if read is None:
            continue
        if inner is _UNSET:
            inner = tracker.feed(state, opener, lengths=False)
            inside = _Inside.of(tracker, inner) if inner is not None else None
        if inner is None:
            out[j] = True  # the opening bytes are refused already
        elif inside is not None:
            out[j] = inside.decide(t, table, read, len(opener))
    return out


_UNSET = object()
_FRESH = object()  # a value string, or a key completed as a fresh extra one


class _Inside:
    """Decides tokens from a state inside an open string value or key (read from either escape
    state; a key only from the plain one, with a name of plain bytes so far): by the tail after
    the closing quote where the bytes before it cannot matter, else None (fed whole)."""

    def __init__(self, tracker: UniqueTracker, state: tuple) -> None:
        self.tracker, self.state, self.key = tracker, state, state.mode == G_INKEY
        top = state.frames[-1] if state.frames else ()
        known = self.key and top and top.kind == "o" and top.pos >= 0
        self.names = known_name_set(tracker, top) if known else frozenset()
        self.written = written_names(top) if known and is_checked(top) else frozenset()
        self.text = state.buf[1:]
        # a checked object's spec and keys: what an open key's bytes are checked against
        self.spec = (tracker.paths.specs[tracker.paths.members[top.pos]]
                     if known and is_checked(top) and state.vpos >= 0 else None)
        # the object's path state, where a key closed in it is read without a feed: a checked
        # object's with its spec, or an unchecked one's (which refuses no key)
        self.pos = top.pos if known and (self.spec is not None or not is_checked(top)) else None
        self.tails: dict[tuple, bool] = {}  # (name or _FRESH, tail) -> verdict
        self.closed: dict = {}  # name or _FRESH -> verdicts from past the closing quote
        self.named: dict[bytes, bool] = {}  # a completed key's name -> whether it is refused

    @classmethod
    def of(cls, tracker: UniqueTracker, state: tuple) -> _Inside | None:
        """A decider for ``state``, or None where tokens must be fed whole."""
        mode, esc = state.mode, state.esc
        if mode == G_STR and esc in (0, -1):
            return cls(tracker, state)
        if mode == G_INKEY and not esc and b"\\" not in state.buf:
            return cls(tracker, state)
        return None

    def decide(self, t: int, table: Any, read: tuple, skip: int) -> bool | None:
        """The verdict on token ``t`` read from this state past its first ``skip`` bytes (``read``:
        its ``masks.refusable_tokens`` reading from there), or None where it must be fed whole."""
        at, head, tail, plain, quiet = read
        if at == -1:  # the string stays open: a value's cannot be refused, a key's while it may go on
            return False if not self.key else self._open_key_refused((table[t] or b"")[skip:])
        if at < 0:
            return None
        which = _FRESH
        if self.key:  # the name decides where the quote leads: one state per known name
            if not plain:
                return None
            name = self.text + head
            if quiet and self.spec is not None:  # the key decides: no feed
                return self._key_refused(name)
            if name in self.names or name in self.written:
                which = name
        verdict = self.tails.get((which, tail))
        if verdict is None and self.key and self.pos is not None:
            verdict = self._after_key(name, tail)
            if verdict is not None:
                self.tails[(which, tail)] = verdict
        if verdict is None:
            closed = self.closed.get(which, _UNSET)
            if closed is _UNSET:  # a value's every quote, and a fresh key's, lead to one state
                state = self.tracker.feed(self.state, (table[t] or b"")[skip:skip + at + 1], lengths=False)
                closed = self.closed[which] = None if state is None else FromState(self.tracker, state)
            verdict = self.tails[(which, tail)] = closed is None or closed.refused(tail)
        return verdict

    def _after_key(self, name: bytes, tail: bytes) -> bool | None:
        """The verdict on closing the key as ``name`` and reading ``tail``, where found without
        a feed: the key refused, or the tail's verdict filed from another state whose objects
        differ only in what the tail cannot read (``masks.member_memo.after_key``); else None."""
        if self.spec is not None and self._key_refused(name):
            return True
        vpos = self.tracker.key_vpos(self.pos, b'"' + name + b'"')
        key = after_key(self.tracker, self.state.frames, vpos, tail)
        return None if key is None else lookup(self.tracker, key)

    def _key_refused(self, name: bytes) -> bool:
        """Whether the checked object refuses the key completed as ``name`` (raw bytes, no
        escape), as ``feed`` decides at its closing quote."""
        verdict = self.named.get(name)
        if verdict is None:
            decoded = key_name(b'"' + name + b'"')
            seen = self.state.frames[-1].seen
            verdict = self.named[name] = decoded is None or admit(self.spec, seen, decoded) is None
        return verdict

    def _open_key_refused(self, data: bytes) -> bool | None:
        """Whether ``data``, leaving the key open, leaves it a prefix of no key its object may take
        (as ``feed`` checks at a token's end), or None where the key's bytes are not kept."""
        if self.spec is None:
            top = self.state.frames[-1] if self.state.frames else ()
            return None if is_checked(top) else False  # an unchecked object refuses no key
        return not prefix_alive(self.spec, self.state.frames[-1].seen, self.state.buf + data)
