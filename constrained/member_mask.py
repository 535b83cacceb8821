"""Masks for the runtime member check (``member_check``): clear the tokens that
``UniqueTracker.feed`` would refuse because of a checked object, without feeding the vocabulary.

Per vocabulary the candidates that can be refused are filed once (``member_tokens``); a step
gathers the candidates the core allows and feeds each one. An open key of a checked object is the
exception: where no extra key may come, the key must stay a prefix of a named key that may come,
so every other token is cleared (``_key_only``); elsewhere, the tokens that would complete a key
already written are cleared by their raw bytes. The result equals ``feed`` on every token the core
allows.

Whether ``feed`` refuses a token depends only on the state and the token, and states repeat (every
token inside one string or number value, every value of a path), so each tracker keeps a bounded
memo per state (``_Memo``): the candidates, and what feeding each one gave, learned the first time
the core allows it. A repeated state feeds nothing and clears its refused tokens in a few vector
operations.
"""

from __future__ import annotations

import json
import threading
import weakref
from collections import OrderedDict
from typing import Any

import numpy as np
from radixlm.constrained.member_check import admit, extra_ok, open_keys
from radixlm.constrained.member_tokens import MemberTokens, member_tokens_for
from radixlm.constrained.unique_items import UniqueTracker
from radixlm.constrained.unique_scan import G_AFTER, G_INKEY, G_KEY, G_STR, U_VAL

MEMO_STATES = 2048  # per tracker: states remembered (each holds a byte per candidate)
UNKNOWN, KEPT, REFUSED = 0, 1, 2
_memos: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_memos_lock = threading.Lock()


class _Entry:
    """One state's candidates (``ids``, int64, unique), what feeding each gave (``status``: int8,
    ``UNKNOWN`` until the core first allows it), the tokens cleared whatever the core allows
    (``always``), and whether only ``KEPT`` candidates survive (an open key with no extra key)."""

    __slots__ = ("ids", "status", "always", "only")

    def __init__(self, ids: np.ndarray, status: np.ndarray, always: np.ndarray, only: bool) -> None:
        self.ids, self.status, self.always, self.only = ids, status, always, only


class _Memo:
    """A tracker's entries by state, least recently used first; bounded by ``MEMO_STATES``."""

    def __init__(self) -> None:
        self.entries: OrderedDict = OrderedDict()
        self.lock = threading.Lock()

    def get(self, state: tuple) -> _Entry | None:
        with self.lock:
            entry = self.entries.get(state)
            if entry is not None:
                self.entries.move_to_end(state)
            return entry

    def put(self, state: tuple, entry: _Entry) -> None:
        with self.lock:
            self.entries[state] = entry
            while len(self.entries) > MEMO_STATES:
                self.entries.popitem(last=False)


def _memo_for(tracker: UniqueTracker) -> _Memo:
    with _memos_lock:
        memo = _memos.get(tracker)
        if memo is None:
            memo = _memos[tracker] = _Memo()
        return memo


def forbid_members(tracker: UniqueTracker, vocab: Any, state: tuple, words: np.ndarray) -> None:
    """Clear from ``words`` (the core's mask, uint32) every token that ``tracker.feed`` refuses
    in ``state`` because of a checked object (one that is open, or that the token opens)."""
    memo = _memo_for(tracker)
    entry = memo.get(state)
    if entry is None:
        entry = _entry(tracker, vocab, state)
        memo.put(state, entry)
    if len(entry.always):
        _clear(words, entry.always)
    ids, status = entry.ids, entry.status
    allowed = np.flatnonzero((words[ids >> 5] >> (ids & 31).astype(np.uint32)) & 1)
    unknown = allowed[status[allowed] == UNKNOWN]
    if len(unknown):
        table = vocab.token_bytes
        for i in unknown.tolist():  # the only feeding: a candidate the core first allows here
            status[i] = REFUSED if tracker.feed(state, table[int(ids[i])] or b"") is None else KEPT
    if entry.only:
        kept = ids[allowed[status[allowed] == KEPT]]
        words[:] = 0
        np.bitwise_or.at(words, kept >> 5, np.uint32(1) << (kept & 31).astype(np.uint32))
    else:
        _clear(words, ids[allowed[status[allowed] == REFUSED]])


