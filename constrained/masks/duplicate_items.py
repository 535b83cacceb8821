"""Masks for the runtime ``uniqueItems`` check: clear the tokens that ``UniqueTracker.feed``
would reject, without feeding 150k tokens per step.

The tokens are filed per vocabulary and reader mode once (``masks.duplicate_items``); a step then costs
a few lookups per item already written. A string's duplicates are the tokens whose bytes up to
the closing quote decode, after the open item's bytes, to an item already written (indexed by
decoded value per undecodable tail of the open item: an escape, a UTF-8 character or a
surrogate pair cut by the token boundary). The result equals ``feed`` on every token the core
allows (the reader follows every text the grammar allows).

Tables: Per-vocabulary token tables for the runtime ``uniqueItems`` mask (``masks.duplicate_items``).

Per vocabulary and per *start mode* of the in-array reader (expecting an item, after one, inside
a string, after a backslash, inside a number, inside a literal), each token is read once, lazily,
with the same reader as ``accept_token`` (``checks.reader.array_run``) and filed by what it does:
nothing (it cannot complete an item), not JSON there, one event (the bytes it adds to the open
item up to the item's end, the whole item it writes, an item it leaves open that may be dead),
several events (``plans``: their items, evaluated per step), or leaving the array before a
``[`` (``multi``: fed exactly, per step). The candidates are selected vectorised over the
tokens' first bytes, so a table costs tens of milliseconds at 152k tokens.
"""

from __future__ import annotations

import bisect
import json
import math
import re
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import numpy as np
from radixlm.constrained.checks.reader import (
    ERROR,
    LEAVE,
    LITERALS,
    NUM_CHARS,
    U_AFTER,
    U_CON,
    U_LIT,
    U_NUM,
    U_STR,
    U_VAL,
    WS,
    ZERO_KEY,
    array_run,
    dead_open,
    item_key,
)
from radixlm.constrained.checks.tracker import UniqueTracker
from radixlm.constrained.vocab import TableSlot

_NONE, _INVALID, _MULTI = "none", "invalid", "multi"
_EXP = re.compile(rb"[eE]")
_L = 16  # leading bytes of each token the vectorised candidate selection looks at
_SMALL = 64  # groups up to this size are checked against the core's mask before their key
_TAILS = 4096  # decoded indexes kept per string table (one per undecodable tail)
_CONTINUATION = frozenset(bytes([b]) for b in range(0x80, 0xC0))
_HEX = frozenset(bytes([b]) for b in b"0123456789abcdefABCDEF")
_WS = np.frombuffer(bytes(sorted(WS)), np.uint8)
_NUM = np.frombuffer(bytes(sorted(NUM_CHARS)), np.uint8)
_VALUE_START = np.frombuffer(b'"-0123456789]tfn[{', np.uint8)
_SEPARATOR = np.frombuffer(b",]", np.uint8)
_SECOND = np.zeros(256, np.uint8)  # a literal's second byte, by its first
_SECOND[list(b"tfn")] = list(b"rau")
_vocabs = TableSlot("item_tables")  # per vocabulary: its ``_Vocab``


class _Group:
    """Token ids cleared together: the words they touch and each word's mask of the others."""

    def __init__(self, ids: list[int]) -> None:
        arr = np.unique(np.asarray(ids, dtype=np.int64))
        self.word, first = np.unique(arr >> 5, return_index=True)
        bits = np.uint32(1) << (arr & 31).astype(np.uint32)
        self.keep = ~np.bitwise_or.reduceat(bits, first) if len(arr) else bits
        self.ids = arr

    def clear(self, words: np.ndarray) -> None:
        words[self.word] &= self.keep


