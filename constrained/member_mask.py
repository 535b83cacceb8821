"""Masks for the runtime member check (``member_check``): clear the tokens that
``UniqueTracker.feed`` would refuse because of a checked object, without feeding the vocabulary.

Only tokens holding a structural byte can be refused (``,`` ``}`` ``{``, a key's quotes), so per
vocabulary the candidates are filed once by what they can do from a reader mode (``_Files``);
a step gathers the candidates the core allows and feeds each one. An open key of a checked
object is the exception: where no extra key may come, the key must stay a prefix of a named key
that may come, so every other token is cleared (``_key_only``); elsewhere, the tokens that would
complete a key already written are cleared by their raw bytes. The result equals ``feed`` on
every token the core allows.
"""

from __future__ import annotations

import bisect
import functools
import json
import re
import weakref
from typing import Any

import numpy as np
from radixlm.constrained.member_check import admit, extra_ok, open_keys
from radixlm.constrained.unique_items import UniqueTracker
from radixlm.constrained.unique_scan import G_AFTER, G_INKEY, G_KEY, G_STR, U_VAL
from radixlm.constrained.unique_tables import allowed_at

_STRUCTURAL = re.compile(rb'[",{}\]\\]')
_files: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


class _Files:
    """One vocabulary's candidate tokens: ``outside`` (a ``,``/``}``/``{`` or two quotes: may
    refuse from outside strings), ``after_quote`` (a quote before a structural byte: may refuse
    once the open string closes), ``after_bracket`` (the same after a ``]``: inside a unique
    array), ``after_brace`` (a ``{`` before a ``}`` or quote: may open a checked object and refuse
    in it), ``quoted`` (any quote), and the tokens sorted by their bytes (prefix lookups)."""

    def __init__(self, token_bytes: tuple) -> None:
        tokens = [b or b"" for b in token_bytes]
        outside, after_quote, after_bracket, quoted, after_brace = [], [], [], [], []
        for t, b in enumerate(tokens):
            if _STRUCTURAL.search(b) is None:  # most tokens: nothing a check reads
                continue
            last = max(b.rfind(b","), b.rfind(b"}"), b.rfind(b'"'), b.rfind(b"{"))
            if b'"' in b:
                quoted.append(t)
                if b.find(b'"') < last:
                    after_quote.append(t)
            if b.count(b'"') >= 2 or b"," in b or b"}" in b or b"{" in b or b'"' in b and b"\\" in b:
                outside.append(t)
            if b"]" in b and b.find(b"]") < last:
                after_bracket.append(t)
            if b"{" in b and b.find(b"{") < max(b.rfind(b"}"), b.rfind(b'"')):
                after_brace.append(t)
        arr = lambda ids: np.asarray(ids, dtype=np.int64)  # noqa: E731
        self.outside, self.after_quote = arr(outside), arr(after_quote)
        self.after_bracket, self.quoted, self.after_brace = arr(after_bracket), arr(quoted), arr(after_brace)
        self.any_outside = np.union1d(self.outside, self.quoted)
        self.key_chars = np.union1d(self.after_quote, arr([t for t, b in enumerate(tokens) if b"\\" in b]))
        self._tokens = tokens

    @functools.cached_property
    def _sorted(self) -> tuple[list[bytes], list[int]]:
        """The tokens' bytes sorted, and their ids (built at the first key lookup)."""
        order = sorted((b, t) for t, b in enumerate(self._tokens) if b)
        return [b for b, _ in order], [t for _, t in order]

    def starting_with(self, prefix: bytes) -> list[int]:
        """The tokens whose bytes start with ``prefix``."""
        keys, ids = self._sorted
        i, out = bisect.bisect_left(keys, prefix), []
        while i < len(keys) and keys[i].startswith(prefix):
            out.append(ids[i])
            i += 1
        return out

    def prefixes_of(self, data: bytes) -> list[int]:
        """The tokens whose bytes are a non-empty prefix of ``data``."""
        keys, ids, out = *self._sorted, []
        for n in range(1, len(data) + 1):
            i = bisect.bisect_left(keys, data[:n])
            while i < len(keys) and keys[i] == data[:n]:
                out.append(ids[i])
                i += 1
        return out


def _files_for(vocab: Any) -> _Files:
    files = _files.get(vocab)
    if files is None:
        files = _files[vocab] = _Files(vocab.token_bytes)
    return files


def forbid_members(tracker: UniqueTracker, vocab: Any, state: tuple, words: np.ndarray) -> None:
    """Clear from ``words`` (the core's mask, uint32) every token that ``tracker.feed`` refuses
    in ``state`` because of a checked object (one that is open, or that the token opens)."""
    files = _files_for(vocab)
    frames, mode = state[0], state[1]
    top = frames[-1] if frames else ()
    checked_top = len(top) == 3
    if not tracker.in_checked(state):  # a token may still open a checked object and go on in it
        ids = files.after_brace
    elif mode >= U_VAL:
        ids = files.after_bracket
    elif mode == G_STR:
        ids = files.after_quote
    elif mode == G_INKEY:
        if checked_top:
            spec = tracker.paths.specs[tracker.paths.members[top[1]]]
            if not extra_ok(spec, top[2]):
                _key_only(tracker, vocab, files, state, spec, words)
                return
            for t in _completing_refused(files, spec, top[2], state[3]):
                _clear_bit(words, t)
            ids = files.key_chars  # a named key's escape may lead where only refused keys go
        else:
            ids = files.after_quote
    elif mode in (G_KEY, G_AFTER) and checked_top and not extra_ok(
            tracker.paths.specs[tracker.paths.members[top[1]]], top[2]):
        ids = files.any_outside  # a key it opens may be dead at once
    else:
        ids = files.outside
    _feed_allowed(tracker, vocab, state, words, ids)


def _completing_refused(files: _Files, spec: Any, seen: frozenset, prefix: bytes) -> list[int]:
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


def _key_only(tracker: UniqueTracker, vocab: Any, files: _Files, state: tuple, spec: Any,
              words: np.ndarray) -> None:
    """An open key where no extra key may come: only tokens that keep it a prefix of a named key
    that may come (or complete one, then fed) survive."""
    prefix = state[3]
    keep, complete = [], []
    for key in open_keys(spec, state[0][-1][2]):
        if key.startswith(prefix) and len(key) > len(prefix):
            rest = key[len(prefix):]
            keep += files.prefixes_of(rest)
            complete += [t for t in files.starting_with(rest) if len(vocab.token_bytes[t]) > len(rest)]
    keep_ids = np.asarray(keep + complete, dtype=np.int64)
    allowed = allowed_at(words, keep_ids) if len(keep_ids) else []
    words[:] = 0
    for i in allowed:
        t = int(keep_ids[i])
        if t in keep or tracker.feed(state, vocab.token_bytes[t]) is not None:
            words[t >> 5] |= np.uint32(1 << (t & 31))


def _feed_allowed(tracker: UniqueTracker, vocab: Any, state: tuple, words: np.ndarray, ids: np.ndarray) -> None:
    table = vocab.token_bytes
    for i in allowed_at(words, ids):
        t = int(ids[i])
        if tracker.feed(state, table[t]) is None:
            _clear_bit(words, t)


def _clear_bit(words: np.ndarray, t: int) -> None:
    words[t >> 5] &= np.uint32(~(1 << (t & 31)) & 0xFFFFFFFF)
