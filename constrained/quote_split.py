"""Where each token of a vocabulary closes an open JSON string: its first unescaped quote, read
from either escape state.

The runtime member check (``member_refusals``) decides a token inside a string by what follows
its closing quote (its *tail*): tokens share a few dozen tails (``",`` ``"}`` ``":"`` ...), so a
state's verdicts come from one feed per distinct tail. Built once per vocabulary (only tokens
holding a quote are read); ``close_of`` reads any other bytes the same way.
"""

from __future__ import annotations

import weakref
from typing import Any

import numpy as np

_splits: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
UNSPLIT = -2  # a quote comes after a ``\u`` escape: read the bytes whole


class QuoteSplit:
    """``close_at[e]``: per token id, ``close_of(its bytes, escaped=bool(e))`` (int32), for the
    plain escape state (0) and the one after a backslash (1)."""

    def __init__(self, token_bytes: tuple) -> None:
        n = len(token_bytes)
        self.close_at = [np.full(n, -1, dtype=np.int32) for _ in range(2)]
        for t, data in enumerate(token_bytes):
            if data and b'"' in data:
                self.close_at[0][t], self.close_at[1][t] = close_of(data, False), close_of(data, True)


def close_of(data: bytes, escaped: bool) -> int:
    """The offset of the first quote in ``data`` that no backslash escapes (``escaped``: the first
    byte is escaped), -1 when there is none, or ``UNSPLIT`` when a ``\\u`` escape comes before it.
    As the tracker reads strings an escape covers one byte, but a counted string's reader takes a
    ``\\u`` escape's four hex digits whatever they are: the two part only on bytes the grammar
    refuses, and such bytes are left to be read whole."""
    i = 1 if escaped else 0
    if escaped and data[:1] == b"u":
        return UNSPLIT if b'"' in data else -1
    while i < len(data):
        b = data[i]
        if b == 0x5C:
            if data[i + 1:i + 2] == b"u":
                return UNSPLIT if b'"' in data[i:] else -1
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
