"""Where each output token of a request came from, for callers that ask (``return_token_origins``).

Codes: ``free`` (sampled without a constraint), ``masked`` (sampled under the grammar's mask),
``forced`` (text the grammar forced, proposed as a draft and accepted by the model: what it would
have sampled), ``drafted`` (a draft from the prompt or the radix cache, accepted by the model),
``closed`` (the closing completion budget-aware completion appended when ``max_new_tokens`` ran
out). Prompt tokens are ``cache`` (read from the radix cache) or ``prefill`` (computed); the result
carries their counts, not one code per prompt token.

A reader gets ``(offset, codes)`` pairs: drop what it holds from ``offset`` and append ``codes``
(output is only ever appended, so ``offset`` is where the last hand-out ended).
"""

from __future__ import annotations

OUTPUT_ORIGINS = ("free", "masked", "forced", "drafted", "closed")
PROMPT_ORIGINS = ("cache", "prefill")


class TokenOrigins:
    """The origin code of each output token, and what a stream reader was last handed."""

    __slots__ = ("codes", "_sent")

    def __init__(self) -> None:
        self.codes: list[str] = []
        self._sent = 0  # codes handed to the stream so far

    def append(self, code: str) -> None:
        self.codes.append(code)

    def take(self) -> int:
        """The offset from which a stream reader appends its codes; marks all as handed out."""
        offset, self._sent = self._sent, len(self.codes)
        return offset