def _clear(words: np.ndarray, ids: np.ndarray) -> None:
    if len(ids):
        np.bitwise_and.at(words, ids >> 5, ~(np.uint32(1) << (ids & 31).astype(np.uint32)))


def _entry(tracker: UniqueTracker, vocab: Any, state: tuple) -> _Entry:
    """A fresh entry for ``state``: its candidates by reader mode, none fed yet."""
    files = member_tokens_for(vocab)
    frames, mode = state[0], state[1]
    top = frames[-1] if frames else ()
    checked = len(top) == 3 and top[0] == "o"  # ("u", seen, zero) is a unique array
    spec = tracker.paths.specs[tracker.paths.members[top[1]]] if checked else None
    always = np.zeros(0, dtype=np.int64)
    if not tracker.in_checked(state):  # a token may still open a checked object and go on in it
        ids = files.after_brace
    elif mode >= U_VAL:
        ids = files.after_bracket
    elif mode == G_STR:
        ids = files.after_quote
    elif mode == G_INKEY and spec is not None:
        if not extra_ok(spec, top[2]):
            return _key_only(vocab, files, state, spec)
        always = np.unique(np.asarray(_completing_refused(files, spec, top[2], state[3]), dtype=np.int64))
        ids = files.key_chars  # a named key's escape may lead where only refused keys go
    elif mode == G_INKEY:
        ids = files.after_quote
    elif mode in (G_KEY, G_AFTER) and spec is not None and not extra_ok(spec, top[2]):
        ids = files.any_outside  # a key it opens may be dead at once
    else:
        ids = files.outside
    return _Entry(ids, np.zeros(len(ids), dtype=np.int8), always, False)


def _completing_refused(files: MemberTokens, spec: Any, seen: frozenset, prefix: bytes) -> list[int]:
    """The tokens that complete, after the open key ``prefix``, a key the object refuses: a key
    already written (named or extra: plain characters, so its raw bytes are its name quoted) or
    a named key past what ``maxProperties`` leaves."""
    allowed = set(open_keys(spec, seen))
    refused = [k for k in spec.keys if k not in allowed]
    refused += [b'"%s"' % n.encode() for n in seen if n not in spec.names]
    for alt in spec.alts or ():  # a union: a name one branch blocks may be another's extra
        refused += [json.dumps(n, ensure_ascii=False).encode() for n in alt.blocked
                    if n not in seen and n not in spec.names and admit(spec, seen, n) is None]
    out: list[int] = []
    for key in refused:
        if key.startswith(prefix) and len(key) > len(prefix):
            out += files.starting_with(key[len(prefix):])
    return out


def _key_only(vocab: Any, files: MemberTokens, state: tuple, spec: Any) -> _Entry:
    """An open key where no extra key may come: only tokens that keep it a prefix of a named key
    that may come (``KEPT`` from the start), or complete one (fed when first allowed), survive."""
    prefix = state[3]
    keep, complete = [], []
    for key in open_keys(spec, state[0][-1][2]):
        if key.startswith(prefix) and len(key) > len(prefix):
            rest = key[len(prefix):]
            keep += files.prefixes_of(rest)
            complete += [t for t in files.starting_with(rest) if len(vocab.token_bytes[t]) > len(rest)]
    ids = np.unique(np.asarray(keep + complete, dtype=np.int64))
    status = np.where(np.isin(ids, np.asarray(keep, dtype=np.int64)), KEPT, UNKNOWN).astype(np.int8)
    return _Entry(ids, status, np.zeros(0, dtype=np.int64), True)
