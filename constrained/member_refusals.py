"""Which of a step's candidate tokens ``UniqueTracker.feed`` refuses (with ``lengths=False``), for
the runtime member check's masks (``member_mask``).

Inside an open string value, or an open key whose completion is a fresh extra key, the bytes
before a token's closing quote change nothing the check reads, so the token's verdict is its
tail's: what follows the quote, fed once from the state the quote leads to. A step's candidates
share a few dozen tails, so a new state costs a feed per distinct tail, not a feed per token
(``quote_split`` files where each token closes a string). A token that opens a string from
outside one (``"`` where a value or a key may start, ``,"`` after a member) is read the same way
past its opening bytes. Fed whole instead:
- a key that may write a whole second key of the object after it (``member_tokens``'
  ``may_write_a_key``): refused only if it repeats the first, whose name decides;
- a key completed as a name the check or the path table tells apart from a fresh extra key
  (``member_memo.known_names``), or spelled with an escape;
- anything else outside strings, inside a ``\\u`` escape, or in a key that does not close.
Inside a string value a token that does not close it is never refused (lengths are the string
masks' concern).
"""

from __future__ import annotations

import bisect
from typing import Any

import numpy as np
from radixlm.constrained.member_memo import known_names
from radixlm.constrained.member_tokens import may_write_a_key
from radixlm.constrained.quote_split import close_of, quote_split_for
from radixlm.constrained.unique_items import UniqueTracker
from radixlm.constrained.unique_scan import G_AFTER, G_INKEY, G_KEY, G_STR, G_VAL

# outside strings: the bytes that open one, per reader mode (``,"`` after a member or an item)
_OPENERS = {G_VAL: b'"', G_KEY: b'"', G_AFTER: b',"'}


def refusals(tracker: UniqueTracker, vocab: Any, state: tuple, ids: np.ndarray) -> np.ndarray:
    """Whether ``tracker.feed(state, token, lengths=False)`` refuses each of ``ids`` (int64):
    bool, aligned with ``ids``. A step decides a few dozen at most, so this reads them as Python
    lists: a batch's numpy calls would cost more than its tokens."""
    table, tokens = vocab.token_bytes, ids.tolist()
    inside = _Inside.of(tracker, state)
    if inside is not None:
        close_at = quote_split_for(vocab).close_at[1 if state[4] else 0][ids].tolist()
        verdicts = [inside.decide(table[t], at) for t, at in zip(tokens, close_at, strict=True)]
    else:
        verdicts = _past_opener(tracker, vocab, state, tokens)
    return np.array([tracker.feed(state, table[t] or b"", lengths=False) is None if v is None else v
                     for t, v in zip(tokens, verdicts, strict=True)], dtype=bool)


def _past_opener(tracker: UniqueTracker, vocab: Any, state: tuple, tokens: list[int]) -> list[bool | None]:
    """Verdicts of the tokens that open a string from ``state`` (outside one), decided past their
    opening bytes; None for the rest (fed whole)."""
    opener = _OPENERS.get(state[1]) if not state[4] else None
    out: list[bool | None] = [None] * len(tokens)
    if opener is None:
        return out
    table, n, inside, inner = vocab.token_bytes, len(opener), None, _UNSET
    for j, t in enumerate(tokens):
        data = table[t] or b""
        if len(data) <= n or not data.startswith(opener):
            continue
        if inner is _UNSET:
            inner = tracker.feed(state, opener, lengths=False)
            inside = _Inside.of(tracker, inner) if inner is not None else None
        if inner is None:
            out[j] = True  # the opening bytes are refused already
        elif inside is not None:
            rest = data[n:]
            out[j] = inside.decide(rest, close_of(rest, False))
    return out


_UNSET = object()


class _Inside:
    """Decides tokens from a state inside an open string value or key (read from either escape
    state; a key only from the plain one, with a name of plain bytes so far): by the tail after
    the closing quote where the bytes before it cannot matter, else None (fed whole)."""

    def __init__(self, tracker: UniqueTracker, state: tuple) -> None:
        self.tracker, self.state, self.key = tracker, state, state[1] == G_INKEY
        top = state[0][-1] if state[0] else ()
        known = self.key and top and top[0] == "o" and top[1] >= 0
        self.names, self.text = (known_names(tracker, top) if known else []), state[3][1:]
        self.tails: dict[bytes, bool] = {}
        self.closed: Any = _UNSET

    @classmethod
    def of(cls, tracker: UniqueTracker, state: tuple) -> _Inside | None:
        """A decider for ``state``, or None where tokens must be fed whole."""
        mode, esc = state[1], state[4]
        if mode == G_STR and esc in (0, -1):
            return cls(tracker, state)
        if mode == G_INKEY and not esc and b"\\" not in state[3]:
            return cls(tracker, state)
        return None

    def decide(self, data: bytes, at: int) -> bool | None:
        """The verdict on ``data`` (read from this state) whose closing quote is at ``at``
        (``quote_split.close_of``), or None where it must be fed whole."""
        if at < 0:
            return False if at == -1 and not self.key else None  # a value string stays open
        if self.key and not self._fresh(data, at):
            return None
        tail = data[at + 1:]
        verdict = self.tails.get(tail)
        if verdict is None:
            if self.closed is _UNSET:  # every such quote leads here, up to a fresh key's name
                self.closed = self.tracker.feed(self.state, data[:at + 1], lengths=False)
            verdict = self.closed is None or self.tracker.feed(self.closed, tail, lengths=False) is None
            self.tails[tail] = verdict
        return verdict

    def _fresh(self, data: bytes, at: int) -> bool:
        """Whether ``data`` completes the open key as a fresh extra key's name (plain bytes, a
        name nothing tells apart) and cannot write a second whole key after it."""
        head = data[:at]
        if b"\\" in head or may_write_a_key(data):
            return False
        name = self.text + head
        i = bisect.bisect_left(self.names, name)
        return i == len(self.names) or self.names[i] != name
