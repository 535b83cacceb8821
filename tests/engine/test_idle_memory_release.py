"""The step loop hands the heap's free pages back once per idle period after a batch ran
(``step_loop.IDLE_RELEASE_S``), never while requests run, and not again while it stays idle."""

from __future__ import annotations

from polling import wait_for
from radixlm.runtime.engine import step_loop

from radixlm import Engine

PARAMS = {"temperature": 0, "max_new_tokens": 4}


def test_one_release_per_idle_period(tiny_llama, monkeypatch):
    released = []
    monkeypatch.setattr(step_loop, "IDLE_RELEASE_S", 0.05)
    monkeypatch.setattr(step_loop, "release_free_memory", lambda: released.append(1) or True)
    with Engine(tiny_llama, max_total_tokens=4096, grammar_warmup=False) as engine:
        assert engine.get_stats()["idle_memory_releases"] == 0  # nothing ran yet: nothing to release
        first = engine.generate("Hello", PARAMS)
        wait_for(lambda: engine.get_stats()["idle_memory_releases"] == 1)
        # idle on: the loop sleeps without a timeout until a door is used, so no second release
        for _ in range(20):
            engine.inspect()  # a door used while idle (a step that runs no batch)
        assert engine.get_stats()["idle_memory_releases"] == 1 and len(released) == 1
        assert engine.generate("Hello", PARAMS)["output_ids"] == first["output_ids"]  # same answer after
        wait_for(lambda: engine.get_stats()["idle_memory_releases"] == 2)
        assert len(released) == 2
        engine.check_no_leak()


def test_a_long_extend_step_hands_its_pages_back(tiny_llama, monkeypatch):
    """A step that extended ``RELEASE_AFTER_EXTEND_TOKENS`` tokens releases right after it (a long
    prefill's activations are not what the decode steps after it reuse); a short one does not."""
    released = []
    monkeypatch.setattr(step_loop, "IDLE_RELEASE_S", 3600)  # no idle release in this test
    monkeypatch.setattr(step_loop, "RELEASE_AFTER_EXTEND_TOKENS", 64)
    monkeypatch.setattr(step_loop, "release_free_memory", lambda: released.append(1) or True)
    with Engine(tiny_llama, max_total_tokens=4096, grammar_warmup=False) as engine:
        short = engine.generate(input_ids=list(range(10, 40)), sampling_params=PARAMS)
        assert engine.get_stats()["extend_memory_releases"] == 0 and released == []
        long = engine.generate(input_ids=list(range(10, 110)), sampling_params=PARAMS)
        assert engine.get_stats()["extend_memory_releases"] == 1 and len(released) == 1
        assert len(short["output_ids"]) == len(long["output_ids"]) == 4
        engine.check_no_leak()
