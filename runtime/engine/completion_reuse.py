"""``LastCompletion``: budget-aware completion's last search result, carried forward while it still
ends the document, so most steps of the budget window need no completion search.

A search (``GrammarMatcher.completion_bytes``) costs milliseconds at a 152k vocabulary, and near
the end of the budget it was run for every request at every step. Its result stays useful: with
``C`` the completion found when the text was ``T``, and ``W`` what the model wrote since, a
completion of ``T + W`` is ``C`` itself (inside a string value, a number) or ``C`` less the part
of its start that ``W`` wrote (``W`` closed the string: ``C[k:]`` where ``W`` ends with ``C[:k]``;
jump-forward spliced the key ``C`` starts with). Each candidate, shortest first, is tokenised and
validated from the matcher's state with EOS after it (``validate_tokens``, no search): the first
that passes is a valid completion, so the shortest one is no longer.
"""

from __future__ import annotations

from typing import Any

MAX_CANDIDATES = 4  # overlaps tried besides C itself: a miss costs a tokenisation and a validation each


class LastCompletion:
    """The last completion of one request's matcher: its bytes, and the text length it was for."""

    def __init__(self, matcher: Any, tokenizer: Any) -> None:
        self.matcher = matcher  # the request's GrammarMatcher
        self.tokenizer = tokenizer
        self._data: bytes | None = None
        self._at = 0  # len(matcher.accepted_bytes()) when ``_data`` completed it
        self.hits = 0  # steps a carried completion answered

    def remember(self, data: bytes | None) -> None:
        """``data`` completes the matcher's current text (None: forget)."""
        self._data = data
        if data is not None:
            self._at = len(self.matcher.accepted_bytes())

    def tokens(self) -> list[int] | None:
        """A completion of the current text carried from the last one, as token ids (None: none
        found, search). Remembers the one it returns."""
        data = self._data
        if data is None:
            return None
        text = self.matcher.accepted_bytes()
        if len(text) < self._at:  # rolled back (jump-forward dropped tokens)
            return None
        written = text[self._at:]
        eos = self.matcher.grammar.vocab.eos_token_ids[0]
        for cut in _cuts(written, data):
            ids = self._encode(data[cut:])
            if ids is not None and self.matcher.validate_tokens([*ids, eos]) == len(ids) + 1:
                self._data, self._at = data[cut:], len(text)
                self.hits += 1
                return ids
        return None

    def _encode(self, data: bytes) -> list[int] | None:
        try:
            return list(self.tokenizer.encode(data.decode("utf-8"), add_special_tokens=False))
        except UnicodeDecodeError:
            return None


def _cuts(written: bytes, data: bytes) -> list[int]:
    """Where ``data``'s remainder may start: after each prefix of it that ``written`` ends with,
    longest first (the shortest candidate), then 0 (``data`` whole)."""
    cuts = [k for k in range(min(len(written), len(data)), 0, -1) if written.endswith(data[:k])]
    return cuts[:MAX_CANDIDATES] + [0]
