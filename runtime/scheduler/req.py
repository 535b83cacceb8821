"""``Req``: one generation request as the scheduler sees it (plain Python, no torch).

Memory regions of a request, along ``fill_ids = origin_input_ids + output_ids``::

    position: 0                 cache_protected_len        kv_len             len(fill_ids)
              |<-- radix-cache nodes -->|<-- owned slots -->|<-- no KV yet ---->|
              |  shared, locked through |  allocated by this|  rest of prompt not yet
              |  last_node (not ours to |  request; freed or|  prefilled, and the last
              |  free)                  |  inserted at end  |  sampled token
    kv.slots[i] is the KV slot of position i, for i < kv.kv_len.

One step extends ``fill_ids[kv_len : kv_len + extend_len]`` (a whole prompt, one chunk of it,
or the single last token in a decode step) and then ``kv_len += extend_len``. A running
(decoding) request always has ``kv_len == len(fill_ids) - 1``.

The state is split by owner: ``kv`` (``KVState``, changed by ``ReqCache``), ``logprobs``
(``LogprobState``), ``decoded`` (``TextState``: text and stop-string search), ``constraint`` (the
request's grammar as the scheduler, the runner and the output builder see it, ``constraint.py``),
``drafts`` (the drafter's per-request state, ``speculation.py``), and two opaque slots that other
layers own: ``delivery`` (the engine's stream offsets and output handle) and ``sampler_state``
(the model runner's per-request generator).

A speculative decode step extends the last token and ``k`` draft tokens (``extend_len == k + 1``);
the positions of rejected drafts are handed back right after (``ReqCache.rewind``), so between
steps a running request again has ``kv_len == len(fill_ids) - 1``.

``KVState``: its slots and lengths, changed only through ``ReqCache`` (admit, cache_unfinished,
release); the scheduler sets ``extend_len`` (how many positions one step computes).

``TextState``: the decoded output text and its stop-string search. Its ``detokenizer`` is any
object with ``step(new_ids) -> str``, ``finish() -> str`` and ``fresh()`` (a new one with the same
settings and no ids); None in scheduler tests, which then have no text and no stop strings.

``LogprobState``: what a request asked for in logprobs and what it has collected. Prompt logprobs
cover positions ``start_len .. prompt_len - 1``; the first entry is always None (no token predicts
position ``start_len`` inside the returned span), as in SGLang. They are computed once: a retracted
request that had not finished them starts over, one that had keeps them. Output logprobs are one
entry per output token; a token spliced in by jump-forward was never sampled and gets None.

``TokenOrigins``: where each output token came from, for callers that ask (``return_token_origins``).
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

import itertools
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from radixlm.runtime.sampling_params import SamplingParams

if TYPE_CHECKING:
    from radixlm.runtime.scheduler.constraint import Constraint

_arrival = itertools.count()
Top = list[tuple[float, int]]  # [(logprob, token_id), ...], best first
OUTPUT_ORIGINS = ("free", "masked", "forced", "drafted", "closed")
PROMPT_ORIGINS = ("cache", "prefill")


@dataclass
class FinishReason:
    """Why a request stopped: ``type`` is ``stop`` | ``length`` | ``abort``."""

    type: str
    matched: str | int | None = None
    message: str | None = None

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"type": self.type, "matched": self.matched}
        if self.message is not None:
            d["message"] = self.message
        return d


class Req:
    """A request's token ids and lengths, its parts (see the module docstring) and its outcome."""

    def __init__(self, rid: str, input_ids: list[int], params: SamplingParams, *,
                 return_logprob: bool = False, logprob_start_len: int | None = None,
                 top_logprobs_num: int = 0, stream: bool = False, detokenizer: Any = None,
                 extra_key: str | None = None, seed_offset: int = 0) -> None:
        self.rid = rid
        self.group_rid = rid  # the caller's rid (siblings of an n > 1 request share it)
        self.origin_input_ids = list(input_ids)
        self.params = params
        self.output_ids: list[int] = []
        self.arrival = next(_arrival)  # retraction picks the youngest (largest) first
        self.caller = self.arrival  # which call submitted it (the engine sets one id per call): fair admission
        self.extra_key = extra_key
        self.seed_offset = seed_offset  # sibling i of an n > 1 request samples with seed + i
        self.stream = stream
        self.kv = KVState()
        self.logprobs = LogprobState(
            return_logprob, logprob_start_len if logprob_start_len is not None else len(input_ids),
            top_logprobs_num)
        self.decoded = TextState(detokenizer)
        self.constraint: Constraint | None = None  # set once the request's grammar compiled
        self.drafts: Any = None  # the drafter's state (``speculation.DraftState``), made on first use
        # statistics
        self.cached_tokens = 0  # prompt tokens served from the radix cache at first admission
        self.admitted_once = False
        self.forward_passes = 0
        self.num_retractions = 0
        self.first_token_at: float | None = None  # time.perf_counter() when the first output token came
        self.queued_at: float | None = None  # time.perf_counter() when it entered the waiting queue
        self.queue_time: float | None = None  # seconds from queued_at to its first step (SGLang's queue time)
        self.forced_tokens = 0  # output tokens the grammar forced, proposed as drafts and verified
        self.closed_tokens = 0  # output tokens budget-aware completion added
        self.spec_verify_ct = 0  # decode steps that verified drafts (SGLang's spec_verify_ct)
        self.spec_draft_tokens = 0  # draft tokens proposed
        self.spec_accepted_tokens = 0  # draft tokens the model accepted
        self.constraint_stats: dict[str, Any] | None = None  # the grammar compiler's: compile_s, wait_s, cached
        self.origins = TokenOrigins() if params.return_token_origins else None
        # outcome
        self.finished_reason: FinishReason | None = None
        self.error: Exception | None = None  # raised in the caller instead of a result
        # owned by other layers
        self.delivery: Any = None  # the engine's ``Delivery`` (output handle, stream offsets)
        self.sampler_state: Any = None  # the sampler's per-request generator (seeded requests)

    # ------------------------------------------------------------------ lengths

    @property
    def fill_ids(self) -> list[int]:
        return self.origin_input_ids + self.output_ids

    def fill_slice(self, start: int, end: int) -> list[int]:
        """``fill_ids[start:end]`` (0 <= start <= end) without building the whole ``fill_ids``."""
        prompt = self.origin_input_ids
        p = len(prompt)
        if end <= p:
            return prompt[start:end]
        if start >= p:
            return self.output_ids[start - p:end - p]
        return prompt[start:] + self.output_ids[:end - p]

    @property
    def fill_len(self) -> int:
        return len(self.origin_input_ids) + len(self.output_ids)

    @property
    def prompt_len(self) -> int:
        return len(self.origin_input_ids)

    @property
    def output_len(self) -> int:
        return len(self.output_ids)

    @property
    def remaining_new_tokens(self) -> int:
        return max(self.params.max_new_tokens - len(self.output_ids), 0)

    @property
    def prefill_only(self) -> bool:
        """``max_new_tokens == 0``: prefill (and cache) the prompt, sample nothing."""
        return self.params.max_new_tokens == 0

    @property
    def wants_input_logprobs(self) -> bool:
        """Prompt logprobs still to compute (they are computed once, never after a retraction)."""
        return self.logprobs.wants_input(self.prompt_len)

    @property
    def finished(self) -> bool:
        return self.finished_reason is not None

    # ------------------------------------------------------------------ outputs

    def append_token(self, token_id: int, origin: str = "free") -> None:
        """Append a sampled token and its text; ``origin`` is ``free`` or ``masked`` (``TokenOrigins``)."""
        if self.first_token_at is None:
            self.first_token_at = time.perf_counter()
        if self.origins is not None:
            self.origins.append(origin)
        self.output_ids.append(token_id)
        self.decoded.append([token_id])

    def append_closing(self, new_ids: tuple[int, ...] | list[int]) -> None:
        """Append a budget close's completion (tokens the model did not write; no logprobs)."""
        self.closed_tokens += len(new_ids)
        if self.origins is not None:
            for _ in new_ids:
                self.origins.append("closed")
        self.output_ids.extend(new_ids)
        self.logprobs.add_unscored(len(new_ids))
        self.decoded.append(list(new_ids))

    def finish(self, type_: str, matched: str | int | None = None, message: str | None = None) -> None:
        """Record why the request stopped (the first reason wins) and flush held-back text."""
        if self.finished_reason is None:
            self.finished_reason = FinishReason(type_, matched, message)
            self.decoded.flush()

    def fail(self, error: Exception) -> None:
        """End the request with ``error``: its caller gets the exception instead of a result.
        Nothing of its own runs any more (its text is not flushed: the detokenizer may be what failed)."""
        if self.error is None:
            self.error = error
        if self.finished_reason is None:
            self.finished_reason = FinishReason("abort", message=f"{type(error).__name__}: {error}")

    def __repr__(self) -> str:
        return (f"Req({self.rid!r}, prompt={self.prompt_len}, out={self.output_len}, kv={self.kv.kv_len}, "
                f"protected={self.kv.cache_protected_len}, finished={self.finished_reason})")


