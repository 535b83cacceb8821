"""The scheduler's fake runner and request helpers, shared by the scheduler tests and the mixed-chunk
tests (no model, no torch).

The fake runner keeps a fake KV pool (slot -> token id) and a req_to_token table, applies each
batch's table writes and new slots, and computes every request's next token from the tokens it
*reads back through its slots*. Any accounting bug (wrong prefix slots, a slot freed while in
use and reused) changes the outputs, which are compared with the token function applied to the
true sequence.
"""

from __future__ import annotations

from radixlm.runtime.sampling_params import SamplingParams
from radixlm.runtime.scheduler.batch import BatchResult, ScheduledBatch
from radixlm.runtime.scheduler.req import Req
from radixlm.runtime.scheduler.req_cache import ReqCache
from radixlm.runtime.scheduler.results import StopChecker
from radixlm.runtime.scheduler.scheduler import Scheduler

EOS = 1


def next_token(seq: list[int]) -> int:
    """A deterministic 'model': depends on the whole sequence, never EOS."""
    return (sum(seq[-5:]) * 7 + len(seq) * 3 + seq[0]) % 90 + 5


def expected_output(prompt: list[int], n: int) -> list[int]:
    seq = list(prompt)
    for _ in range(n):
        seq.append(next_token(seq))
    return seq[len(prompt):]


class FakeRunner:
    """``fn``: the token function (default ``next_token``). A verify batch (speculative decoding)
    keeps each request's drafts while they equal ``fn`` of what its slots hold, as greedy
    verification does."""

    def __init__(self, max_reqs: int, context: int, fn=None) -> None:
        self.fn = fn or next_token
        self.kv: dict[int, int] = {}
        self.table = [[0] * context for _ in range(max_reqs)]
        self.steps: list[ScheduledBatch] = []

    def run(self, batch: ScheduledBatch) -> BatchResult:
        spec = batch.spec
        spec.validate()
        self.steps.append(batch)
        for row, start, slots in spec.table_writes:
            self.table[row][start:start + len(slots)] = slots
        off = 0
        logits_rows: dict[int, int] = {}
        for i, row in enumerate(spec.req_pool_indices):
            p, e = spec.prefix_lens[i], spec.extend_lens[i]
            for j in range(e):
                slot = spec.out_cache_loc[off + j]
                assert slot != 0
                self.kv[slot] = spec.input_ids[off + j]
                self.table[row][p + j] = slot
            context = [self.kv[s] for s in self.table[row][:p + e]]
            for j in range(e):
                logits_rows[off + j] = self.fn(context[:p + j + 1])
            off += e
        lps = [[-1.0] * len(s.target_ids) for s in batch.logprob_spans]
        if batch.is_verify:
            result = BatchResult(next_token_ids=[], input_logprobs=lps)
            for first, draft in zip(batch.sample_rows, batch.drafts):
                targets = [logits_rows[spec.logits_indices[first + j]] for j in range(len(draft) + 1)]
                accepted = 0
                while accepted < len(draft) and targets[accepted] == draft[accepted]:
                    accepted += 1
                result.accepted.append(accepted)
                result.next_token_ids.append(targets[accepted])
            return result
        tokens = [logits_rows[spec.logits_indices[r]] for r in batch.sample_rows]
        return BatchResult(next_token_ids=tokens, input_logprobs=lps)


def make(num_slots=4096, max_reqs=32, policy="lpm", chunk=None, disable=False, page_size=1, max_prefill=4096,
         speculative=None, fn=None):
    cache = ReqCache(num_slots, max_reqs, page_size=page_size, disable_radix_cache=disable)
    sched = Scheduler(cache, StopChecker([EOS], context_len=2048), schedule_policy=policy,
                      max_running_requests=max_reqs, max_prefill_tokens=max_prefill, chunk_size=chunk,
                      speculative=speculative)
    return sched, FakeRunner(max_reqs, 2048, fn)


def run_all(sched: Scheduler, runner: FakeRunner, max_steps: int = 10000) -> list[Req]:
    done = []
    for _ in range(max_steps):
        batch = sched.schedule()
        if batch is None:
            assert not sched.has_work(), "scheduler idles with work left (deadlock)"
            return done
        done += sched.process_batch_result(batch, runner.run(batch))
    raise AssertionError("did not finish")


def req(rid, prompt, max_new=8, **kw) -> Req:
    return Req(rid, prompt, SamplingParams(max_new_tokens=max_new, temperature=0.0), **kw)


def prompts(n, shared=0, distinct=20, seed=0):
    base = [(i * 13 + seed) % 80 + 10 for i in range(shared)]
    return [[2] + base + [(i * 31 + j * 7 + seed) % 80 + 10 for j in range(distinct)] for i in range(n)]


def check_outputs(reqs):
    for r in reqs:
        assert r.finished_reason.type == "length"
        assert r.output_ids == expected_output(r.origin_input_ids, r.params.max_new_tokens), r.rid
