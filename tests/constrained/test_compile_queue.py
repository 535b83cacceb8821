"""The compile queue: round-robin between callers (one caller's burst of slow compiles cannot
hold another's trivial one behind it), and a compile's wall budget runs from its submission, so
time in the queue counts and a job that spent it there fails without running."""

from __future__ import annotations

import queue
import time

import pytest
from polling import wait_for
from radixlm.constrained import GrammarBackend
from radixlm.constrained.compile.pool import CompileJob, FairQueue
from radixlm.constrained.compile.worker import CompileRequest
from radixlm.runtime.sampling_params import SamplingParams

HOOKED = "radixlm.constrained.testing.compile_hooks:slow_marked"


def started(vocab, **kwargs) -> GrammarBackend:
    b = GrammarBackend(vocab, num_workers=1, compile_fn=HOOKED, **kwargs)
    wait_for(lambda: len(b.pool.worker_pids()) == 1)
    return b


def test_fair_queue_round_robin_between_callers():
    q = FairQueue()
    for i in range(4):
        q.put(f"a{i}", "A")
    q.put("b0", "B")
    q.put("b1", "B")
    q.put("c0", "C")
    assert [q.get() for _ in range(7)] == ["a0", "b0", "c0", "a1", "b1", "a2", "a3"]
    with pytest.raises(queue.Empty):
        q.get_nowait()


def test_a_trivial_compile_is_not_starved_by_another_callers_slow_ones(vocab):
    """Caller A queues four slow compiles, then caller B a trivial one, while a third caller's
    compile holds the only worker; once it is cancelled, B's compile is the second to run."""
    b = started(vocab, compile_timeout_s=120.0)
    done: list[str] = []
    try:
        blocker = b.submit(SamplingParams(regex="slow:100"), caller="Z")
        slow = [b.submit(SamplingParams(regex=f"slow:0.{3 + i}"), caller="A") for i in range(4)]
        for i, fut in enumerate(slow):
            fut.add_done_callback(lambda f, i=i: done.append(f"A{i}"))
        trivial = b.submit(SamplingParams(regex="abc"), caller="B")
        trivial.add_done_callback(lambda f: done.append("B"))
        blocker.cancel()  # kills the worker: the queued jobs run in the queue's order
        for fut in (*slow, trivial):
            fut.result(timeout=120)
        assert done == ["A0", "B", "A1", "A2", "A3"]  # first come, first served: B last
    finally:
        b.shutdown()


def test_a_job_whose_budget_ran_out_in_the_queue_fails_without_running(vocab):
    """A job queued 2 s ago with a 1 s budget: the budget error, and the worker never saw it."""
    b = started(vocab, compile_timeout_s=1.0)
    outcomes = []
    try:
        pid = b.pool.worker_pids()[0]
        job = CompileJob(CompileRequest("regex", "abc"), outcomes.append, submitted=time.monotonic() - 2.0)
        b.pool.submit(job)
        wait_for(lambda: outcomes)
        assert job.outcome == "timeout"
        assert "exceeded the 1 s budget (time waiting in the compile queue included)" in str(job.error)
        assert b.pool.stats["expired_in_queue"] == 1
        assert b.pool.stats["workers_replaced"] == 0 and b.pool.worker_pids() == [pid]  # never ran
        assert b.submit(SamplingParams(regex="abc")).result(timeout=120).matches("abc")  # fresh jobs run
    finally:
        b.shutdown()



def test_fair_queue_counts_items_no_waiting_getter_will_take():
    q = FairQueue()
    q.put("a")
    assert q.unserved() == 1
    q.get()
    assert q.unserved() == 0


def test_the_second_worker_starts_only_when_the_first_is_busy(vocab):
    """Two slots: one worker at start; a compile submitted while it runs a slow one starts the
    second, which serves it before the slow one ends; idle again, no third start."""
    b = GrammarBackend(vocab, num_workers=2, compile_fn=HOOKED, compile_timeout_s=120.0)
    try:
        wait_for(lambda: len(b.pool.worker_pids()) == 1)
        assert b.submit(SamplingParams(regex="abc")).result(timeout=120).matches("abc")
        assert b.pool.started_slots == 1 and b.pool.stats["worker_starts"] == 1  # served by the first
        blocker = b.submit(SamplingParams(regex="slow:100"), caller="Z")
        wait_for(lambda: b.pool._queue.unserved() == 0 and len(b.pool._queue) == 0)  # the first took it
        quick = b.submit(SamplingParams(regex="xyz"), caller="B")
        assert quick.result(timeout=120).matches("xyz") and not blocker.done()
        assert b.pool.started_slots == 2 and len(b.pool.worker_pids()) == 2
        blocker.cancel()
        assert b.submit(SamplingParams(regex="abc")).result(timeout=120).matches("abc")
        assert b.pool.started_slots == 2
    finally:
        b.shutdown()
