"""Which of a step's candidate tokens ``UniqueTracker.feed`` refuses (with ``lengths=False``), for
the runtime member check's masks (``member_mask``), decided a batch at a time.

Inside an open string value, or an open key whose completion is a fresh extra key, the bytes
before a token's closing quote change nothing the check reads, so the token's verdict is its
tail's: what follows the quote, fed once from the state the quote leads to (``quote_split``
files every token's quote and tail per vocabulary). A step's candidates share a few dozen tails,
so a new state costs a feed per distinct tail plus a few array operations, not a feed per token.
The rest are fed whole:
- after an open key, a token that could write a whole second key of the object
  (``member_tokens``' ``live``): refused only if it repeats the first, whose name decides;
- a key completed as a name the check or the path table tells apart from a fresh extra key
  (``member_memo.known_names``), or spelled with an escape;
- whatever comes outside strings, or inside a ``\\u`` escape.
Inside a string value a token that does not close it is never refused (lengths are the string
masks' concern), and neither is one whose quotes are all escaped.
"""

from __future__ import annotations

import bisect
from typing import Any

import numpy as np
from radixlm.constrained.member_memo import known_names
from radixlm.constrained.member_tokens import member_tokens_for
from radixlm.constrained.quote_split import quote_split_for
from radixlm.constrained.unique_items import UniqueTracker
from radixlm.constrained.unique_scan import G_INKEY, G_STR


def refusals(tracker: UniqueTracker, vocab: Any, state: tuple, ids: np.ndarray) -> np.ndarray:
    """Whether ``tracker.feed(state, token, lengths=False)`` refuses each of ``ids`` (int64):
    bool, aligned with ``ids``. A step decides a few dozen at most, so this reads them as Python
    lists: a batch's numpy calls would cost more than its tokens."""
    table, mode, prefix, esc = vocab.token_bytes, state[1], state[3], state[4]
    tokens = ids.tolist()
    if esc not in (0, -1) or not (mode == G_STR or (mode == G_INKEY and not esc and b"\\" not in prefix)):
        return np.array([tracker.feed(state, table[t] or b"", lengths=False) is None for t in tokens], dtype=bool)
    split, e = quote_split_for(vocab), 1 if esc else 0
    close_at, tail_id, tails = split.close_at[e][ids].tolist(), split.tail_id[e][ids].tolist(), split.tails
    fresh = _fresh_closing(tracker, vocab, state, ids, close_at) if mode == G_INKEY else None
    out, verdicts, closed = [False] * len(tokens), {}, _UNSET
    for j, t in enumerate(tokens):
        at = close_at[j]
        if at == -1 and mode == G_STR:
            continue  # stays inside the string value: never refused
        if at >= 0 and (fresh is None or fresh[j]):
            verdict = verdicts.get(tail_id[j])
            if verdict is None:
                if closed is _UNSET:  # every such quote leads to this state, up to a fresh key's name
                    closed = tracker.feed(state, table[t][:at + 1], lengths=False)
                verdict = closed is None or tracker.feed(closed, tails[tail_id[j]], lengths=False) is None
                verdicts[tail_id[j]] = verdict
            out[j] = verdict
            continue
        out[j] = tracker.feed(state, table[t] or b"", lengths=False) is None
    return np.array(out, dtype=bool)


_UNSET = object()


def _fresh_closing(tracker: UniqueTracker, vocab: Any, state: tuple, ids: np.ndarray,
                   close_at: list[int]) -> list[bool]:
    """Which of ``ids`` close the open key ``state[3]`` as a fresh extra key's name: plain bytes
    up to the quote, a name the check and the path table do not tell apart from any other
    (``member_memo.known_names``), and no chance of writing a whole second key (``live``)."""
    frames, table = state[0], vocab.token_bytes
    top = frames[-1] if frames else ()
    names = known_names(tracker, top) if top and top[0] == "o" and top[1] >= 0 else []
    plain, live, text = quote_split_for(vocab).plain_head[0][ids].tolist(), member_tokens_for(vocab).live_set, state[3][1:]
    out = []
    for t, at, ok in zip(ids.tolist(), close_at, plain, strict=True):
        if at < 0 or not ok or t in live:
            out.append(False)
            continue
        name = text + table[t][:at]
        i = bisect.bisect_left(names, name)
        out.append(i == len(names) or names[i] != name)
    return out
