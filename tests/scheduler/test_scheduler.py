"""Scheduler unit tests with a fake runner (no model, no torch).

The fake runner keeps a fake KV pool (slot -> token id) and a req_to_token table, applies each
batch's table writes and new slots, and computes every request's next token from the tokens it
*reads back through its slots*. Any accounting bug (wrong prefix slots, a slot freed while in
use and reused) changes the outputs, which are compared with the token function applied to the
true sequence.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
from radixlm.runtime.sampling_params import SamplingParams
from radixlm.runtime.scheduler.admission import dfs_weight_order, order_waiting
from radixlm.runtime.scheduler.req import Req
from scheduler_fakes import (
    check_outputs,
    expected_output,
    make,
    prompts,
    req,
    run_all,
)

pytestmark = pytest.mark.unit  # pure Python: no engine, no server, no model forward


@pytest.mark.parametrize("policy", ["lpm", "fcfs", "dfs-weight"])
@pytest.mark.parametrize("disable", [False, True])
def test_all_requests_complete_with_correct_tokens(policy, disable):
    sched, runner = make(policy=policy, disable=disable)
    reqs = [req(f"r{i}", p, max_new=6 + i % 3) for i, p in enumerate(prompts(12, shared=40))]
    for r in reqs:
        sched.add(r)
    assert len(run_all(sched, runner)) == 12
    check_outputs(reqs)
    if disable:
        assert all(r.cached_tokens == 0 for r in reqs)
    assert sched.flush_cache()
    sched.cache.check_no_leak()


def test_shared_prefix_is_computed_once():
    sched, runner = make()
    reqs = [req(f"r{i}", p) for i, p in enumerate(prompts(8, shared=100))]
    for r in reqs:
        sched.add(r)
    run_all(sched, runner)
    check_outputs(reqs)
    first = runner.steps[0]
    assert len(first.reqs) == 1  # the others waited one step to hit the cache (in-batch sharing)
    assert sorted(r.cached_tokens for r in reqs)[1:] == [101] * 7
    prefill_tokens = sum(b.num_tokens for b in runner.steps if not b.is_decode)
    assert prefill_tokens == 121 + 7 * 20
    assert sched.flush_cache()
    sched.cache.check_no_leak()


@pytest.mark.parametrize("chunk", [7, 16, 64])
def test_chunked_prefill_matches(chunk):
    sched, runner = make(chunk=chunk)
    reqs = [req(f"r{i}", p, max_new=5) for i, p in enumerate(prompts(4, shared=60, distinct=30))]
    for r in reqs:
        sched.add(r)
    run_all(sched, runner)
    check_outputs(reqs)
    assert all(b.num_tokens <= chunk for b in runner.steps if not b.is_decode)
    assert sched.flush_cache()
    sched.cache.check_no_leak()


def test_retraction_under_tiny_pool_completes_identically():
    sched, runner = make(num_slots=160, max_reqs=16)
    reqs = [req(f"r{i}", p, max_new=40) for i, p in enumerate(prompts(10, shared=10, distinct=12))]
    for r in reqs:
        sched.add(r)
    run_all(sched, runner)
    check_outputs(reqs)
    assert sched.num_retractions > 0
    assert sched.flush_cache()
    sched.cache.check_no_leak()


def test_retraction_without_radix_cache():
    sched, runner = make(num_slots=120, max_reqs=16, disable=True)
    sched.new_token_ratio = 0.05  # an optimistic estimate, so that decode runs out of slots
    reqs = [req(f"r{i}", p, max_new=40) for i, p in enumerate(prompts(6, distinct=15))]
    for r in reqs:
        sched.add(r)
    run_all(sched, runner)
    check_outputs(reqs)
    assert sched.num_retractions > 0
    sched.cache.check_no_leak()


def test_page_size_4():
    sched, runner = make(page_size=4)
    reqs = [req(f"r{i}", p) for i, p in enumerate(prompts(6, shared=37))]
    for r in reqs:
        sched.add(r)
    run_all(sched, runner)
    check_outputs(reqs)
    assert all(r.cached_tokens % 4 == 0 for r in reqs)
    assert max(r.cached_tokens for r in reqs) >= 36
    assert sched.flush_cache()
    sched.cache.check_no_leak()


def test_abort_running_and_waiting_frees_slots():
    sched, runner = make(max_reqs=2)
    reqs = [req(f"r{i}", p, max_new=50) for i, p in enumerate(prompts(3))]
    for r in reqs:
        sched.add(r)
    for _ in range(3):
        batch = sched.schedule()
        sched.process_batch_result(batch, runner.run(batch))
    assert len(sched.running) == 2 and len(sched.waiting) == 1
    assert [r.rid for r in sched.abort("r0")] == ["r0"]
    assert [r.rid for r in sched.abort("r2")] == ["r2"]
    assert reqs[0].finished_reason.type == "abort" and reqs[0].kv.req_pool_idx is None
    assert sched.abort("nope") == []
    run_all(sched, runner)
    assert reqs[1].output_ids == expected_output(reqs[1].origin_input_ids, 50)
    assert sched.flush_cache()
    sched.cache.check_no_leak()


def test_flush_refused_while_running():
    sched, runner = make()
    sched.add(req("a", prompts(1)[0]))
    batch = sched.schedule()
    sched.process_batch_result(batch, runner.run(batch))
    assert not sched.flush_cache()
    run_all(sched, runner)
    assert sched.flush_cache()


def test_logprob_start_len_limits_the_match():
    sched, runner = make()
    p = prompts(1, shared=0, distinct=30)[0]
    a = req("a", p)
    sched.add(a)
    run_all(sched, runner)
    b = req("b", p, return_logprob=True, logprob_start_len=10)
    sched.add(b)
    batch = sched.schedule()
    assert batch.spec.prefix_lens == [10]
    sched.process_batch_result(batch, runner.run(batch))
    run_all(sched, runner)
    assert b.logprobs.input_token[0] is None and len(b.logprobs.input_token) == len(p) - 10
    c = req("c", p)  # never the whole prompt: the last token is recomputed for its logits
    sched.add(c)
    assert sched.schedule().spec.extend_lens == [1]


@pytest.mark.parametrize("chunk", [None, 7])
def test_max_new_tokens_zero_prefills_and_caches(chunk):
    sched, runner = make(chunk=chunk)
    p = prompts(1, distinct=30)[0]
    a = req("a", p, max_new=0, return_logprob=True, logprob_start_len=len(p) - 1)
    sched.add(a)
    assert run_all(sched, runner) == [a]
    assert a.output_ids == [] and a.finished_reason.type == "length" and a.logprobs.input_token == [None]
    assert not any(b.sample_reqs for b in runner.steps)
    b = req("b", p + [50, 51])
    sched.add(b)
    run_all(sched, runner)
    assert b.cached_tokens == len(p)  # the whole pre-filled prompt
    check_outputs([b])
    assert sched.flush_cache()
    sched.cache.check_no_leak()


def test_stop_token_and_min_new_tokens():
    sched, runner = make()
    p = prompts(1)[0]
    want = expected_output(p, 10)
    r = Req("s", p, SamplingParams(max_new_tokens=10, temperature=0.0, stop_token_ids=[want[3]]))
    sched.add(r)
    run_all(sched, runner)
    assert r.finished_reason.type == "stop" and r.finished_reason.matched == want[3]
    assert r.output_ids == want[:4]


def test_policy_orders():
    a, b, c, d = (req(x, ids) for x, ids in
                  [("a", [5, 1, 2]), ("b", [9, 9]), ("c", [5, 1, 3]), ("d", [5, 1, 2, 4])])
    assert [r.rid for r in order_waiting([a, b, c, d], "fcfs", lambda r: 0)] == ["a", "b", "c", "d"]
    plen = {"a": 1, "b": 2, "c": 0, "d": 2}
    assert [r.rid for r in order_waiting([a, b, c, d], "lpm", lambda r: plen[r.rid])] == ["b", "d", "a", "c"]
    # dfs-weight: the [5, 1] group (3 requests) goes before [9, 9]; inside it, [5 1 2] (2) before [5 1 3]
    assert [r.rid for r in dfs_weight_order([b, c, a, d])] == ["a", "d", "c", "b"]
    many = [req(f"x{i}", [i % 7 + 2]) for i in range(130)]
    assert order_waiting(many, "lpm", lambda r: -r.arrival) == many  # long queue: fcfs


def test_scheduler_never_imports_torch():
    code = ("import sys; import radixlm.runtime.scheduler.scheduler, radixlm.runtime.scheduler.req_cache, "
            "radixlm.runtime.scheduler.admission, radixlm.runtime.scheduler.results, "
            "radixlm.runtime.scheduler.speculation, radixlm.runtime.scheduler.req; "
            "assert 'torch' not in sys.modules, 'torch imported'")
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize("policy", ["lpm", "fcfs", "dfs-weight"])
def test_admission_is_fair_between_callers(policy):
    sched, runner = make(policy=policy, max_reqs=4)
    batch = [req(f"big{i}", p, max_new=4) for i, p in enumerate(prompts(200, shared=30))]
    for r in batch:
        r.caller = 1  # one generate call of 200 prompts
        sched.add(r)
    lone = req("lone", prompts(1, seed=5)[0], max_new=4)
    lone.caller = 2
    sched.add(lone)
    steps = 0
    while not lone.finished:
        batch_ = sched.schedule()
        sched.process_batch_result(batch_, runner.run(batch_))
        steps += 1
    assert steps <= 12, f"the lone request waited {steps} steps behind a 200-prompt batch"
    run_all(sched, runner)
    check_outputs(batch + [lone])
