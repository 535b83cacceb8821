"""Where each token of a vocabulary closes an open JSON string: its first unescaped quote, read
from either escape state, or past the bytes that open a string (``"``, ``,"``).

The runtime member check (``masks.closing_tails``) decides a token inside a string by what follows
its closing quote (its *tail*): tokens share a few dozen tails (``",`` ``"}`` ``":"`` ...), so a
state's verdicts come from one feed per distinct tail. Built once per vocabulary (only tokens
holding a quote are read, a few thousand at 152k); ``close_of`` reads any other bytes the same way.
A step then looks each candidate up instead of slicing and scanning its bytes: with caches left
cold by the core's mask, a few Python operations per token were most of a new state's cost.
"""

from __future__ import annotations

import re
from typing import Any

from radixlm.constrained.masks.refusable_tokens import may_write_a_key
from radixlm.constrained.tables import TableSlot

_SPLITS = TableSlot("quote_split")  # per vocabulary
UNSPLIT = -2  # a quote comes after a ``\u`` escape: read the bytes whole
OPENERS = (b'"', b',"')  # the bytes that open a string from outside one (a value or key; a key)
# a key's tail that only opens a value string: the plain bytes in that string change nothing
_OPEN_VALUE = re.compile(rb'[ \t\n\r]*:[ \t\n\r]*"[^"\\]*')
# a key's tail that nothing can refuse: its colon, then at most a value string or number begun
_QUIET = re.compile(rb'[ \t\n\r]*(:[ \t\n\r]*("|-?[0-9]*))?')


class QuoteSplit:
    """``reading[r]``: token id -> ``(at, head, tail, plain, quiet)`` read from inside a string
    (``r`` 0 for the plain escape state, 1 for the one after a backslash; ``at`` is
    ``close_of(its bytes, escaped=bool(r))``; tokens without a quote are left out: they close
    nothing) or past an
    opener (``r`` one of ``OPENERS``: every token that starts with it and goes on; ``at`` and
    ``head`` count from after the opener). ``head``/``tail``: the bytes before and after the
    closing quote (None where ``at`` < 0), a tail that only opens a value string cut after its
    quote; ``plain``: the head has no backslash and the token cannot write a later key whole
    (``may_write_a_key``), so a key it completes is named by the head alone; ``quiet``: after a
    key, nothing in the tail can be refused (a colon, then at most the start of a value string or
    number), so the key alone decides."""

    def __init__(self, token_bytes: tuple) -> None:
        self.reading: dict[Any, dict[int, tuple]] = {r: {} for r in (0, 1, *OPENERS)}
        interned: dict[bytes, bytes] = {}
        for t, data in enumerate(token_bytes):
            if not data or b'"' not in data:
                continue
            for e in (0, 1):
                self.reading[e][t] = _read(data, close_of(data, bool(e)), interned)
            for opener in OPENERS:
                if len(data) > len(opener) and data.startswith(opener):
                    rest = data[len(opener):]
                    self.reading[opener][t] = _read(rest, close_of(rest, False), interned)


def _read(data: bytes, at: int, interned: dict) -> tuple:
    """``(at, head, tail, plain, quiet)`` of ``data`` whose closing quote is at ``at``."""
    if at < 0:
        return at, None, None, False, False
    head, tail = data[:at], data[at + 1:]
    if _OPEN_VALUE.fullmatch(tail):
        tail = tail[:tail.index(b'"') + 1]
    head, tail = interned.setdefault(head, head), interned.setdefault(tail, tail)
    return at, head, tail, b"\\" not in head and not may_write_a_key(data), _QUIET.fullmatch(tail) is not None


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
    return _SPLITS.of(vocab, lambda: QuoteSplit(vocab.token_bytes))