class _Vocab:
    """One vocabulary's tokens as the tables need them: the first ``_L`` bytes of each as a
    matrix (for vectorised candidate selection), the ids holding a quote, and the tables."""

    def __init__(self, token_bytes: tuple) -> None:
        self.token_bytes = token_bytes
        tokens = [b or b"" for b in token_bytes]
        padded = b"".join(b[:_L].ljust(_L, b"\0") for b in tokens)
        self.mat = np.frombuffer(padded, np.uint8).reshape(len(tokens), _L)
        self.length = np.array([len(b) for b in tokens], np.int64)
        self.quotes = [t for t, b in enumerate(tokens) if b'"' in b]
        self.tables: dict[tuple, Table] = {}

    def candidates(self, start: tuple) -> list[int]:
        """The tokens that may cause an event from ``start`` (a superset: each is then read)."""
        mode = start[0]
        if mode == U_STR:
            return self.quotes
        mat, length, rows = self.mat, self.length, np.arange(len(self.mat))
        inside = np.arange(_L)[None, :] < length[:, None]
        if mode == U_LIT:
            rest = LITERALS[start[1][0]][len(start[1]):]
            pick = (mat[:, 0] == rest[0]) & (length > 0)
        else:
            begin = np.zeros(len(mat), np.int64)
            if mode == U_NUM:  # the number's own bytes first
                outside = ~np.isin(mat, _NUM) & inside
                begin = np.where(outside.any(1), outside.argmax(1), length)
            rest = ~np.isin(mat, _WS) & inside & (np.arange(_L)[None, :] >= begin[:, None])
            some, at = rest.any(1), rest.argmax(1)
            first = mat[rows, at]
            if mode == U_NUM:  # tokens that end it, and those that extend it
                pick = (length > 0) & (~some | np.isin(first, _SEPARATOR))
            elif mode == U_AFTER:
                pick = some & np.isin(first, _SEPARATOR)
            else:  # a value: a literal must go on as one (not "the", "for", "new")
                second = mat[rows, np.minimum(at + 1, _L - 1)]
                literal = np.isin(first, np.frombuffer(b"tfn", np.uint8))
                follows = (at + 1 >= length) | (second == _SECOND[first])
                pick = some & np.isin(first, _VALUE_START) & (~literal | follows)
        pick |= length > _L
        return np.nonzero(pick)[0].tolist()


class Table:
    """One start mode over a vocabulary (see the module docstring)."""

    def __init__(self, vocab: _Vocab, start: tuple) -> None:
        groups: dict[Any, list[int]] = defaultdict(list)
        self.multi: list[int] = []
        self.plans: list[tuple[int, tuple]] = []  # several events, read at build time
        for t in vocab.candidates(start):
            tok = vocab.token_bytes[t]
            kind = _scan(start, tok) if tok else _NONE
            if kind is _MULTI:
                self.multi.append(t)
            elif isinstance(kind, tuple) and kind[0] is _MULTI:
                self.plans.append((t, kind[1]))
            elif kind is not _NONE and kind is not _INVALID:
                groups[kind].append(t)
        self.raw = dict(groups)  # key -> ids (string tables decode these keys per tail)
        self.more = [(k[1], _Group(groups.pop(k))) for k in list(groups) if isinstance(k, tuple) and k[0] == "more"]
        opens = [k for k in groups if isinstance(k, tuple) and k[0] == "open"]
        self.opens = [(k, _Group(groups[k])) for k in opens]  # items left open (maybe dead)
        self.groups = {} if start[0] == U_STR else {k: _Group(v) for k, v in groups.items() if k not in opens}
        self.decoded: dict[bytes, dict[str, list[int]]] = {}
        entries = list(self.groups.items())
        self.big = [e for e in entries if len(e[1].ids) > _SMALL]
        self.small = [e for e in entries if len(e[1].ids) <= _SMALL]
        # One gather tells which small groups, several-event tokens and array-leaving tokens the
        # core allows: their ids side by side, and what each position is (group i, plan i, multi i).
        sizes = [len(g.ids) for _, g in self.small]
        self.watch = np.concatenate([g.ids for _, g in self.small] + [np.asarray([t for t, _ in self.plans] +
                                                                                self.multi, dtype=np.int64)])
        self.what = [("g", i) for i, n in enumerate(sizes) for _ in range(n)]
        self.what += [("p", i) for i in range(len(self.plans))] + [("m", t) for t in self.multi]

    def hits(self, words: np.ndarray) -> tuple[list, list[int], list[int]]:
        """(the groups the core may allow a token of: every large group and the small ones with
        an allowed token, the indices of the allowed several-event plans, the allowed
        array-leaving tokens)."""
        groups, plans, multi = set(), [], []
        for i in allowed_at(words, self.watch):
            what, j = self.what[i]
            if what == "g":
                groups.add(j)
            else:
                (plans if what == "p" else multi).append(j)
        return self.big + [self.small[i] for i in sorted(groups)], plans, multi

    def by_value(self, tail: bytes) -> dict[str, list[int]]:
        """String tables: decoded value of ``tail + content`` -> the tokens adding ``content``.
        After a cut UTF-8 character only contents that start with a continuation byte can
        decode; after ``\\u`` and some digits, only hex digits."""
        index = self.decoded.get(tail)
        if index is None:
            index = defaultdict(list)
            cut = tail[-1:] if tail else b""
            firsts = (_CONTINUATION if cut >= b"\x80" and not tail.startswith(b"\\") else
                      _HEX if tail[:2] == b"\\u" and len(tail) < 6 else None)
            for content, ids in self.raw.items():
                if firsts is not None and content[:1] not in firsts:
                    continue
                try:
                    index[json.loads((b'"%s%s"' % (tail, content)).decode("utf-8"))] += ids
                except ValueError:
                    continue
            if len(self.decoded) >= _TAILS:
                self.decoded.clear()
            self.decoded[tail] = index = dict(index)
        return index


