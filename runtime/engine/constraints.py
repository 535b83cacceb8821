"""The request's ``Constraint`` implementations (``runtime/scheduler/constraint.py`` lists who calls
what): ``RequestMatcher`` (a request's grammar matcher), ``ReasoningGate`` (the grammar applied only
after the model's reasoning), ``BudgetClose`` (budget-aware completion) and ``LastCompletion`` (its
last completion carried forward).

``RequestMatcher``: one per request; the compiled grammar under it is shared.

- ``accept``: the matcher takes the sampled token; a terminated grammar finishes the request as
  ``stop`` (``matched`` is the EOS id when EOS ended it, else None); a rejected token (only EOS can
  be, at an accepting state) ends it too.
- ``draft``: the text the grammar forces from here, tokenised as the model's tokenizer writes it,
  cut to what the grammar accepts: a proposal the model verifies (speculative decoding), never a
  splice, so forced text costs no decode step and changes no output.
- ``close``: when the output budget is about to run out, the grammar's completion
  (``BudgetClose``), accepted before it is returned.

``BudgetClose``: budget-aware completion, so constrained output parses when the budget allows.

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
found is carried forward first (``LastCompletion``: validated from here, no search): while it
still ends the document with room to spare, the shortest one does too, so the step needs no
search; the search runs when none carries over or the splice may be due, so a step the check lets
pass is one where a search would not have spliced either.

``LastCompletion``: budget-aware completion's last search result, carried forward while it still
ends the document, so most steps of the budget window need no completion search.

A search (``GrammarMatcher.completion_bytes``) costs milliseconds at a 152k vocabulary, and near
the end of the budget it was run for every request at every step. Its result stays useful: with
``C`` the completion found when the text was ``T``, and ``W`` what the model wrote since, a
completion of ``T + W`` is ``C`` itself (inside a string value, a number) or ``C`` less the part
of its start that ``W`` wrote (``W`` closed the string: ``C[k:]`` where ``W`` ends with ``C[:k]``;
jump-forward spliced the key ``C`` starts with). Each candidate, shortest first, is tokenised and
validated from the matcher's state with EOS after it (``validate_tokens``, no search): the first
that passes is a valid completion, so the shortest one is no longer.

``ReasoningGate``: a constraint that starts only once the model's reasoning section has closed.

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

from radixlm.constrained import GrammarMatcher
from radixlm.runtime.scheduler.constraint import Splice
from radixlm.runtime.scheduler.req import FinishReason

NOT_CLOSED = "the reasoning section did not end, so the constraint never applied"
MARGIN = 2  # tokens to spare: one more sampled token may lengthen the completion
WINDOW = 64  # within this many tokens of the end the completion is re-estimated every step
BYTES_PER_TOKEN = 16  # search bound: a completion longer than this per token left cannot fit
MAX_CANDIDATES = 4  # overlaps tried besides C itself: a miss costs a tokenisation and a validation each


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
