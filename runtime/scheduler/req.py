"""``Req``: one generation request as the scheduler sees it (plain Python, no torch).

Memory regions of a request, along ``fill_ids = origin_input_ids + output_ids``::

    position: 0                 cache_protected_len        kv_len             len(fill_ids)
              |<-- radix-cache nodes -->|<-- owned slots -->|<-- no KV yet ---->|
              |  shared, locked through |  allocated by this|  rest of prompt not yet
              |  last_node (not ours to |  request; freed or|  prefilled, and the last
              |  free)                  |  inserted at end  |  sampled token
    kv_slots[i] is the KV slot of position i, for i < kv_len.

One step extends ``fill_ids[kv_len : kv_len + extend_len]`` (a whole prompt, one chunk of it,
or the single last token in a decode step) and then ``kv_len += extend_len``. A running
(decoding) request always has ``kv_len == len(fill_ids) - 1``.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass
from typing import Any

from radixlm.runtime.sampling_params import SamplingParams

_arrival = itertools.count()


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
    """A request's token ids, KV accounting, sampler state and outputs."""

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
        self.extra_key = extra_key
        self.seed_offset = seed_offset  # sibling i of an n > 1 request samples with seed + i
        # logprobs: prompt logprobs cover positions logprob_start_len .. len(prompt) - 1
        self.return_logprob = return_logprob
        self.logprob_start_len = logprob_start_len if logprob_start_len is not None else len(input_ids)
        self.top_logprobs_num = top_logprobs_num
        self.input_token_logprobs: list[float | None] = []
        self.input_top_logprobs: list[list[tuple[float, int]] | None] = []
        self.input_logprobs_done = False
        self.output_token_logprobs: list[float | None] = []  # None: a jump-forward token
        self.output_top_logprobs: list[list[tuple[float, int]]] = []
        self.stream = stream
        # KV accounting (see the module docstring)
        self.kv_slots: list[int] = []
        self.kv_len = 0
        self.cache_protected_len = 0
        self.last_node: Any = None
        self.req_pool_idx: int | None = None
        self.extend_len = 0
        self.cached_tokens = 0  # prompt tokens served from the radix cache at first admission
        self.admitted_once = False
        self.forward_passes = 0
        self.num_retractions = 0
        # text and finishing
        self.detokenizer = detokenizer  # .step(new_ids) -> str; None: no text (scheduler tests)
        self.text = ""
        self.stop_pos: int | None = None  # where the matched stop string starts in text
        self.stop_checked_len = 0  # text searched for stop strings so far
        self.finished_reason: FinishReason | None = None
        self.error: Exception | None = None  # raised in the caller instead of a result
        # constrained decoding (set by the engine loop)
        self.grammar: Any = None  # a GrammarMatcher or None
        self.grammar_future: Any = None
        self.constraint_violations: list[str] | None = None
        # engine-side state: the output handle, streaming offsets, sampler generator
        self.handle: Any = None  # a RequestHandle, shared by the requests of one generate call
        self.handle_index = 0  # this request's index among them
        self.sent_text_len = 0
        self.sent_ids_len = 0
        self.sent_logprobs_len = 0
        self.sampler_state: Any = None
        self.created_at = 0.0  # time.perf_counter() at submission
        self.first_token_at: float | None = None  # time.perf_counter() when the first output token came

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
        return self.return_logprob and self.logprob_start_len < self.prompt_len and not self.input_logprobs_done

    @property
    def finished(self) -> bool:
        return self.finished_reason is not None

    # ------------------------------------------------------------------ outputs

    def append_token(self, token_id: int) -> None:
        """Append a sampled (or forced) token and its text."""
        if self.first_token_at is None:
            self.first_token_at = time.perf_counter()
        self.output_ids.append(token_id)
        if self.detokenizer is not None:
            self.text += self.detokenizer.step([token_id])

    def replace_tail(self, num_drop: int, new_ids: list[int], detokenizer: Any) -> None:
        """Drop ``num_drop`` output tokens, append ``new_ids`` and re-decode (jump-forward)."""
        if num_drop:
            keep = len(self.output_ids) - num_drop
            del self.output_ids[keep:]
            del self.output_token_logprobs[keep:]
            del self.output_top_logprobs[keep:]
        self.output_ids.extend(new_ids)
        if self.return_logprob:  # forced tokens were never sampled: no logprob
            self.output_token_logprobs.extend([None] * len(new_ids))
            self.output_top_logprobs.extend([[] for _ in new_ids])
        self.detokenizer = detokenizer
        if detokenizer is not None:
            self.text = detokenizer.step(list(self.output_ids))
            self.stop_checked_len = 0

    def finish(self, type_: str, matched: str | int | None = None, message: str | None = None) -> None:
        if self.finished_reason is None:
            self.finished_reason = FinishReason(type_, matched, message)
            if self.detokenizer is not None and hasattr(self.detokenizer, "finish"):
                self.text += self.detokenizer.finish()  # text held back for an unfinished character

    def reset_kv(self) -> None:
        """Forget the KV state (after release: retraction, jump-forward re-queue, abort)."""
        self.kv_slots = []
        self.kv_len = 0
        self.cache_protected_len = 0
        self.last_node = None
        self.req_pool_idx = None
        self.extend_len = 0

    def __repr__(self) -> str:
        return (f"Req({self.rid!r}, prompt={self.prompt_len}, out={self.output_len}, kv={self.kv_len}, "
                f"protected={self.cache_protected_len}, finished={self.finished_reason})")