def _scan(start: tuple, tok: bytes) -> Any:
    """Read ``tok`` from ``start`` (mode, buf, esc): its class, or its one event's key (the
    bytes it adds to the open item, ``"close"`` for a literal, an item's value, or ``("open",
    mode, buf)`` for an item it leaves open), or ``(_MULTI, events)`` for several events
    (``_MULTI`` alone: it leaves the array and may open another one)."""
    mode, buf0, esc = start
    buf, clean, i, events = bytearray(buf0), 0, 0, []
    fresh = mode in (U_VAL, U_AFTER)  # the open item started in this token
    while True:
        mode, esc, clean, i, event = array_run(mode, buf, esc, clean, tok, i)
        if event is None or event is LEAVE:
            if event is LEAVE and b"[" in tok[i:]:  # a unique array might open again
                return _MULTI
            break
        if event is ERROR:
            return _INVALID
        kind, raw = event
        if fresh:
            events.append(item_key(kind, raw))
        else:
            events.append("close" if start[0] == U_LIT else raw[len(buf0):])
        fresh = True
    if fresh and (mode == U_LIT or (mode == U_NUM and (buf == b"0" or _EXP.search(buf)))):
        events.append(("open", mode, bytes(buf)))  # an item left open that may be dead
    elif not events and start[0] == U_NUM and mode == U_NUM:
        return "more", bytes(buf)  # the number goes on (dead once it can only be 0 or inf)
    if len(events) > 1:
        return _MULTI, tuple(events)
    return events[0] if events else _NONE


def start_of(state: tuple) -> tuple:
    """The start mode (mode, buf, esc) whose table serves ``state``."""
    mode, buf, esc = state.mode, state.buf, state.esc
    if mode == U_STR:
        return (U_STR, b"\\", -1) if esc == -1 else (U_STR, b"", 0)
    if mode == U_LIT:
        return U_LIT, buf, 0
    return mode, b"", 0


def table_for(vocab: Any, start: tuple) -> Table:
    """The (cached) table of ``start`` over ``vocab``'s tokens."""
    tokens = _vocabs.of(vocab, lambda: _Vocab(vocab.token_bytes))
    table = tokens.tables.get(start)
    if table is None:
        table = tokens.tables[start] = Table(tokens, start)
    return table


WARM_STARTS = ((U_STR, b"", 0), (U_STR, b"\\", -1), (U_VAL, b"", 0), (U_AFTER, b"", 0), (U_NUM, b"", 0))


def warm_tables(vocab: Any) -> None:
    """Build ``vocab``'s tables of the start modes every unique array meets (about 0.15 s at
    152k, 55 ms of it the first), at start-up rather than in a first request's mask."""
    for start in WARM_STARTS:
        table_for(vocab, start)


def allowed_at(words: np.ndarray, ids: np.ndarray) -> list[int]:
    """The positions in ``ids`` of the tokens set in ``words``."""
    if len(ids) <= 24:  # numpy's per-call cost exceeds a short loop's
        return [i for i, t in enumerate(ids.tolist()) if (int(words[t >> 5]) >> (t & 31)) & 1]
    return np.flatnonzero((words[ids >> 5] >> (ids & 31).astype(np.uint32)) & 1).tolist()


def forget_tables(vocab: Any) -> None:
    """Drop ``vocab``'s tables (benchmarks time their first build)."""
    _vocabs.pop(vocab, None)


_INF, _NEG_INF = ("n", math.inf), ("n", -math.inf)
_last_seen: tuple = (None, [])  # (the seen set of the last string step, its strings sorted)
_CLOSERS = TableSlot("closing_brackets")  # per vocabulary: (closing brackets per token, ids with any)


