"""``RequestMatcher``: a request's grammar matcher with the decisions the scheduler asks of it.

It implements the scheduler's ``Constraint`` (``accept``, ``splice``) over a
``constrained.GrammarMatcher``; the model runner calls ``fill_mask`` for the logit mask, and the
result builder asks ``violations`` and ``notes``. One per request; the compiled grammar under it
is shared.

- ``accept``: the matcher takes the sampled token; a terminated grammar finishes the request as
  ``stop`` (``matched`` is the EOS id when EOS ended it, else None); a rejected token (only EOS can
  be, at an accepting state) ends it too.
- ``splice``: when the output budget is about to run out, the grammar's completion
  (``budget_close``); otherwise, when the grammar forces a continuation, drop ``num_drop`` output
  tokens and append the re-tokenised forced text (``constrained.jump_forward``), cut to the output
  budget. The matcher moves to the spliced state before the splice is returned.
"""

from __future__ import annotations

from typing import Any

from radixlm.constrained import GrammarMatcher, jump_forward
from radixlm.runtime.engine.budget_close import BudgetClose
from radixlm.runtime.scheduler.constraint import Splice
from radixlm.runtime.scheduler.req import FinishReason


class RequestMatcher:
    """One request's constraint; ``jump_forward=False`` splices no forced text, ``budget_aware``
    False never closes the output early."""

    def __init__(self, matcher: GrammarMatcher, tokenizer: Any, eos_token_ids: frozenset[int],
                 jump_forward: bool, budget_aware: bool = True) -> None:
        self.matcher = matcher
        self.tokenizer = tokenizer
        self.eos_token_ids = eos_token_ids
        self.jump_forward = jump_forward
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

    def splice(self, output_ids: list[int], max_output_len: int) -> Splice | None:
        """The completion when the budget is about to run out, else the forced continuation after
        ``output_ids`` within ``max_output_len`` tokens, or None."""
        if self.budget is not None and not self.matcher.is_terminated():
            close = self.budget.splice(max_output_len - len(output_ids))
            if close is not None:
                return close
        if not self.jump_forward:
            return None
        jf = jump_forward(self.matcher, self.tokenizer, output_ids)
        if jf is None or (not jf.new_ids and not jf.num_drop):
            return None
        room = max_output_len - (len(output_ids) - jf.num_drop)
        new_ids = tuple(jf.new_ids[:max(room, 0)])
        self.matcher.rollback(jf.num_drop)
        for token in new_ids:
            self.matcher.accept_token(token)
        resampled = self._resampled(output_ids[len(output_ids) - jf.num_drop:], new_ids)
        return Splice(jf.num_drop, new_ids, self.matcher.is_terminated(), resampled=resampled)

    def _resampled(self, dropped: list[int], new_ids: tuple[int, ...]) -> int:
        """How many leading ``new_ids`` start inside the dropped tokens' (sampled) bytes."""
        sampled = sum(len(self.tokenizer.id_to_bytes(t)) for t in dropped)
        count = at = 0
        for token in new_ids:
            if at >= sampled:
                break
            count += 1
            at += len(self.tokenizer.id_to_bytes(token))
        return count

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
