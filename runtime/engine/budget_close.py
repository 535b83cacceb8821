"""``BudgetClose``: budget-aware completion, so constrained output parses when the budget allows.

A model that runs to ``max_new_tokens`` stops wherever it is, mid-string, and an "always valid"
output would not parse. After each step this asks the grammar for a short completion of the text
so far (``GrammarMatcher.completion_bytes``), tokenises it, and once what is left of the budget
barely holds it (``MARGIN`` tokens to spare), the completion is appended at once and the request
finishes as ``length`` (the model did not finish it: OpenAI clients raise their length error), its
text valid; ``closed_tokens`` says how many tokens the closing took (``meta_info["budget_closed"]``).
An output the model completed itself stops as ``stop``. When even the completion does not fit,
nothing is spliced, the request ends as ``length`` and ``note`` says why (``meta_info["constraint_notes"]``).

Cost: the completion is computed when the budget left is within ``WINDOW`` tokens or within twice
the last estimate (a long ``minLength`` string needs an early start), not at every step. A search
that found nothing (the byte bound scales with the budget left, so nothing fits) is tried again
only once the budget left has halved: the search runs in the scheduler's loop, and repeating a
failing one every step would stall every other request. Within the window, the last completion
found is carried forward first (``completion_reuse``: validated from here, no search): while it
still ends the document with room to spare, the shortest one does too, so the step needs no
search; the search runs when none carries over or the splice may be due, so a step the check lets
pass is one where a search would not have spliced either.
"""

from __future__ import annotations

from typing import Any

from radixlm.runtime.engine.completion_reuse import LastCompletion
from radixlm.runtime.scheduler.constraint import Splice

MARGIN = 2  # tokens to spare: one more sampled token may lengthen the completion
WINDOW = 64  # within this many tokens of the end the completion is re-estimated every step
BYTES_PER_TOKEN = 16  # search bound: a completion longer than this per token left cannot fit


class BudgetClose:
    """Watches one request's budget; ``splice`` is the closing splice once it is due."""

    def __init__(self, matcher: Any, tokenizer: Any) -> None:
        self.matcher = matcher  # the request's GrammarMatcher
        self.tokenizer = tokenizer
        self.need: int | None = None  # tokens the last completion took
        self.short_by: int | None = None  # the completion did not fit: tokens missing
        self.failed_at: int | None = None  # room when the last search found no completion
        self.closed_tokens: int | None = None  # tokens of the closing completion, once spliced
        self.last = LastCompletion(matcher, tokenizer)  # the last completion, carried forward
        self.searches = 0  # completion searches run (the carried completion saves the others)

    def splice(self, room: int) -> Splice | None:
        """The completion as a splice when ``room`` (tokens left) barely holds it, else None."""
        m = self.matcher
        if m.is_accepting():
            # complete already: with the budget nearly gone, stop here rather than run to length
            return Splice((), True) if room <= MARGIN else None
        if self.need is not None and room > max(WINDOW, 2 * self.need + MARGIN):
            return None
        if self.failed_at is not None and room > self.failed_at // 2:
            return None
        if self._still_completes(room):
            return None
        ids = self._completion_ids(room)
        if ids is None:
            self.failed_at = room
            return None
        self.failed_at = None
        self.need = len(ids)
        if len(ids) > room:
            self.short_by = len(ids) - room
            return None
        self.short_by = None
        if len(ids) + MARGIN < room:
            return None
        for t in ids:
            if not m.accept_token(t):
                raise RuntimeError("the grammar rejected its own completion")
        self.closed_tokens = len(ids)
        return Splice(tuple(ids), m.is_accepting(), closed=True)

    def _still_completes(self, room: int) -> bool:
        """Whether the last completion still ends the document from here with more than ``MARGIN``
        tokens to spare: then the shortest one does too (the splice is not due) and the search can
        wait. False when it may be due: the search alone decides that."""
        ids = self.last.tokens()
        if ids is None or len(ids) + MARGIN >= room:
            return False
        self.need = len(ids)  # an upper bound of the shortest: the window only narrows
        self.short_by = None
        return True

    def _completion_ids(self, room: int) -> list[int] | None:
        """The completion's tokens: the tokenizer's own when they are a path through the grammar,
        else single-byte tokens (a text that ends inside a character); None when there is none."""
        m = self.matcher
        self.searches += 1
        data = m.completion_bytes(max_bytes=BYTES_PER_TOKEN * max(room, 1) + 64)
        self.last.remember(data)
        if data is None:
            return None
        try:
            ids = list(self.tokenizer.encode(data.decode("utf-8"), add_special_tokens=False))
            if m.validate_tokens(ids) == len(ids):
                return ids
        except UnicodeDecodeError:
            pass
        byte_ids = m.grammar.vocab.byte_tokens
        # the text ends inside a character: its last bytes as single-byte tokens, the rest as the
        # tokenizer writes it (all of it byte by byte costs a token per byte of the closing)
        lead = 0
        while lead < len(data) and data[lead] & 0xC0 == 0x80:
            lead += 1
        head = [byte_ids[b] for b in data[:lead]]
        try:
            ids = head + list(self.tokenizer.encode(data[lead:].decode("utf-8"), add_special_tokens=False))
            if lead and min(head) >= 0 and m.validate_tokens(ids) == len(ids):
                return ids
        except UnicodeDecodeError:
            pass
        ids = [byte_ids[b] for b in data]
        return ids if min(ids, default=0) >= 0 else None

    @property
    def note(self) -> str | None:
        """Why the output may end incomplete (None while the budget suffices)."""
        if self.matcher.is_accepting():
            return None
        if self.short_by is not None:
            return (f"max_new_tokens ran out before a valid end fit: completing the output needs "
                    f"{self.short_by} more tokens than were left")
        if self.failed_at is not None:
            return (f"max_new_tokens ran out before a valid end fit: no completion was found within "
                    f"{self.failed_at} tokens")
        return None
