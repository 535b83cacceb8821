"""``Constraint``: every call the engine makes on a constrained request's grammar, in one protocol.

The scheduler, the model runner and the output builder never import the grammar engine:
``req.constraint`` is any object with these methods (``radixlm.runtime.engine.constraints``
builds one per request, ``RequestMatcher`` or its ``ReasoningGate``). Who calls what:

- the scheduler: ``accept`` each sampled token and apply the answer (finish now or go on), then
  ``close`` (the budget-aware closing completion, asked after every token, as one token a step
  would); ``draft`` (the text the grammar forces, as the model's tokens) and ``validate`` (how
  much of a draft the grammar allows) when it proposes draft tokens;
- the model runner: ``fill_mask`` for the logit mask, and ``fill_mask``/``accept``/``rollback``
  to mask every draft position under the state after the drafts before it (``fill_draft_masks``);
- the output builder: ``violations``, ``notes``, ``budget_closed``.

Nothing calls back into the scheduler; the scheduler applies every answer itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from radixlm.runtime.scheduler.req import FinishReason


@dataclass(frozen=True)
class Splice:
    """A budget close: append ``new_ids`` (a closing completion the model did not write).

    ``terminated``: the grammar is complete after the splice. ``closed``: the new ids close the
    output early; the request finishes as ``length`` (``stop`` when ``closed`` is False and the
    grammar terminated: the text was already complete). The constraint has already accepted the
    new ids when it returns this.
    """

    new_ids: tuple[int, ...]
    terminated: bool
    closed: bool = False


class Constraint(Protocol):
    """A request's constraint, as the scheduler, the runner and the output builder see it."""

    def fill_mask(self, bitmask_row: Any) -> None:
        """Allowed next tokens into an int32 bitmask row ``[ceil(vocab / 32)]`` (a CPU tensor)."""

    def accept(self, token: int) -> FinishReason | None:
        """Advance over ``token``; the reason to finish now, or None to go on."""

    def rollback(self, n: int) -> None:
        """Undo the last ``n`` accepted tokens (a verified draft's rejected tail, a mask walk)."""

    def validate(self, tokens: list[int]) -> int:
        """How many leading ``tokens`` would be accepted in a row; the state does not move."""

    def draft(self, max_tokens: int) -> list[int]:
        """The continuation the grammar forces from here, as at most ``max_tokens`` of the
        model's tokens that it accepts in a row (empty when nothing is forced). A proposal only:
        the model verifies each token; the state does not move."""

    def close(self, output_len: int, max_output_len: int) -> Splice | None:
        """The budget-aware closing splice when the budget is about to run out, else None."""

    def violations(self, text: str) -> list[str]:
        """Why ``text`` does not satisfy the constraint (empty when it does)."""

    @property
    def notes(self) -> list[str]:
        """Restrictions the compiler applied, and why the output ran out of budget (if it did)."""

    @property
    def budget_closed(self) -> dict[str, Any] | None:
        """``{"closed": True, "tokens": N}`` once the budget close added ``N`` tokens, else None."""


def fill_draft_masks(constraint: Constraint, draft: list[int], rows: Any) -> None:
    """Mask rows for a verified draft: ``rows[j]`` allows the tokens valid after ``draft[:j]``
    (``len(draft) + 1`` rows). The constraint ends where it started."""
    taken = 0
    try:
        for j, token in enumerate(draft):
            constraint.fill_mask(rows[j])
            constraint.accept(token)
            taken += 1
        constraint.fill_mask(rows[len(draft)])
    finally:
        constraint.rollback(taken)
