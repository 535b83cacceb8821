"""Which of a step's candidate tokens ``UniqueTracker.feed`` refuses (with ``lengths=False``), for
the runtime member check's masks (``masks.members``).

Inside an open string value or key, the bytes before a token's closing quote lead to one state
(a value's, or a key's completed as a fresh extra one) or to one per name the check tells apart
(``masks.member_memo.known_names``), so the token's verdict is its tail's: what follows the quote, fed
once from the state the quote leads to. A step's candidates share a few dozen tails, so a new state
costs a feed per distinct tail, not a feed per token (``masks.refusable_tokens`` files where each token closes
a string, and its head and tail). A token that opens a string from outside one (``"`` where a value
or a key may start, ``,"`` after a member) is read the same way past its opening bytes. A tail is
fed through ``masks.member_memo``, which shares verdicts between states that differ only in their
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

from typing import Any

import numpy as np
from radixlm.constrained.checks.reader import G_AFTER, G_INKEY, G_KEY, G_STR, G_VAL, is_checked
from radixlm.constrained.checks.tracker import UniqueTracker, admit, key_name, prefix_alive
from radixlm.constrained.masks.member_memo import FromState, after_key, known_name_set, lookup, written_names
from radixlm.constrained.masks.refusable_tokens import quote_split_for

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
