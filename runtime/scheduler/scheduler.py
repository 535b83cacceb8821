"""The continuous-batching scheduler: a waiting queue, a running batch, and KV accounts (no torch).

Each step is either a prefill (extend) batch or a decode batch:

- **Prefill first.** When requests wait (or a chunked prompt is unfinished) and memory allows,
  admit them (``admission.py``: radix match, lock, allocate, in ``schedule_policy`` order). The
  batch holds at most ``max_prefill_tokens`` new tokens (``chunked_prefill_size`` too, when
  set); a prompt that does not fit is cut and continued next step as the *chunked request*. A
  ``max_new_tokens == 0`` request samples nothing: once its prompt is in the KV it finishes as
  ``length`` and its prompt goes into the radix cache (how the DSL pre-fills shared prefixes).
- **Otherwise decode** every running request by one token. If there are not enough slots, evict
  from the radix cache, then retract (preempt) the youngest requests back to the queue; they are
  recomputed later, mostly from the cache.
- **Speculative decode**: when the ``Drafter`` proposes draft tokens (``speculation.py``: text the
  grammar forces, the radix tree's continuation, a match in the request's own tokens), the decode
  step extends each request's last token and its draft in one forward (``build_verify_batch``);
  the runner keeps the drafts the model would have produced token by token, and the slots of
  the rejected ones are handed back at once (``ReqCache.rewind``). When the slots for the drafts
  are not free, the step decodes without them.
- **Mixed steps** (``mixed_chunk``, ``--enable-mixed-chunk``; SGLang's mixed chunked prefill): a
  prefill step also decodes every running request, each as a one-token extend row after the
  prefill rows of the same forward, so running requests are not stalled while a long prompt is
  chunked. The decode rows' slots are taken first; the prefill gets the budget minus one token
  per running request, and at least half of it (``policy.mixed_prefill_budget``): the step stays
  about one chunk long, so ``chunked_prefill_size`` bounds the running requests' inter-token
  latency. Requests re-queued while decoding (a retraction) are
  re-admitted before the chunk, whole, within half the budget, so they do not wait for the long
  prompt either. When the decode slots would need a retraction, or nothing can be admitted, the
  step is scheduled as without mixing. Everything after the forward is the same per request: a
  decode row samples, is checked and finishes exactly as in a decode step, and stays running.

After every extend the computed prefix goes into the radix cache (``ReqCache.cache_unfinished``),
so chunks and prompts are shared while they run; finished requests insert their whole sequence
and unlock (``ReqCache.release``). Admission keeps a reserve for the running requests' future
tokens, scaled by ``new_token_ratio`` (SGLang's estimate, raised after a retraction).
"""

from __future__ import annotations

from radixlm.runtime.scheduler.admission import AdmissionLimits, admit, mixed_prefill_budget
from radixlm.runtime.scheduler.batch import (
    BatchResult,
    ScheduledBatch,
    build_decode_batch,
    build_extend_batch,
    build_mixed_batch,
    build_verify_batch,
)
from radixlm.runtime.scheduler.decode_ahead import AheadBatch, commit_decode_ahead, plan_decode_ahead
from radixlm.runtime.scheduler.req import Req
from radixlm.runtime.scheduler.req_cache import ReqCache
from radixlm.runtime.scheduler.results import StopChecker, finish_prefill_only, take_token, take_verified
from radixlm.runtime.scheduler.speculation import VERIFY_MAX_ROWS, Drafter, SpeculativeConfig, TextCodec

INIT_NEW_TOKEN_RATIO = 0.7
MIN_NEW_TOKEN_RATIO = 0.15
NEW_TOKEN_RATIO_DECAY = (INIT_NEW_TOKEN_RATIO - MIN_NEW_TOKEN_RATIO) / 600


