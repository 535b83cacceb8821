"""What the scheduler hands the model runner and what comes back (plain lists, no torch)."""

from __future__ import annotations

from dataclasses import dataclass, field

from radixlm.runtime.forward_batch import BatchSpec
from radixlm.runtime.req import Req


@dataclass
class LogprobSpan:
    """Prompt-logprob rows of one request in this step.

    Logit rows ``first_row .. first_row + len(target_ids) - 1`` are the positions
    ``first_pos ..``; row j predicts ``target_ids[j]`` (the prompt token after it).
    """

    req: Req
    first_row: int
    first_pos: int
    target_ids: list[int]


@dataclass
class ScheduledBatch:
    """One step: the requests, the ``BatchSpec`` for the forward, and which logit rows mean what.

    ``sample_reqs[i]`` samples its next token from logit row ``sample_rows[i]``; prompt logprobs
    come from the rows in ``logprob_spans``. ``chunked_req`` is the request (if any) whose prompt
    is still incomplete after this step.
    """

    is_decode: bool
    reqs: list[Req]
    spec: BatchSpec
    sample_reqs: list[Req] = field(default_factory=list)
    sample_rows: list[int] = field(default_factory=list)
    logprob_spans: list[LogprobSpan] = field(default_factory=list)
    chunked_req: Req | None = None

    @property
    def num_tokens(self) -> int:
        return len(self.spec.input_ids)


@dataclass
class BatchResult:
    """The runner's answer, aligned with ``sample_reqs`` and ``logprob_spans``.

    Logprobs are ``log_softmax`` of the model's raw float32 logits (before logit_bias, penalties,
    grammar masks and temperature); top lists are ``[(logprob, token_id), ...]``, best first.
    ``next_token_logprobs`` / ``next_top_logprobs`` are filled for every sampled row when any
    request in the batch asked for logprobs, else empty.
    """

    next_token_ids: list[int]
    next_token_logprobs: list[float] = field(default_factory=list)
    next_top_logprobs: list[list[tuple[float, int]]] = field(default_factory=list)
    input_logprobs: list[list[float]] = field(default_factory=list)
    input_top_logprobs: list[list[list[tuple[float, int]]]] = field(default_factory=list)
    forward_s: float = 0.0  # time in the model forward (for the overhead counters)


def build_extend_batch(reqs: list[Req], chunked: Req | None,
                       table_writes: list[tuple[int, int, list[int]]]) -> ScheduledBatch:
    """The extend batch of ``reqs`` (each extends ``fill_ids[kv_len : kv_len + extend_len]``).

    Rows wanted: prompt-logprob spans from ``logprob_start_len``, and the last row of every
    request whose fill is then complete and that samples (not ``max_new_tokens == 0``).
    """
    spec = BatchSpec(False, [], [], [], [], [], [], table_writes)
    batch = ScheduledBatch(False, reqs, spec, chunked_req=chunked)
    row = 0
    for req in reqs:
        start, end = req.kv_len, req.kv_len + req.extend_len
        spec.req_pool_indices.append(req.req_pool_idx)
        spec.input_ids.extend(req.fill_slice(start, end))
        spec.prefix_lens.append(start)
        spec.extend_lens.append(req.extend_len)
        spec.out_cache_loc.extend(req.kv_slots[start:end])
        if req.wants_input_logprobs:
            lo, hi = max(req.logprob_start_len, start), min(end, req.fill_len - 1)
            if lo < hi:
                batch.logprob_spans.append(LogprobSpan(req, len(spec.logits_indices), lo,
                                                       req.fill_slice(lo + 1, hi + 1)))
                spec.logits_indices.extend(range(row + lo - start, row + hi - start))
        if end == req.fill_len and not req.prefill_only:
            batch.sample_reqs.append(req)
            batch.sample_rows.append(len(spec.logits_indices))
            spec.logits_indices.append(row + end - 1 - start)
        row += req.extend_len
    if not spec.logits_indices:  # a lone middle chunk: the forward still needs one logit row
        spec.logits_indices.append(row - 1)
    return batch
