"""Where each token of a vocabulary closes an open JSON string: its first unescaped quote, read
from either escape state, and the bytes after it (its *tail*) as a small integer.

The runtime checks (``member_refusals``) decide a token inside a string by what follows its
closing quote. Tokens share a few dozen tails (``",`` ``"}`` ``":"`` ...), so a state's verdicts
come from one feed per distinct tail, gathered with array operations rather than a Python step
per token. Built once per vocabulary; only tokens holding a quote are scanned.
"""

from __future__ import annotations

import weakref
from typing import Any

import numpy as np

_splits: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
UNSPLIT = -2  # ``close_at``: a quote comes after a ``\u`` escape (read whole)


class QuoteSplit:
    """Per escape state ``e`` (0: plain; 1: the token's first byte is escaped, after a backslash),
    arrays over token ids: ``close_at[e]`` (the first unescaped quote's offset, -1 where the token
    does not close the string, ``UNSPLIT`` where it must be fed whole), ``tail_id[e]`` (its tail's index in ``tails``, -1 likewise) and
    ``plain_head[e]`` (no backslash before that quote: a key's bytes there are its name's)."""

    def __init__(self, token_bytes: tuple) -> None:
        n = len(token_bytes)
        self.tails: list[bytes] = []
        index: dict[bytes, int] = {}
        self.close_at = [np.full(n, -1, dtype=np.int32) for _ in range(2)]
        self.tail_id = [np.full(n, -1, dtype=np.int32) for _ in range(2)]
        self.plain_head = [np.zeros(n, dtype=bool) for _ in range(2)]
        for t, data in enumerate(token_bytes):
            if not data or b'"' not in data:
                continue
            for e in (0, 1):
                at = first_unescaped_quote(data, bool(e))
                if at < 0:
                    continue
                if b"\\u" in data[:at] or (e and data[:1] == b"u"):
                    # a \u escape before the quote: the tracker reads its hex digits as counted
                    # strings do or as plain bytes, and the two part only on bytes the grammar
                    # refuses, so such a token is left to be fed whole
                    self.close_at[e][t] = UNSPLIT
                    continue
                tail = data[at + 1:]
                tid = index.get(tail)
                if tid is None:
                    tid = index[tail] = len(self.tails)
                    self.tails.append(tail)
                self.close_at[e][t], self.tail_id[e][t] = at, tid
                self.plain_head[e][t] = not e and b"\\" not in data[:at]


def first_unescaped_quote(data: bytes, escaped: bool) -> int:
    """The offset of the first quote in ``data`` that no backslash escapes (``escaped``: the first
    byte is escaped), or -1. As the tracker reads strings, an escape covers one byte: the hex
    digits of ``\\u`` are never quotes."""
    i = 0
    if escaped:
        i = 1
    while i < len(data):
        b = data[i]
        if b == 0x5C:
            i += 2
            continue
        if b == 0x22:
            return i
        i += 1
    return -1


def quote_split_for(vocab: Any) -> QuoteSplit:
    """The (cached) ``QuoteSplit`` of ``vocab``."""
    split = _splits.get(vocab)
    if split is None:
        split = _splits[vocab] = QuoteSplit(vocab.token_bytes)
    return split
