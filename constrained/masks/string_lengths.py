"""The mask half of counted strings (``json_schema.unique``): clear the tokens that
``UniqueTracker.feed`` refuses for a counted string's length, without feeding the vocabulary.

The grammar gives a counted string the unbounded lexeme, so the core's mask allows any length;
this narrows it to what ``accept_token`` takes, exactly:

- Inside a counted string (``tracker.bounds``), a token's characters before its closing quote
  (or all of them) come from a per-vocabulary table for each escape state (``checks.tracker``):
  a token is refused when they pass ``maxLength``, or when it closes the string before
  ``minLength``. The cleared words for each (escape state, room left, characters still due) are
  cached, so a mask costs one vectorised AND.
- Elsewhere, a token with one quote opens a string after its prefix (``,"ab``, ``:"abc``): each
  distinct prefix is fed once per state (memo), and where it opens a counted string, the
  prefix's tokens with more characters after the quote than ``maxLength`` are cleared.
- Tokens with two quotes or more (``","``, ``""``, ``":"``: a few hundred in a 152k
  vocabulary) may close one string and open another: the ones the core allows are fed, and
  their verdicts filed per state (inside a value string, per the state its closing quote leads
  to). Memo keys are states as far as lengths go (``_projected``).
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
    G_DONE,
    G_INKEY,
    G_KEY,
    G_STR,
    G_VAL,
    OUTSIDE,
    U_STR,
    ObjectFrame,
    holds_a_set,
    is_checked,
)
from radixlm.constrained.checks.tracker import TAILS, UniqueTracker, chars_until_close, read_counted
from radixlm.constrained.masks.member_memo import FRESH_KEY
from radixlm.constrained.vocab import TableSlot

ESCAPES = (0, -1, 1, 2, 3, 4)  # string_count's escape states
_CACHE = 1024  # cached clears per vocabulary
_MEMO = 8192  # memoised states and verdicts per tracker
_WS = b" \t\n\r"
# the first bytes a one-quote token's prefix can have in a structural mode (b"": the quote itself)
_FIRST = {G_VAL: _WS + b"[{-0123456789tfn", G_AFTER: _WS + b",]}", G_KEY: _WS + b"}", G_COLON: _WS + b":",
          G_DONE: _WS}
_IN_STRING = (G_STR, G_INKEY, U_STR)  # a one-quote token's quote closes the string: it opens none
_NONE: frozenset = frozenset()
_UNSEEN = object()  # no closed state filed yet (None is a filed answer: the quote is refused)


class LengthTables:
    """Per-vocabulary tables (built once, shared by every grammar of the vocabulary)."""

    def __init__(self, vocab: Any) -> None:
        table = vocab.token_bytes
        self.words = vocab.mask_words
        self._table = table
        self._lock = threading.Lock()
        self._chars: dict[int, tuple[np.ndarray, np.ndarray, int]] = {}
        self._clears: OrderedDict = OrderedDict()
        self._prefixes: dict[int, list[bytes]] = {}
        groups: dict[bytes, list[tuple[int, int]]] = {}
        multi: list[int] = []
        for t, data in enumerate(table):
            if not data or 0x22 not in data:
                continue
            q = data.index(0x22)
            if data.count(0x22) > 1:
                multi.append(t)
            else:
                groups.setdefault(data[:q], []).append((chars_until_close(data[q + 1:], 0)[0], t))
        # a two-quote token's bytes after the quote that closes a string it starts inside (None:
        # it does not close one)
        self.tails = {t: _tail(table[t]) for t in multi}
        self.multi = np.array(multi, dtype=np.int64)
        self._multi_word, self._multi_bit = self.multi >> 5, (1 << (self.multi & 31)).astype(np.uint32)
        # prefix -> (after-quote characters, descending; their ids)
        self.groups = {p: tuple(np.array(col, dtype=np.int64) for col in zip(*sorted(m, reverse=True)))
                       for p, m in groups.items()}

    def chars(self, esc: int) -> tuple[np.ndarray, np.ndarray, int]:
        """``(characters, closes, most)`` of every token read as string content from ``esc``
        (every escape state's table is built on the first call, in one pass)."""
        if not self._chars:
            with self._lock:
                if not self._chars:
                    self._chars = _build_chars(self._table)
        return self._chars[esc]

    def keep_inside(self, esc: int, room: int | None, due: int) -> np.ndarray | None:
        """The words to AND into a mask inside a counted string with ``room`` characters left
        (None: no maximum) and ``due`` still needed before the closing quote; None: all pass."""
        counts, closes, most = self.chars(esc)
        room = None if room is None or room >= most else room
        due = max(0, min(due, most + 1))
        if room is None and not due:
            return None
        return self._cached(("in", esc, room, due), lambda: ~_pack(
            (counts > room if room is not None else False) | (closes & (counts < due)), self.words))

    def warm(self) -> None:
        """Build the tables, and the masks of every room left outside escapes with nothing due
        (a first request's masks inside a ``maxLength`` string then build none)."""
        most = self.chars(0)[2]
        for room in range(most):
            self.keep_inside(0, room, 0)

    def clear_opening(self, prefix: bytes, room: int) -> tuple[np.ndarray, np.ndarray] | None:
        """``(words, keep)`` that clear the tokens of ``prefix`` writing more than ``room``
        characters into the string their quote opens (None: none does)."""
        after, ids = self.groups[prefix]
        k = int(np.searchsorted(-after, -room, side="left"))  # after[:k] > room
        if not k:
            return None

        def build() -> tuple[np.ndarray, np.ndarray]:
            words = ids[:k] >> 5
            bits = np.zeros(self.words, dtype=np.uint32)
            np.bitwise_or.at(bits, words, (1 << (ids[:k] & 31)).astype(np.uint32))
            at = np.unique(words)
            return at, ~bits[at]

        return self._cached(("open", prefix, room), build)

    def prefixes(self, mode: int) -> list[bytes]:
        """The prefixes whose tokens can open a string in ``mode`` (all for modes without a
        first-byte rule): outside strings, only whitespace, structure and scalars' bytes
        (``checks.reader.OUTSIDE``) may come before a quote, so a prefix with any other byte opens none
        (cached per mode: a first mask would otherwise feed dozens of ``' $('``)."""
        found = self._prefixes.get(mode)
        if found is None:
            first = _FIRST.get(mode)
            found = self._prefixes[mode] = [p for p in self.groups if first is None or not p
                                            or (p[0] in first and not p.translate(None, OUTSIDE))]
        return found

    def allowed_multi(self, words: np.ndarray) -> list[int]:
        """The tokens with two quotes or more that ``words`` allows."""
        return self.multi[(words[self._multi_word] & self._multi_bit) != 0].tolist()

    def _cached(self, key: tuple, build: Any) -> Any:
        found = self._clears.get(key)
        if found is None:
            found = build()
            with self._lock:
                self._clears[key] = found
                while len(self._clears) > _CACHE:
                    self._clears.popitem(last=False)
        return found


def _build_chars(table: Any) -> dict[int, tuple[np.ndarray, np.ndarray, int]]:
    """``LengthTables.chars`` for every escape state. A token without a quote or a backslash
    reads the same from every state once the escape's tail (its first 1, or 5 after ``\\u``, or
    1-4 bytes) is skipped: its characters are its lead bytes past that tail."""
    n = len(table)
    counts = {e: np.zeros(n, dtype=np.int32) for e in ESCAPES}
    closes = {e: np.zeros(n, dtype=bool) for e in ESCAPES}
    for t, data in enumerate(table):
        if not data:
            continue
        if 0x22 in data or 0x5C in data:
            for e in ESCAPES:
                counts[e][t], closes[e][t] = chars_until_close(data, e)
            continue
        leads = [b & 0xC0 != 0x80 for b in data[:5]]
        total = len(data.translate(None, TAILS))
        for e in ESCAPES:
            skip = e if e > 0 else 0 if e == 0 else (5 if data[0] == 0x75 else 1)
            counts[e][t] = total - sum(leads[:skip])
    return {e: (counts[e], closes[e], int(counts[e].max(initial=0))) for e in ESCAPES}


def _tail(data: bytes) -> bytes | None:
    _, _, i, closed = read_counted(data, 0, 0, 0)
    return data[i:] if closed else None


def _pack(flags: np.ndarray, words: int) -> np.ndarray:
    """A token bitmask (uint32 words, bit ``i % 32`` of word ``i // 32``) of boolean ``flags``."""
    padded = np.zeros(words * 32, dtype=bool)
    padded[:len(flags)] = flags
    return np.packbits(padded, bitorder="little").view(np.uint32)


_TABLES = TableSlot("length_tables")  # per vocabulary
_MEMOS = TableSlot("length_memo")  # per tracker
_lock = threading.Lock()


def tables_for(vocab: Any) -> LengthTables:
    """The (created on first use) length tables of ``vocab``."""
    return _TABLES.of(vocab, lambda: LengthTables(vocab))


def forbid_lengths(tracker: UniqueTracker, vocab: Any, state: tuple, words: np.ndarray) -> None:
    """Clear from ``words`` (the core's mask, uint32) every token ``tracker.feed`` refuses in
    ``state`` for a counted string's length."""
    tables = tables_for(vocab)
    bounds = tracker.bounds(state)
    memo = _memo_for(tracker)
    state = _projected(tracker, memo, state)
    if bounds is not None:
        lo, hi = bounds
        count, esc = state.clean, state.esc
        keep = tables.keep_inside(esc, None if hi is None else hi - count, lo - count)
        if keep is not None:
            words &= keep
        refuses = _tail_refuser(tracker, vocab, memo, state)
    else:
        for at, keep in _openings(tracker, tables, memo, state):
            words[at] &= keep
        # inside any other value string the first quote closes it whatever came before: one set
        # of verdicts per closed state serves every position of the string
        in_value = state.mode == G_STR
        refuses = (_tail_refuser if in_value else _whole_refuser)(tracker, vocab, memo, state)
    for t in tables.allowed_multi(words):
        if refuses(t):
            words[t >> 5] &= np.uint32(~(1 << (t & 31)) & 0xFFFFFFFF)


def _projected(tracker: UniqueTracker, memo: OrderedDict, state: tuple) -> tuple:
    """``state`` as far as lengths go: objects unchecked and unique arrays without their items
    (what the member and unique checks refuse, they clear themselves), and an open key that no
    named key starts with spelled ``FRESH_KEY`` (its member's value is the object's other one,
    whatever its name). States that differ only there share their memo entries."""
    frames, buf = state.frames, state.buf
    if any(holds_a_set(f) for f in frames):
        frames = tuple(ObjectFrame("o", f.pos) if is_checked(f) else f._replace(seen=_NONE) if holds_a_set(f)
                       else f for f in frames)
    if state.mode == G_INKEY and buf:
        pos = frames[-1].pos
        if pos < 0 or not _named_prefix(tracker, memo, pos, buf):
            buf = FRESH_KEY
    return state._replace(frames=frames, buf=buf)


def _named_prefix(tracker: UniqueTracker, memo: OrderedDict, pos: int, prefix: bytes) -> bool:
    """Whether a raw key the path table names at object state ``pos`` starts with ``prefix``."""
    names = memo.get(("names", pos))
    if names is None:
        names = sorted(tracker.paths.keys[pos])
        _remember(memo, ("names", pos), names)
    i = bisect.bisect_left(names, prefix)
    return i < len(names) and names[i].startswith(prefix)


def _tail_refuser(tracker: UniqueTracker, vocab: Any, memo: OrderedDict, state: tuple) -> Any:
    """Inside a value string: whether a two-quote token is refused for what follows its closing
    quote (verdicts filed per closed state, whatever came before; in a counted string the table
    checked the characters before the quote)."""
    table = vocab.token_bytes
    if state.esc:  # rare: inside an escape, feed whole
        return lambda t: tracker.feed(state, table[t]) is None
    closed = memo.get(("quote", state), _UNSEEN)
    if closed is _UNSEEN:
        closed = tracker.feed(state, b'"', lengths=False)
        _remember(memo, ("quote", state), closed)
    verdicts = _verdicts(memo, ("closed", closed))
    tails = tables_for(vocab).tails

    def refuses(t: int) -> bool:
        verdict = verdicts.get(t)
        if verdict is None:
            tail = tails[t]
            verdict = verdicts[t] = tail is not None and (closed is None or tracker.feed(closed, tail) is None)
        return verdict

    return refuses


def _whole_refuser(tracker: UniqueTracker, vocab: Any, memo: OrderedDict, state: tuple) -> Any:
    """Outside a counted string: whether a two-quote token is refused (verdicts per state)."""
    table, verdicts = vocab.token_bytes, _verdicts(memo, ("whole", state))

    def refuses(t: int) -> bool:
        verdict = verdicts.get(t)
        if verdict is None:
            verdict = verdicts[t] = tracker.feed(state, table[t]) is None
        return verdict

    return refuses


def _verdicts(memo: OrderedDict, key: tuple) -> dict:
    found = memo.get(key)
    if found is None:
        found = {}
        _remember(memo, key, found)
    return found


def _memo_for(tracker: UniqueTracker) -> OrderedDict:
    return _MEMOS.of(tracker, OrderedDict)


def _remember(memo: OrderedDict, key: Any, value: Any) -> None:
    with _lock:
        memo[key] = value
        while len(memo) > _MEMO:
            memo.popitem(last=False)


def _openings(tracker: UniqueTracker, tables: LengthTables, memo: OrderedDict, state: tuple) -> list:
    """The clears of the one-quote tokens whose quote opens a counted string from ``state``
    (memoised per tracker and state)."""
    if state.mode in _IN_STRING:
        return []
    found = memo.get(state)
    if found is None:
        found = []
        for prefix in tables.prefixes(state.mode):
            opened = tracker.feed(state, prefix + b'"', lengths=False)
            bounds = tracker.bounds(opened) if opened is not None else None
            if bounds is not None and bounds[1] is not None:
                clear = tables.clear_opening(prefix, bounds[1])
                if clear is not None:
                    found.append(clear)
        _remember(memo, state, found)
    return found
