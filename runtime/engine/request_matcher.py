"""``RequestMatcher``: a request's grammar matcher behind the engine's ``Constraint`` protocol.

One per request (``runtime/scheduler/constraint.py`` lists who calls what); the compiled grammar
under it is shared.

- ``accept``: the matcher takes the sampled token; a terminated grammar finishes the request as
  ``stop`` (``matched`` is the EOS id when EOS ended it, else None); a rejected token (only EOS can
  be, at an accepting state) ends it too.
- ``draft``: the text the grammar forces from here, tokenised as the model's tokenizer writes it,
  cut to what the grammar accepts: a proposal the model verifies (speculative decoding), never a
  splice, so forced text costs no decode step and changes no output.
- ``close``: when the output budget is about to run out, the grammar's completion
  (``budget_close``), accepted before it is returned.
"""

from __future__ import annotations

from typing import Any

from radixlm.constrained import GrammarMatcher
from radixlm.runtime.engine.budget_close import BudgetClose
from radixlm.runtime.scheduler.constraint import Splice
from radixlm.runtime.scheduler.req import FinishReason


class RequestMatcher:
    """One request's constraint; ``budget_aware`` False never closes the output early."""

    def __init__(self, matcher: GrammarMatcher, tokenizer: Any, eos_token_ids: frozenset[int],
                 budget_aware: bool = True) -> None:
        self.matcher = matcher
        self.tokenizer = tokenizer
        self.eos_token_ids = eos_token_ids
        self.budget = BudgetClose(matcher, tokenizer) if budget_aware else None

    def fill_mask(self, bitmask_row: Any) -> None:
        """Allowed next tokens into an int32 bitmask row ``[ceil(vocab / 32)]``."""
        self.matcher.fill_mask(bitmask_row)

    def accept(self, token: int) -> FinishReason | None:
        """Advance over ``token``; the reason to finish now, or None."""
        eos = token in self.eos_token_ids
        if not self.matcher.accept_token(token):
            if eos:
                return FinishReason("stop", token)
            return FinishReason("abort", message=f"constraint rejected sampled token {token}")
        if self.matcher.is_terminated():
            return FinishReason("stop", token if eos else None)
        return None

    def rollback(self, n: int) -> None:
        """Undo the last ``n`` accepted tokens."""
        self.matcher.rollback(n)

    def validate(self, tokens: list[int]) -> int:
        """How many leading ``tokens`` (no EOS) the grammar accepts in a row; no state change."""
        return self.matcher.validate_tokens(list(tokens)) if tokens else 0

    def draft(self, max_tokens: int) -> list[int]:
        """The forced continuation as at most ``max_tokens`` tokens the grammar accepts."""
        if max_tokens <= 0 or self.matcher.is_terminated():
            return []
        forced = self.matcher.forced_continuation()
        if not forced:
            return []
        ids = list(self.tokenizer.encode(forced, add_special_tokens=False))[:max_tokens]
        return ids[:self.validate(ids)]

    def close(self, output_len: int, max_output_len: int) -> Splice | None:
        """The closing completion when the budget is about to run out, else None."""
        if self.budget is None or self.matcher.is_terminated():
            return None
        return self.budget.splice(max_output_len - output_len)

    @property
    def budget_closed(self) -> dict[str, Any] | None:
        """``{"closed": True, "tokens": N}`` once budget-aware completion closed the output with
        ``N`` tokens the model did not write, else None."""
        n = self.budget.closed_tokens if self.budget is not None else None
        return None if n is None else {"closed": True, "tokens": n}

    @property
    def notes(self) -> list[str]:
        """Restrictions the compiler applied to fit the schema, and why the output ran out of
        budget before it could be completed (empty for most requests)."""
        note = self.budget.note if self.budget is not None else None
        return self.matcher.grammar.notes + ([note] if note else [])

    def violations(self, text: str) -> list[str]:
        """Why ``text`` does not satisfy the constraint (empty when it does)."""
        return self.matcher.grammar.validate_output(text)
