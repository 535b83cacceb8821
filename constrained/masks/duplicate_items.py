"""Masks for the runtime ``uniqueItems`` check: clear the tokens that ``UniqueTracker.feed``
would reject, without feeding 150k tokens per step.

The tokens are filed per vocabulary and reader mode once (``masks.item_tables``); a step then costs
a few lookups per item already written. A string's duplicates are the tokens whose bytes up to
the closing quote decode, after the open item's bytes, to an item already written (indexed by
decoded value per undecodable tail of the open item: an escape, a UTF-8 character or a
surrogate pair cut by the token boundary). The result equals ``feed`` on every token the core
allows (the reader follows every text the grammar allows).
"""

from __future__ import annotations

import bisect
import json
import math
from collections.abc import Callable
from typing import Any

import numpy as np
from radixlm.constrained.checks.reader import (
    LITERALS,
    U_AFTER,
    U_CON,
    U_LIT,
    U_NUM,
    U_STR,
    U_VAL,
    ZERO_KEY,
    dead_open,
    item_key,
)
from radixlm.constrained.checks.tracker import UniqueTracker
from radixlm.constrained.masks.item_tables import Table, allowed_at, start_of, table_for
from radixlm.constrained.tables import TableSlot

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
