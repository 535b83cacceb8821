"""What the scheduler asks a constrained request's grammar, and the answers it applies itself.

The scheduler never imports the grammar engine: ``req.matcher`` is any object with these two
methods (``radixlm.runtime.engine.request_matcher.RequestMatcher`` in the engine). The scheduler
asks after each sampled token and applies the answer (finish the request; splice the tail and
re-queue it); nothing calls back into the scheduler.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from radixlm.runtime.scheduler.req import FinishReason


@dataclass(frozen=True)
class Splice:
    """Jump-forward: drop the last ``num_drop`` output tokens and append ``new_ids`` (forced text).

    ``terminated``: the grammar is complete after the splice (the request finishes as ``stop``).
    ``closed``: the new ids are a closing completion the model did not write (budget-aware
    completion): the request finishes as ``length``, whether or not the grammar terminated.
    ``resampled``: how many leading ``new_ids`` re-spell the dropped tokens' text (the model sampled
    that text; only the rest is forced).
    The matcher has already moved to the spliced state when it returns this.
    """

    num_drop: int
    new_ids: tuple[int, ...]
    terminated: bool
    closed: bool = False
    resampled: int = 0


class Constraint(Protocol):
    """A request's constraint as the scheduler sees it."""

    def accept(self, token: int) -> FinishReason | None:
        """Advance over the sampled ``token``; the reason to finish now, or None to go on."""

    def splice(self, output_ids: list[int], max_output_len: int) -> Splice | None:
        """The forced continuation after ``output_ids`` (cut so the output stays within
        ``max_output_len`` tokens), or None when nothing is forced or jump-forward is off."""
