"""What the scheduler hands the model runner and what comes back (plain lists, no torch).

``BatchSpec`` is one forward's work; ``ScheduledBatch`` adds which requests own which logit rows;
``BatchResult`` is the runner's answer. ``radixlm.runtime.model.forward_batch.ForwardBatch`` turns
a ``BatchSpec`` into tensors.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from radixlm.runtime.scheduler.req import Req


@dataclass
class BatchSpec:
    """One step's work as plain lists (see docs/DESIGN.md).

    ``input_ids`` / ``out_cache_loc`` are the new tokens of every request, flattened (a verify step
    has one decode row per draft position, so a request's ``req_pool_index`` repeats);
    ``logits_indices`` are rows of that flattening whose logits are wanted (normally each request's
    last row, ``BatchSpec.last_token_indices(extend_lens)``); ``table_writes`` are
    ``(req_pool_index, start, slots)`` cached-prefix slots to write into the table first.
    """

    is_decode: bool
    req_pool_indices: list[int]
    input_ids: list[int]
    prefix_lens: list[int]
    extend_lens: list[int]
    out_cache_loc: list[int]
    logits_indices: list[int]
    table_writes: list[tuple[int, int, list[int]]] = field(default_factory=list)

    @property
    def batch_size(self) -> int:
        return len(self.req_pool_indices)

    @staticmethod
    def last_token_indices(extend_lens: list[int]) -> list[int]:
        """Row of each request's last new token in the flattened batch."""
        rows, end = [], 0
        for n in extend_lens:
            end += n
            rows.append(end - 1)
        return rows

    def validate(self) -> None:
        """Raise ``ValueError`` naming the inconsistent field."""
        bs = self.batch_size
        if bs == 0:
            raise ValueError("req_pool_indices is empty: a batch needs at least one request")
        for name in ("prefix_lens", "extend_lens"):
            if len(getattr(self, name)) != bs:
                raise ValueError(f"{name} has {len(getattr(self, name))} entries, expected {bs} "
                                 f"(one per request in req_pool_indices)")
        if any(n < 1 for n in self.extend_lens):
            raise ValueError(f"extend_lens must all be >= 1, got {self.extend_lens}")
        if any(p < 0 for p in self.prefix_lens):
            raise ValueError(f"prefix_lens must all be >= 0, got {self.prefix_lens}")
        if self.is_decode and any(n != 1 for n in self.extend_lens):
            raise ValueError(f"is_decode batch needs extend_lens all 1, got {self.extend_lens}")
        num_tokens = sum(self.extend_lens)
        for name in ("input_ids", "out_cache_loc"):
            if len(getattr(self, name)) != num_tokens:
                raise ValueError(f"{name} has {len(getattr(self, name))} entries, expected "
                                 f"sum(extend_lens) = {num_tokens}")
        if not self.logits_indices:
            raise ValueError("logits_indices is empty")
        if any(not 0 <= i < num_tokens for i in self.logits_indices):
            raise ValueError(f"logits_indices must lie in [0, {num_tokens}), got {self.logits_indices}")


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
    is still incomplete after this step. ``decode_reqs``: in a mixed step (an extend batch that
    also decodes, ``--enable-mixed-chunk``), the running requests carried as one-token rows after
    the prefill rows; they stay running (empty otherwise, and in decode batches).
    """

    is_decode: bool
    reqs: list[Req]
    spec: BatchSpec
    sample_reqs: list[Req] = field(default_factory=list)
    sample_rows: list[int] = field(default_factory=list)
    logprob_spans: list[LogprobSpan] = field(default_factory=list)
    chunked_req: Req | None = None
    decode_reqs: list[Req] = field(default_factory=list)
    drafts: list[list[int]] = field(default_factory=list)

    @property
    def num_tokens(self) -> int:
        return len(self.spec.input_ids)

    @property
    def is_verify(self) -> bool:
        """A decode step that verifies draft tokens (an extend-shaped forward)."""
        return bool(self.drafts)


@dataclass
class BatchResult:
    """The runner's answer, aligned with ``sample_reqs`` and ``logprob_spans``.

    Logprobs are ``log_softmax`` of the model's raw float32 logits (before logit_bias, penalties,
    grammar masks and temperature); top lists are ``[(logprob, token_id), ...]``, best first.
    ``next_token_logprobs`` / ``next_top_logprobs`` are filled for every sampled row when any
    request in the batch asked for logprobs, else empty. ``errors[i]``: sampling failed for
    ``sample_reqs[i]`` alone (its token is a placeholder); the scheduler fails that request.
    In a verify step, ``accepted[i]`` of ``sample_reqs[i]``'s drafts were kept and
    ``next_token_ids[i]`` is the model's token after them; ``draft_logprobs[i]`` /
    ``draft_top_logprobs[i]`` are the kept drafts' logprobs (when logprobs are wanted).
    """

    next_token_ids: list[int]
    next_token_logprobs: list[float] = field(default_factory=list)
    next_top_logprobs: list[list[tuple[float, int]]] = field(default_factory=list)
    input_logprobs: list[list[float]] = field(default_factory=list)
    input_top_logprobs: list[list[list[tuple[float, int]]]] = field(default_factory=list)
    forward_s: float = 0.0  # time in the model forward (for the overhead counters)
    errors: dict[int, Exception] = field(default_factory=dict)  # sample row -> what failed that request
    accepted: list[int] = field(default_factory=list)
    draft_logprobs: list[list[float]] = field(default_factory=list)
    draft_top_logprobs: list[list[list[tuple[float, int]]]] = field(default_factory=list)


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
        start, end = req.kv.kv_len, req.kv.kv_len + req.kv.extend_len
        spec.req_pool_indices.append(req.kv.req_pool_idx)
        spec.input_ids.extend(req.fill_slice(start, end))
        spec.prefix_lens.append(start)
        spec.extend_lens.append(req.kv.extend_len)
        spec.out_cache_loc.extend(req.kv.slots[start:end])
        if req.wants_input_logprobs:
            lo, hi = max(req.logprobs.start_len, start), min(end, req.fill_len - 1)
            if lo < hi:
                batch.logprob_spans.append(LogprobSpan(req, len(spec.logits_indices), lo,
                                                       req.fill_slice(lo + 1, hi + 1)))
                spec.logits_indices.extend(range(row + lo - start, row + hi - start))
        if end == req.fill_len and not req.prefill_only:
            batch.sample_reqs.append(req)
            batch.sample_rows.append(len(spec.logits_indices))
            spec.logits_indices.append(row + end - 1 - start)
        row += req.kv.extend_len
    if not spec.logits_indices:  # a lone middle chunk: the forward still needs one logit row
        spec.logits_indices.append(row - 1)
    return batch


def build_decode_batch(reqs: list[Req], slots: list[int],
                       table_writes: list[tuple[int, int, list[int]]]) -> ScheduledBatch:
    """The decode batch of running ``reqs``: each computes its last token into its slot in
    ``slots`` and samples from its row."""
    rows = list(range(len(reqs)))
    spec = BatchSpec(True, [r.kv.req_pool_idx for r in reqs], [r.output_ids[-1] for r in reqs],
                     [r.kv.kv_len for r in reqs], [1] * len(reqs), slots, rows, table_writes)
    return ScheduledBatch(True, reqs, spec, reqs, list(rows))


def build_verify_batch(reqs: list[Req], drafts: list[list[int]], slots: list[int],
                       table_writes: list[tuple[int, int, list[int]]]) -> ScheduledBatch:
    """The decode step of running ``reqs`` that verifies their ``drafts``: request i's last token
    and draft tokens are ``1 + len(drafts[i])`` decode rows at positions ``kv_len, kv_len + 1, ..``
    (their K/V into the next ``slots``), each attending to the request's prefix and the rows before
    it. The rows are ordinary decode rows: the decode kernels compute each exactly as decoding one
    token a step computes it, so the verified logits are those plain decoding would see."""
    spec = BatchSpec(True, [], [], [], [], list(slots), [], table_writes)
    batch = ScheduledBatch(True, reqs, spec, list(reqs), [], drafts=[list(d) for d in drafts])
    row = 0
    for req, draft in zip(reqs, drafts):
        batch.sample_rows.append(row)
        for j, token in enumerate([req.output_ids[-1], *draft]):
            spec.req_pool_indices.append(req.kv.req_pool_idx)
            spec.input_ids.append(token)
            spec.prefix_lens.append(req.kv.kv_len + j)
            spec.extend_lens.append(1)
            spec.logits_indices.append(row)
            row += 1
    return batch


def build_mixed_batch(prefill: list[Req], decode: list[Req], chunked: Req | None,
                      table_writes: list[tuple[int, int, list[int]]]) -> ScheduledBatch:
    """One extend batch of ``prefill`` (prompts or chunks) followed by ``decode``, running requests
    whose last token (``extend_len == 1``, already assigned its slot) is a one-token extend row:
    SGLang's mixed chunked prefill. The model sees an ordinary extend batch."""
    batch = build_extend_batch(prefill + decode, chunked, table_writes)
    batch.decode_reqs = list(decode)
    return batch