class Scheduler:
    """Owns the queue, the running batch and the ``ReqCache``; turns them into batches."""

    def __init__(self, cache: ReqCache, stop_checker: StopChecker, *, schedule_policy: str = "lpm",
                 max_running_requests: int = 256, max_prefill_tokens: int = 16384,
                 chunk_size: int | None = None, mixed_chunk: bool = False,
                 speculative: SpeculativeConfig | None = None, codec: TextCodec | None = None) -> None:
        self.cache = cache
        self.stop_checker = stop_checker
        self.drafter = Drafter(speculative or SpeculativeConfig(), cache.tree, stop_checker.eos_token_ids, codec)
        self.limits = AdmissionLimits(schedule_policy, max_running_requests, chunk_size)
        self.max_prefill_tokens = max_prefill_tokens
        self.mixed_chunk = mixed_chunk
        self.waiting: list[Req] = []
        self.running: list[Req] = []
        self.chunked: Req | None = None
        self.new_token_ratio = INIT_NEW_TOKEN_RATIO
        self.num_retractions = 0

    # ------------------------------------------------------------------ queue

    def add(self, req: Req) -> None:
        self.waiting.append(req)

    @property
    def num_requests(self) -> int:
        return len(self.waiting) + len(self.running) + (self.chunked is not None)

    def all_reqs(self) -> list[Req]:
        return self.waiting + self.running + ([self.chunked] if self.chunked else [])

    def has_work(self) -> bool:
        return self.num_requests > 0

    # ------------------------------------------------------------------ scheduling

    def schedule(self) -> ScheduledBatch | None:
        """The next batch, or None when there is nothing to run."""
        batch = None
        if self.mixed_chunk and self.running and (self.waiting or self.chunked is not None):
            batch = self._schedule_mixed()
        if batch is None:
            batch = self._schedule_prefill()
        if batch is None and self.running:
            batch = self._schedule_decode()
        return batch

    def _prefill_budget(self) -> int:
        """New tokens one step may prefill: ``max_prefill_tokens``, capped by the chunk size."""
        chunk = self.limits.chunk_size
        return self.max_prefill_tokens if chunk is None else min(self.max_prefill_tokens, chunk)

    def _schedule_prefill(self) -> ScheduledBatch | None:
        if not self.waiting and self.chunked is None:
            return None
        reqs, chunked = self._take_prefill(self._prefill_budget())
        if not reqs:
            return None
        return build_extend_batch(reqs, chunked, self.cache.pop_table_writes())

    def _schedule_mixed(self) -> ScheduledBatch | None:
        """A prefill step that also decodes every running request by one token (mixed chunked
        prefill); the decode rows' slots are taken first, the prefill gets what the budget leaves
        (``mixed_prefill_budget``). None when the running requests need a retraction to get their
        slots: then the step is scheduled as without mixing."""
        running = list(self.running)  # the batch's own list: `running` changes when requests finish
        if self.cache.available() < len(running):
            return None
        slots = self.cache.alloc(len(running))
        if slots is None:
            return None
        for req, slot in zip(running, slots):
            self.cache.assign(req, [slot])
        reqs, chunked = self._take_prefill(mixed_prefill_budget(self._prefill_budget(), len(running)),
                                           resume_first=True)
        self._decay_new_token_ratio()
        if not reqs:  # nothing could be admitted (memory, rows): a plain decode step
            return build_decode_batch(running, slots, self.cache.pop_table_writes())
        return build_mixed_batch(reqs, running, chunked, self.cache.pop_table_writes())

    def _take_prefill(self, budget: int, resume_first: bool = False) -> tuple[list[Req], Req | None]:
        """Allocate this step's prefill: the chunked request's next chunk, then waiting requests
        in policy order, at most ``budget`` tokens; the requests and the one left unfinished.

        ``resume_first`` (mixed steps): waiting requests that were decoding (re-queued by a
        retraction; their KV is mostly cached) go before the chunk,
        whole, within half the budget, so that a long prompt does not stall them either.
        """
        reqs: list[Req] = []
        chunked: Req | None = None
        if resume_first and self.chunked is not None and len(self.running) < self.limits.max_running:
            resumed = [r for r in self.waiting if r.output_ids]
            if resumed:
                self._admit_waiting(reqs, budget // 2, resumed, whole=True)
                budget -= sum(r.kv.extend_len for r in reqs)
        if self.chunked is not None:
            req = self.chunked
            take = min(req.fill_len - req.kv.kv_len, budget)
            slots = self.cache.alloc(take)
            if slots is None:  # no chunk this step; it stays the unfinished one
                return reqs, req
            self.cache.assign(req, slots)
            reqs.append(req)
            budget -= take
            chunked = req if req.kv.kv_len + take < req.fill_len else None
        if chunked is None and self.waiting and len(self.running) < self.limits.max_running and budget > 0:
            chunked = self._admit_waiting(reqs, budget)
        return reqs, chunked

    def _admit_waiting(self, reqs: list[Req], budget: int, candidates: list[Req] | None = None,
                       whole: bool = False) -> Req | None:
        """Admit waiting requests (``candidates``, default all) into ``reqs`` (``admission.admit``)
        and take them off the queue; return the one cut into a chunk."""
        took = admit(self.cache, self.limits, self.waiting if candidates is None else candidates, self.running,
                     reqs, budget, self.new_token_ratio, whole)
        if took.reqs:
            taken = {id(r) for r in took.reqs}
            self.waiting = [r for r in self.waiting if id(r) not in taken]
        return took.chunked

    def _schedule_decode(self) -> ScheduledBatch:
        self._retract_until_fits()
        reqs = list(self.running)  # the batch's own list: `running` changes when requests finish
        batch = self._schedule_verify(reqs)
        if batch is not None:
            return batch
        slots = self.cache.alloc(len(reqs))
        if slots is None:
            raise RuntimeError(f"KV accounting error: {len(reqs)} decode slots unavailable "
                               f"after retraction (available {self.cache.available()})")
        batch = build_decode_batch(reqs, slots, self.cache.pop_table_writes())
        for req, slot in zip(reqs, slots):
            self.cache.assign(req, [slot])
        self._decay_new_token_ratio()
        return batch

    def _schedule_verify(self, reqs: list[Req]) -> ScheduledBatch | None:
        """The decode step with the drafter's drafts (``build_verify_batch``); None when no request
        has one or the pool cannot hold their slots (evicting cached prefixes as a decode step does)."""
        if not self.drafter.active(len(reqs)):
            return None
        context_len = self.stop_checker.context_len
        share = VERIFY_MAX_ROWS // len(reqs) - 1  # draft tokens each request may verify this step
        drafts = [self.drafter.propose(r, min(r.remaining_new_tokens, context_len - r.fill_len, share + 1) - 1,
                                       len(reqs)) for r in reqs]
        total = len(reqs) + sum(len(d) for d in drafts)
        if total == len(reqs) or self.cache.available() < total:
            return None
        slots = self.cache.alloc(total)
        if slots is None:
            return None
        batch = build_verify_batch(reqs, drafts, slots, self.cache.pop_table_writes())
        at = 0
        for req, draft in zip(reqs, drafts):
            self.cache.assign(req, slots[at:at + 1 + len(draft)])
            at += 1 + len(draft)
        self._decay_new_token_ratio()
        return batch

    def _decay_new_token_ratio(self) -> None:
        """Once per step that decodes the running requests."""
        self.new_token_ratio = max(self.new_token_ratio - NEW_TOKEN_RATIO_DECAY, MIN_NEW_TOKEN_RATIO)

    def observe_step(self, batch: ScheduledBatch, seconds: float) -> None:
        """A decode step (plain or verify) took ``seconds``: the drafter's cost model learns from it."""
        if batch.is_decode and self.drafter.config.enabled:
            self.drafter.cost.observe(len(batch.reqs), len(batch.spec.input_ids), seconds)

    def schedule_decode_ahead(self, inflight: ScheduledBatch) -> AheadBatch | None:
        """Step N+1 while ``inflight`` (step N) runs, for overlap scheduling (``decode_ahead.py``);
        None when it could differ from what ``schedule`` would run after step N."""
        if self.waiting or self.chunked is not None:
            return None
        return plan_decode_ahead(self.running, inflight, self.cache, self.stop_checker.context_len)

    def commit_decode_ahead(self, ahead: AheadBatch) -> ScheduledBatch | None:
        """After step N was processed: take ``ahead`` into the accounts; its surviving batch."""
        batch = commit_decode_ahead(ahead, self.cache)
        if batch is not None:  # as _schedule_decode does for each decode step
            self._decay_new_token_ratio()
        return batch

    def _retract_until_fits(self) -> None:
        while self.cache.available() < len(self.running):
            if self.chunked is not None:
                victim = self.chunked
                self.chunked = None
            elif len(self.running) > 1:
                victim = max(self.running, key=lambda r: r.arrival)
                self.running.remove(victim)
            else:
                return  # one request always fits: prompt + max_new_tokens was checked on submit
            self.retract(victim)

    def retract(self, req: Req) -> None:
        """Send ``req`` back to the queue, keeping its outputs; its KV goes to the radix cache."""
        self.cache.release(req, insert=True)
        req.logprobs.restart_input()
        req.num_retractions += 1
        self.num_retractions += 1
        self.new_token_ratio = min(1.0, self.new_token_ratio + 0.3)
        self.waiting.append(req)

    # ------------------------------------------------------------------ results

    def process_batch_result(self, batch: ScheduledBatch, result: BatchResult) -> list[Req]:
        """Apply one step's results; return the requests that finished in it (already released).

        Per sampled token (a verify step's kept drafts and the token after them, in order): append
        it, ask the request's constraint (finish? the budget's closing completion?), run the stop
        checks (``results.take_token``). A verify step's rejected drafts hand their slots back.
        """
        for req in batch.reqs:
            self.cache.advance(req)
            req.forward_passes += 1
        for i, span in enumerate(batch.logprob_spans):
            tops = result.input_top_logprobs[i] if result.input_top_logprobs else None
            span.req.logprobs.add_input(result.input_logprobs[i], tops)
        for i, (req, token) in enumerate(zip(batch.sample_reqs, result.next_token_ids)):
            if req.finished:  # aborted while in flight
                continue
            base = req.fill_len  # a verify step's first draft position
            error = result.errors.get(i)
            if error is None:
                try:
                    if batch.is_verify:
                        self.drafter.record(req, result.accepted[i])
                        take_verified(req, batch.drafts[i], result, i, self.stop_checker, self.drafter)
                    else:
                        take_token(req, token, result, i, self.stop_checker)
                except Exception as e:  # noqa: BLE001 - this request's own failure fails it alone
                    error = e
            if batch.is_verify:  # drafts after the kept ones (or after a finish) have no valid KV
                accepted = 0 if error is not None else result.accepted[i]
                self.cache.rewind(req, min(base + accepted, req.fill_len))
            if error is not None:
                req.fail(error)
        if not batch.is_decode:
            finish_prefill_only(batch)
        return self._settle(batch)

    def _settle(self, batch: ScheduledBatch) -> list[Req]:
        finished = []
        decoded = {id(r) for r in batch.decode_reqs}  # a mixed step's decode rows stay running
        for req in batch.reqs:
            if req.finished:
                self._remove(req)
                self.cache.release(req, insert=True)
                finished.append(req)
            elif not batch.is_decode and id(req) not in decoded:
                self.cache.cache_unfinished(req)
                if req is not batch.chunked_req:
                    self.running.append(req)
        if not batch.is_decode:
            self.chunked = batch.chunked_req if batch.chunked_req and not batch.chunked_req.finished else None
        return finished

    def _remove(self, req: Req) -> None:
        if req in self.running:
            self.running.remove(req)
        if self.chunked is req:
            self.chunked = None

    # ------------------------------------------------------------------ control

    def abort(self, rid: str, message: str = "aborted") -> list[Req]:
        """Finish the requests with this rid (or siblings' group rid) as ``abort``; free their KV."""
        aborted = []
        for req in self.all_reqs():
            if rid in (req.rid, req.group_rid):
                if req in self.waiting:
                    self.waiting.remove(req)
                self._remove(req)
                self.cache.release(req, insert=True)
                req.finish("abort", message=message)
                aborted.append(req)
        return aborted

    def fail(self, req: Req, error: Exception) -> None:
        """Finish ``req`` with ``error`` (raised in its caller) and free what it holds; the other
        requests go on. For failures found outside a step (delivering its output)."""
        if req in self.waiting:
            self.waiting.remove(req)
        self._remove(req)
        self.cache.release(req, insert=True)
        req.fail(error)

    def flush_cache(self) -> bool:
        """Empty the radix cache; refused (False) while any request is queued or running."""
        if self.has_work():
            return False
        self.cache.flush()
        return True

    def reset(self) -> list[Req]:
        """Drop every request and all accounts (after a failed step); return the dropped ones."""
        dropped = self.all_reqs()
        self.waiting, self.running, self.chunked = [], [], None
        self.cache.reset()
        return dropped