def forbid(tracker: UniqueTracker, vocab: Any, state: tuple, words: np.ndarray) -> None:
    """Clear from ``words`` (the core's mask, uint32) every token ``tracker.feed`` rejects in
    ``state``, whose innermost container is a unique array (tokens the core allows: the reader
    follows every text the grammar allows)."""
    if state.mode == U_CON:
        _container(tracker, vocab, state, words)
        return
    start = start_of(state)
    table = table_for(vocab, start)
    seen, zero = state.frames[-1].seen, state.frames[-1].zero
    mode = start[0]
    live, plans, multi = table.hits(words)
    first = None  # the value of the open item completed: bytes -> key (several-event tokens)
    if mode == U_STR:
        first = _strings(table, state, seen, words)
    elif mode == U_NUM:
        for content, group in live:
            if item_key("n", state.buf + content) in seen:
                group.clear(words)
        if ZERO_KEY in seen or _INF in seen or _NEG_INF in seen:  # an extension may be dead
            for content, group in table.more:
                if dead_open(U_NUM, state.buf + content, seen, zero):
                    group.clear(words)
    elif mode in (U_VAL, U_AFTER):
        for key, group in table.opens:
            if dead_open(key[1], key[2], seen, zero):
                group.clear(words)
        if len(seen) < len(table.groups):
            for key in seen:
                group = table.groups.get(key)
                if group is not None:
                    group.clear(words)
        else:
            for key, group in table.groups.items():
                if key in seen:
                    group.clear(words)
    for i in plans:  # several events, where the core allows the token
        t, events = table.plans[i]
        keys = list(events)
        if mode not in (U_VAL, U_AFTER):  # the first completes the open item
            keys[0] = (first(keys[0]) if first is not None else ("l", LITERALS[state.buf[0]]) if mode == U_LIT
                       else item_key("n", state.buf + keys[0]))
        if _rejects(keys, seen, zero):
            _clear_bit(words, t)
    for t in multi:  # it leaves the array and may open another: read exactly
        if tracker.feed(state, vocab.token_bytes[t]) is None:
            _clear_bit(words, t)


def _closers(vocab: Any) -> tuple[np.ndarray, np.ndarray]:
    count = np.asarray([(b or b"").count(b"]") + (b or b"").count(b"}") for b in vocab.token_bytes])
    return count, np.flatnonzero(count).astype(np.int64)


def _container(tracker: UniqueTracker, vocab: Any, state: tuple, words: np.ndarray) -> None:
    """Inside a container item: only a token that closes it (as many closing brackets as it is
    deep) can complete an item, so those the core allows are fed."""
    count, ids = _CLOSERS.of(vocab, lambda: _closers(vocab))
    ids = ids[count[ids] >= state.clean >> 1]  # clean: depth * 2 + an open string
    table = vocab.token_bytes
    for i in allowed_at(words, ids):
        t = int(ids[i])
        if tracker.feed(state, table[t]) is None:
            _clear_bit(words, t)


def _strings(table: Table, state: tuple, seen: frozenset, words: np.ndarray) -> Callable[[bytes], tuple]:
    """Inside a string item: clear the tokens that close it as an item already in ``seen``.
    Returns the value of the item a token's bytes up to the quote would close it as."""
    global _last_seen
    buf, clean = state.buf, state.clean
    done, tail = json.loads((b'"%s"' % buf[:clean]).decode("utf-8")), buf[clean:]

    def closed(content: bytes) -> tuple:
        try:
            return "s", done + json.loads((b'"%s%s"' % (tail, content)).decode("utf-8"))
        except ValueError:
            return item_key("s", buf + content)

    cached = _last_seen  # one read: another thread may replace it
    if cached[0] is not seen:
        _last_seen = cached = (seen, sorted(key[1] for key in seen if key[0] == "s"))
    strings = cached[1]
    if not strings:
        return closed
    index = table.by_value(tail)
    for i in range(bisect.bisect_left(strings, done), len(strings)):
        s = strings[i]
        if not s.startswith(done):
            break
        for t in index.get(s[len(done):], ()):
            _clear_bit(words, t)
    return closed


def _rejects(keys: list, seen: frozenset, zero: bool) -> bool:
    """Whether items ``keys`` (completed in this order; an ``("open", ...)`` last) repeat one
    another or ``seen``, or leave a dead item open."""
    added: set = set()
    for key in keys:
        if key[0] == "open":
            return dead_open(key[1], key[2], seen | added if added else seen, zero)
        if key in seen or key in added:
            return True
        added.add(key)
    return False


def _clear_bit(words: np.ndarray, t: int) -> None:
    words[t >> 5] &= np.uint32(~(1 << (t & 31)) & 0xFFFFFFFF)
