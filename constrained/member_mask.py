"""Masks for the runtime member check (``member_check``): clear the tokens that
``UniqueTracker.feed`` would refuse because of a checked object, without feeding the vocabulary.

Per vocabulary the candidates that can be refused are filed once (``member_tokens``); a step
gathers the candidates the core allows and feeds each one. An open key of a checked object is the
exception: where no extra key may come, the key must stay a prefix of a named key that may come,
so every other token is cleared (``_key_only``); elsewhere, the tokens that would complete a key
already written are cleared by their raw bytes. The result equals ``feed`` on every token the core
allows.

Each tracker keeps a bounded memo per state (``member_memo``): the candidates, and what feeding
each one gave, learned the first time the core allows it. A repeated state feeds nothing and clears
its refused tokens in a few vector operations.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
from radixlm.constrained.member_check import admit, extra_ok, open_keys
from radixlm.constrained.member_memo import KEPT, LIVE, REFUSED, UNKNOWN, MemoEntry, memo_for, memo_key
from radixlm.constrained.member_tokens import MemberTokens, member_tokens_for, place
from radixlm.constrained.unique_items import UniqueTracker
from radixlm.constrained.unique_scan import G_AFTER, G_INKEY, G_KEY, G_STR, U_VAL


def forbid_members(tracker: UniqueTracker, vocab: Any, state: tuple, words: np.ndarray) -> None:
    """Clear from ``words`` (the core's mask, uint32) every token that ``tracker.feed`` refuses
    in ``state`` because of a checked object (one that is open, or that the token opens)."""
    memo = memo_for(tracker)
    key, shared = memo_key(tracker, state)
    entry = memo.get(key)
    if entry is None:
        entry = _entry(tracker, vocab, state, shared)
        memo.put(key, entry)
    status, (word, bit) = entry.status, entry.place
    todo = np.flatnonzero(words[word] & bit)
    todo = todo[status[todo] % 2 == 0]  # allowed here and UNKNOWN or LIVE
    cut = entry.cut  # read after ``status`` (``MemoEntry.settle``)
    kept, refused, verdicts = [], [], {}
    if len(todo):
        table, ids = vocab.token_bytes, entry.ids
        for i in todo.tolist():  # the only feeding: a candidate the core first allows here, or a live one
            t = int(ids[i])
            verdict = REFUSED if tracker.feed(state, table[t] or b"") is None else KEPT
            (refused if verdict == REFUSED else kept).append(t)
            if status[i] == UNKNOWN:
                verdicts[i] = verdict
        if verdicts:
            entry.settle(verdicts)
    if entry.only:  # only KEPT candidates the core allows survive
        keep = words[cut[0]] & cut[1]
        words[:] = 0
        words[cut[0]] = keep
        _set(words, kept)
    else:
        words[cut[0]] &= ~cut[1]
        _clear(words, refused)


def _clear(words: np.ndarray, ids: list[int]) -> None:
    for t in ids:  # a few: this step's feeding
        words[t >> 5] &= ~np.uint32(1 << (t & 31))


def _set(words: np.ndarray, ids: list[int]) -> None:
    for t in ids:
        words[t >> 5] |= np.uint32(1 << (t & 31))


def _entry(tracker: UniqueTracker, vocab: Any, state: tuple, shared: bool) -> MemoEntry:
    """A fresh entry for ``state``: its candidates by reader mode, none fed yet (``shared``: an
    open fresh extra key's, whose ``live`` candidates are fed every time)."""
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
        if shared:
            live = np.isin(ids, files.live)
            return MemoEntry(ids, files.placed(ids), np.where(live, LIVE, UNKNOWN).astype(np.int8), always, False)
    elif mode == G_INKEY:
        ids = files.after_quote
    elif mode in (G_KEY, G_AFTER) and spec is not None and not extra_ok(spec, top[2]):
        ids = files.any_outside  # a key it opens may be dead at once
    else:
        ids = files.outside
    return MemoEntry(ids, files.placed(ids), np.zeros(len(ids), dtype=np.int8), always, False)


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


def _key_only(vocab: Any, files: MemberTokens, state: tuple, spec: Any) -> MemoEntry:
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
    return MemoEntry(ids, place(ids), status, np.zeros(0, dtype=np.int64), True)
