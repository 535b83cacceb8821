"""Where each output token of a request came from, for callers that ask (``return_token_origins``).

Codes: ``free`` (sampled without a constraint), ``masked`` (sampled under the grammar's mask),
``forced`` (text the grammar forced, spliced by jump-forward without sampling), ``closed`` (the
closing completion budget-aware completion spliced when ``max_new_tokens`` ran out). A splice's
leading ids that re-spell text the model had sampled keep the sampled code: only the bytes the
grammar added count as forced. Prompt tokens are ``cache`` (read from the radix cache) or
``prefill`` (computed); the result carries their counts, not one code per prompt token.

A jump-forward splice may rewrite the last tokens already streamed, so a reader gets
``(offset, codes)`` pairs: drop what it holds from ``offset`` and append ``codes``.
"""

from __future__ import annotations

OUTPUT_ORIGINS = ("free", "masked", "forced", "closed")
PROMPT_ORIGINS = ("cache", "prefill")


class TokenOrigins:
    """The origin code of each output token, and what a stream reader was last handed."""

    __slots__ = ("codes", "_sent", "_changed_from")

    def __init__(self) -> None:
        self.codes: list[str] = []
        self._sent = 0  # codes handed to the stream so far
        self._changed_from = 0  # lowest index rewritten since the last hand-out

    def append(self, code: str) -> None:
        self.codes.append(code)

    def replace_tail(self, keep: int, codes: list[str]) -> None:
        """Keep the first ``keep`` codes and append ``codes`` (a splice)."""
        del self.codes[keep:]
        self.codes.extend(codes)
        self._changed_from = min(self._changed_from, keep)

    def take(self) -> int:
        """The offset from which a stream reader must replace its codes; marks all as handed out."""
        offset = min(self._sent, self._changed_from)
        self._sent = self._changed_from = len(self.codes)
        return offset


def splice_codes(num_new: int, resampled: int, closed: bool) -> list[str]:
    """The codes of a splice's ``num_new`` ids whose first ``resampled`` re-spell sampled text."""
    return ["masked"] * resampled + ["closed" if closed else "forced"] * (num_new - resampled)
