"""Decode-ahead: the decode batch of step N+1, scheduled while step N still runs (no torch).

Overlap scheduling (``runtime/engine/step_loop.py``, ``OverlapStepper``) needs step N+1 before step N's tokens are
known. Its input tokens are *future tokens*: ``future_token(i)`` (a negative id) stands for the
token step N samples for its row ``i``; the engine resolves them (``resolve_future_tokens``) on
the device side once step N's result exists. The scheduler never waits and is never called back:

1. ``Scheduler.schedule_decode_ahead(batch_n)`` -> an ``AheadBatch`` (or None): every running
   request decodes once more; its new KV slots are allocated but not yet assigned to the
   requests, whose accounts still describe step N.
2. ``Scheduler.process_batch_result(batch_n, result_n)`` as usual.
3. ``Scheduler.commit_decode_ahead(ahead)``: requests that finished (stop, EOS, length, abort,
   error) in step N drop out, their new slot is freed at once; the others are assigned theirs.
   The ``ScheduledBatch`` returned covers the survivors; ``ahead.select(result)`` keeps their
   rows of step N+1's result.

It is only offered when step N+1 is the batch the non-overlapped loop would run (minus the
requests that finish in step N), so results are identical: nothing waits, no prefix is chunked,
no slot must be evicted or request retracted, and no request's sampling depends on step N's
token (``overlap_blocker``: a grammar's mask needs the matcher to have accepted it, penalties and
``min_new_tokens`` count the output). Otherwise the loop processes step N first.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from radixlm.runtime.scheduler.batch import BatchResult, BatchSpec, ScheduledBatch
from radixlm.runtime.scheduler.req import Req
from radixlm.runtime.scheduler.req_cache import ReqCache


def future_token(row: int) -> int:
    """The placeholder id for the token the batch in flight samples for its row ``row``."""
    return -(row + 1)


def resolve_future_tokens(input_ids: list[int], prev_token_ids: list[int]) -> list[int]:
    """``input_ids`` with every future token replaced by the sampled token it stands for."""
    return [prev_token_ids[-t - 1] if t < 0 else t for t in input_ids]


def overlap_blocker(req: Req) -> str | None:
    """Why ``req``'s next sample would depend on the token in flight (None: it does not)."""
    p = req.params
    if req.constraint is not None:
        return "constrained: the grammar mask needs the previous token accepted"
    if p.repetition_penalty != 1.0 or p.frequency_penalty or p.presence_penalty:
        return "penalties count the output tokens"
    if req.output_len < p.min_new_tokens:
        return "min_new_tokens masks depend on the output length"
    return None


@dataclass
class AheadBatch:
    """Step N+1 as the device runs it, before the scheduler took it into its accounts."""

    batch: ScheduledBatch  # spec.input_ids are future tokens
    slots: list[int]  # the new KV slot of each row, not yet the requests'
    keep: list[int] = field(default_factory=list)  # rows still alive after commit

    def select(self, result: BatchResult) -> BatchResult:
        """Step N+1's result restricted to the rows that survived step N (after ``commit``)."""
        rows = self.keep
        pick = (lambda xs: [xs[i] for i in rows] if xs else [])  # noqa: E731
        errors = {j: result.errors[i] for j, i in enumerate(rows) if i in result.errors}
        return BatchResult(pick(result.next_token_ids), pick(result.next_token_logprobs),
                           pick(result.next_top_logprobs), forward_s=result.forward_s, errors=errors)


def plan_decode_ahead(running: list[Req], inflight: ScheduledBatch, cache: ReqCache,
                      context_len: int) -> AheadBatch | None:
    """Step N+1 for ``running`` while ``inflight`` (step N, a decode batch of them) runs; None
    when it could differ from the non-overlapped loop's step N+1 (module docstring)."""
    reqs = list(running)
    if (not inflight.is_decode or len(inflight.sample_reqs) != len(reqs)
            or any(a is not b for a, b in zip(inflight.sample_reqs, reqs))):
        return None
    if cache.slots.num_free < len(reqs):  # would evict or retract: decide after step N
        return None
    kv_lens = [r.kv.kv_len + r.kv.extend_len for r in reqs]  # step N's token included
    if max(kv_lens) + 1 > context_len or any(overlap_blocker(r) for r in reqs):
        return None
    slots = cache.alloc(len(reqs))
    if slots is None:
        return None
    rows = list(range(len(reqs)))
    spec = BatchSpec(True, [r.kv.req_pool_idx for r in reqs], [future_token(i) for i in rows], kv_lens,
                     [1] * len(reqs), slots, rows, cache.pop_table_writes())
    return AheadBatch(ScheduledBatch(True, reqs, spec, reqs, list(rows)), slots)


def commit_decode_ahead(ahead: AheadBatch, cache: ReqCache) -> ScheduledBatch | None:
    """Assign the survivors their slots, free the rest; the survivors' batch (None: none left)."""
    reqs = ahead.batch.reqs
    ahead.keep = [i for i, r in enumerate(reqs) if not r.finished and r.kv.holds_kv]
    alive = set(ahead.keep)
    cache.slots.free([s for i, s in enumerate(ahead.slots) if i not in alive])
    live = [reqs[i] for i in ahead.keep]
    for i, req in zip(ahead.keep, live):
        cache.assign(req, [ahead.slots[i]])
    if not live:
        return None
    return ScheduledBatch(True, live, ahead.batch.spec, live, list(range(len(live))))
