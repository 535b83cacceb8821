"""The compile queue: round-robin between callers (one caller's burst of slow compiles cannot
hold another's trivial one behind it), and a compile's wall budget runs from its submission, so
time in the queue counts and a job that spent it there fails without running."""

from __future__ import annotations

import queue
import time

import pytest
from radixlm.constrained import ConstraintError, GrammarBackend, TokenizerVocab
from radixlm.constrained.compile.fair_queue import FairQueue
from radixlm.runtime.sampling_params import SamplingParams
from radixlm.runtime.tokenizer.tokenizer import Tokenizer

HOOKED = "radixlm.constrained.testing.compile_hooks:slow_marked"


@pytest.fixture(scope="module")
def vocab(tiny_llama):
    return TokenizerVocab.from_tokenizer(Tokenizer(tiny_llama))


def wait_for(cond, timeout: float = 60.0) -> None:
    end = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < end, "timed out waiting"
        time.sleep(0.02)


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
    b = started(vocab)
    done: list[str] = []
    try:
        slow = [b.submit(SamplingParams(regex=f"slow:0.{3 + i}"), caller="A") for i in range(4)]
        for i, fut in enumerate(slow):
            fut.add_done_callback(lambda f, i=i: done.append(f"A{i}"))
        trivial = b.submit(SamplingParams(regex="abc"), caller="B")
        trivial.add_done_callback(lambda f: done.append("B"))
        for fut in (*slow, trivial):
            fut.result(timeout=120)
        # the slot takes A0 at once and at most one more of A's before B's turn (FIFO: last)
        assert done.index("B") <= 2, done
    finally:
        b.shutdown()


def test_queue_time_counts_in_the_budget(vocab):
    """The first job holds the only worker past the whole budget; the second, queued behind it,
    has spent its budget waiting and fails with the budget error without running."""
    b = started(vocab, compile_timeout_s=1.0)
    try:
        blocker = b.submit(SamplingParams(regex="slow:60"), caller="A")
        queued = b.submit(SamplingParams(regex="abc"), caller="B")
        with pytest.raises(ConstraintError, match="exceeded the 1 s budget"):
            blocker.result(timeout=120)
        with pytest.raises(ConstraintError, match=r"exceeded the 1 s budget \(time waiting in the compile queue"):
            queued.result(timeout=120)
        assert b.pool.stats["expired_in_queue"] == 1
        assert b.stats["timeouts"] == 2
        assert b.submit(SamplingParams(regex="abc")).result(timeout=120).matches("abc")  # retried afresh
    finally:
        b.shutdown()