@dataclass
class KVState:
    """Slots, lengths, the locked radix node and the req_to_token row of one request."""

    slots: list[int] = field(default_factory=list)
    kv_len: int = 0  # positions whose K/V are in the pool
    cache_protected_len: int = 0  # positions below this belong to the radix tree (locked via last_node)
    last_node: Any = None  # the radix-cache node locked for this request, or None
    req_pool_idx: int | None = None  # this request's row of the req_to_token table while it holds KV
    extend_len: int = 0  # positions the current step computes

    @property
    def holds_kv(self) -> bool:
        return self.req_pool_idx is not None

    def reset(self) -> None:
        """Forget everything (after release: retraction, jump-forward re-queue, abort)."""
        self.slots = []
        self.kv_len = self.cache_protected_len = self.extend_len = 0
        self.last_node = None
        self.req_pool_idx = None


@dataclass
class LogprobState:
    """Logprob request options and the collected values."""

    return_logprob: bool = False
    start_len: int = 0  # first prompt position with a logprob (== prompt_len: none wanted)
    top_num: int = 0
    input_token: list[float | None] = field(default_factory=list)
    input_top: list[Top | None] = field(default_factory=list)
    input_done: bool = False
    output_token: list[float | None] = field(default_factory=list)
    output_top: list[Top] = field(default_factory=list)

    def wants_input(self, prompt_len: int) -> bool:
        """Prompt logprobs are still to compute."""
        return self.return_logprob and self.start_len < prompt_len and not self.input_done

    def add_input(self, logprobs: list[float], tops: list[Top] | None) -> None:
        """Append one step's prompt logprobs (after the None entry that opens the span)."""
        self._open_input()
        self.input_token.extend(logprobs)
        if tops is not None:
            self.input_top.extend(t[:self.top_num] for t in tops)

    def finish_input(self, wanted: bool) -> None:
        """The prompt is computed: close the prompt logprobs (``wanted``: they were asked for)."""
        if wanted:
            self._open_input()  # a span of one position (start_len == prompt_len - 1) has only the None
        self.input_done = True

    def add_output(self, logprob: float, top: Top) -> None:
        if self.return_logprob:
            self.output_token.append(logprob)
            self.output_top.append(top[:self.top_num])

    def add_unscored(self, num: int) -> None:
        """``num`` output tokens the model did not score (a budget close's completion)."""
        if self.return_logprob:
            self.output_token.extend([None] * num)
            self.output_top.extend([] for _ in range(num))

    def restart_input(self) -> None:
        """After a retraction: unfinished prompt logprobs are computed again from the start."""
        if not self.input_done:
            self.input_token, self.input_top = [], []

    def _open_input(self) -> None:
        if not self.input_token:
            self.input_token.append(None)
            self.input_top.append(None)


@dataclass
class TextState:
    """The output text so far, where a matched stop string starts, and how far it was searched."""

    detokenizer: Any = None
    text: str = ""
    stop_pos: int | None = None  # where the matched stop string starts in text
    checked_len: int = 0  # text searched for stop strings so far
    regex: Any = None  # the request's StopRegexMatcher, made at its first stop_regex check

    def append(self, token_ids: list[int]) -> None:
        if self.detokenizer is not None:
            self.text += self.detokenizer.step(token_ids)

    def flush(self) -> None:
        """Append the text held back for an unfinished character (when the request finishes)."""
        if self.detokenizer is not None:
            self.text += self.detokenizer.finish()


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
