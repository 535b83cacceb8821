"""``ReasoningGate``: a constraint that starts only once the model's reasoning section has closed.

A reasoning model writes its thinking first (``<think>...</think>``, or harmony's analysis channel)
and the answer after it. A ``response_format`` or a forced tool call constrains the *answer*: were
the grammar applied from the first token, the model could not think at all. The gate wraps a
request's ``RequestMatcher``: until the reasoning-end marker has been generated the mask allows
every token and ``accept`` only watches; from the token that completes the marker on, a fresh
matcher (never fed the thinking) takes every decision.

The marker is recognised on token ids (the marker as the tokenizer encodes it: what a model
trained on that tokenizer writes) and on the decoded text of the last few tokens, because a model
may spell the marker with other tokens (``</`` + ``think>``) or inside a longer token
(``</think>\\n\\n``). Text after the marker inside the token that completed it is not under the
grammar; it is whitespace in practice, which JSON allows around a value.

A thinking budget is part of ``max_new_tokens``: when it runs out before the marker, the request
finishes as ``length`` with the grammar never applied, and the server reports the text as
reasoning rather than as an (invalid) answer.
"""

from __future__ import annotations

from typing import Any

from radixlm.runtime.engine.request_matcher import RequestMatcher
from radixlm.runtime.scheduler.constraint import Splice
from radixlm.runtime.scheduler.req import FinishReason

NOT_CLOSED = "the reasoning section did not end, so the constraint never applied"


class ReasoningGate:
    """The constraint of a request whose grammar applies after ``end_text`` (see the module doc)."""

    def __init__(self, inner: RequestMatcher, tokenizer: Any, end_text: str, end_ids: list[int]) -> None:
        if not end_text:
            raise ValueError("reasoning_end must be a non-empty string")
        self.inner = inner  # fresh: it sees only the tokens after the marker
        self.tokenizer = tokenizer
        self.end_text = end_text
        self.end_ids = list(end_ids)
        # enough trailing tokens to hold the marker however it was spelled (a token is >= 1 char)
        self.window = max(len(self.end_ids), len(end_text)) + 1
        self.watched: list[int] = []  # output tokens while the reasoning is open
        self.open = True

    @property
    def grammar_start(self) -> int:
        """How many output tokens came before the grammar took over (all of them while open)."""
        return len(self.watched)

    def fill_mask(self, bitmask_row: Any) -> None:
        """Every token while reasoning (the runner's row starts all ones); the grammar's after."""
        if self.open:
            bitmask_row.fill_(-1)  # int32 -1: every bit set
        else:
            self.inner.fill_mask(bitmask_row)

    def accept(self, token: int) -> FinishReason | None:
        """Watch ``token`` while reasoning (never finishing: EOS and stops are the scheduler's);
        after the marker, the grammar decides."""
        if not self.open:
            return self.inner.accept(token)
        self.watched.append(token)
        if self._marker_done():
            self.open = False
        return None

    def _marker_done(self) -> bool:
        n = len(self.end_ids)
        if n and self.watched[-n:] == self.end_ids:
            return True
        tail = self.tokenizer.decode(self.watched[-self.window:], skip_special_tokens=False)
        # the gate closes the moment the marker appears, so a match in the window is always new
        return self.end_text in tail

    def rollback(self, n: int) -> None:
        """Undo the last ``n`` tokens: the grammar's first, then the watched ones (reopening the
        reasoning section when the token that completed the marker is undone)."""
        inner_n = 0 if self.open else min(n, self.inner.matcher.num_accepted)
        self.inner.rollback(inner_n)
        n -= inner_n
        if n:
            if n > len(self.watched):
                raise ValueError(f"cannot roll back {n} more tokens: {len(self.watched)} watched")
            self.open = True
            del self.watched[len(self.watched) - n:]

    def validate(self, tokens: list[int]) -> int:
        """How many leading ``tokens`` would be accepted in a row (the marker may close in between)."""
        if not self.open:
            return self.inner.validate(tokens)
        taken = 0
        try:
            for token in tokens:
                if not self.open and self.inner.validate([token]) != 1:
                    break
                self.accept(token)
                taken += 1
        finally:
            self.rollback(taken)
        return taken

    def draft(self, max_tokens: int) -> list[int]:
        """The grammar's forced continuation once the reasoning has closed (none while it is open)."""
        return [] if self.open else self.inner.draft(max_tokens)

    def close(self, output_len: int, max_output_len: int) -> Splice | None:
        """The answer's budget close, counted over the tokens after the marker only."""
        if self.open:
            return None
        start = self.grammar_start
        return self.inner.close(output_len - start, max_output_len - start)

    @property
    def notes(self) -> list[str]:
        return self.inner.notes

    @property
    def budget_closed(self) -> dict | None:
        """The answer's budget close (``RequestMatcher.budget_closed``)."""
        return self.inner.budget_closed

    def violations(self, text: str) -> list[str]:
        """Why the answer (the text after the marker) does not satisfy the grammar."""
        if self.open:
            return [NOT_CLOSED]
        _, found, answer = text.partition(self.end_text)
        return self.inner.violations(answer if found else text)
