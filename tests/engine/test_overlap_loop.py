"""Overlap scheduling: the overlapped step loop gives token-for-token the plain loop's results.

A fake runner (tokens a function of the input token and position, a controllable delay) shows the
overlap itself: step N+1 is scheduled before step N's result is consumed. The real tiny model
checks greedy and seeded sampling, stop strings, EOS, aborts, constraints and radix-cache reuse.
"""

from __future__ import annotations

import threading
import time

import pytest
from radixlm.runtime.engine.delivery import Delivery, RequestHandle
from radixlm.runtime.engine.step_loop import EngineLoop
from radixlm.runtime.model.cuda_graph_runner import UNVERIFIED_ENV
from radixlm.runtime.sampling_params import SamplingParams
from radixlm.runtime.scheduler.batch import BatchResult, ScheduledBatch
from radixlm.runtime.scheduler.decode_ahead import future_token, overlap_blocker, resolve_future_tokens
from radixlm.runtime.scheduler.req import Req
from radixlm.runtime.scheduler.req_cache import ReqCache
from radixlm.runtime.scheduler.results import StopChecker
from radixlm.runtime.scheduler.scheduler import Scheduler

EOS = 2
VOCAB = 50


class FakeRunner:
    """Next token = f(input token, position); logs (event, step, time); sleeps ``delay_s``."""

    def __init__(self, delay_s: float = 0.0) -> None:
        self.delay_s = delay_s
        self.log: list[tuple[str, int, float]] = []
        self.steps = 0

    def run(self, batch: ScheduledBatch) -> BatchResult:
        step = self.steps
        self.steps += 1
        self.log.append(("run_start", step, time.perf_counter()))
        spec = batch.spec
        assert all(t >= 0 for t in spec.input_ids), "future tokens reached the runner unresolved"
        ends = [sum(spec.extend_lens[:i + 1]) for i in range(spec.batch_size)]
        tokens = [(spec.input_ids[e - 1] * 7 + spec.prefix_lens[i] + spec.extend_lens[i] * 3) % VOCAB
                  for i, e in enumerate(ends)]
        time.sleep(self.delay_s)
        self.log.append(("run_end", step, time.perf_counter()))
        return BatchResult([tokens[r] for r in batch.sample_rows])


class NoGrammar:
    """The grammar compiler's doors, for requests without constraints."""

    def __len__(self) -> int:
        return 0

    def poll(self) -> tuple[list[Req], list[Req]]:
        return [], []

    def cancel(self, rid: str) -> list[Req]:
        return []

    def drop_all(self) -> list[Req]:
        return []


def _reqs(n: int) -> list[Req]:
    reqs = []
    for i in range(n):
        params = SamplingParams(max_new_tokens=4 + (5 * i) % 13, stop_token_ids=[11] if i % 3 == 0 else None)
        reqs.append(Req(f"r{i}", [3 + i, 4 + (i * 5) % 17, 5 + i % 4] * (1 + i % 3), params))
    return reqs


def _serve(reqs: list[Req], *, overlap: bool, runner: FakeRunner,
           abort_after: tuple[str, float] | None = None) -> tuple[list[tuple], Scheduler, EngineLoop]:
    cache = ReqCache(512, 16)
    scheduler = Scheduler(cache, StopChecker([EOS], 256))
    loop = EngineLoop(scheduler, runner, NoGrammar(), overlap=overlap)
    handle = RequestHandle()
    for i, req in enumerate(reqs):
        req.delivery = Delivery(handle, i, time.perf_counter())
    loop.submit(reqs)
    if abort_after is not None:
        threading.Timer(abort_after[1], loop.abort, (abort_after[0],)).start()
    for _ in reqs:
        handle.get()
    try:
        loop.call(scheduler.cache.check_no_leak)
    finally:
        loop.stop()
    return [(r.rid, list(r.output_ids), r.finished_reason.type) for r in reqs], scheduler, loop


def test_future_tokens() -> None:
    assert resolve_future_tokens([5, future_token(0), future_token(2)], [7, 8, 9]) == [5, 7, 9]


def test_fake_runner_identical_results() -> None:
    plain, _, plain_loop = _serve(_reqs(12), overlap=False, runner=FakeRunner())
    over, _, loop = _serve(_reqs(12), overlap=True, runner=FakeRunner())
    assert over == plain
    assert plain_loop.overlap is None and loop.overlap.num_ahead > 10
    reasons = {r for _, _, r in plain}
    assert reasons == {"stop", "length"}  # EOS / stop_token_ids mid-flight, and max_new_tokens


def test_overlap_schedules_next_step_before_consuming_result() -> None:
    runner = FakeRunner(delay_s=0.03)
    events: list[tuple[str, float]] = []
    cache = ReqCache(512, 16)
    scheduler = Scheduler(cache, StopChecker([EOS], 256))
    plan, process = scheduler.schedule_decode_ahead, scheduler.process_batch_result

    def spy_plan(batch: ScheduledBatch):  # noqa: ANN202 - a test spy
        ahead = plan(batch)
        events.append(("ahead" if ahead else "no_ahead", time.perf_counter()))
        return ahead

    def spy_process(batch: ScheduledBatch, result: BatchResult) -> list[Req]:
        events.append(("consume", time.perf_counter()))
        return process(batch, result)

    scheduler.schedule_decode_ahead, scheduler.process_batch_result = spy_plan, spy_process
    loop = EngineLoop(scheduler, runner, NoGrammar(), overlap=True)
    launch = loop.overlap.worker.launch

    def spy_launch(batch: ScheduledBatch, depends_on=None):  # noqa: ANN001, ANN202 - a test spy
        runner.log.append(("launch", sum(name == "launch" for name, _, _ in runner.log), time.perf_counter()))
        return launch(batch, depends_on)

    loop.overlap.worker.launch = spy_launch
    reqs = [Req(f"x{i}", [3 + i, 9, 5], SamplingParams(max_new_tokens=8, ignore_eos=True)) for i in range(4)]
    handle = RequestHandle()
    for i, req in enumerate(reqs):
        req.delivery = Delivery(handle, i, time.perf_counter())
    loop.submit(reqs)
    for _ in reqs:
        handle.get()
    loop.stop()
    ends = {step: t for name, step, t in runner.log if name == "run_end"}
    aheads = [t for name, t in events if name == "ahead"]
    consumes = [t for name, t in events if name == "consume"]
    # step 0 is the prefill, steps 1..7 decode; each of 2..8 was scheduled while the step before
    # ran (8 is thrown away: every request finished in 7)
    assert len(aheads) == 7
    order = [(name, step) for name, step, _ in runner.log]
    for k, t in enumerate(aheads, start=1):
        assert t < ends[k] < consumes[k]  # step k+1 scheduled before step k's result was consumed
        # and already queued while step k ran: the device never waited for the CPU
        assert order.index(("launch", k + 1)) < order.index(("run_end", k)) < order.index(("run_start", k + 1))


def test_abort_mid_flight() -> None:
    reqs = [Req(f"a{i}", [3, 4 + i], SamplingParams(max_new_tokens=30, ignore_eos=True)) for i in range(3)]
    over, _, _ = _serve(reqs, overlap=True, runner=FakeRunner(delay_s=0.01), abort_after=("a1", 0.08))
    plain, _, _ = _serve([Req(f"a{i}", [3, 4 + i], SamplingParams(max_new_tokens=30, ignore_eos=True))
                          for i in range(3)], overlap=False, runner=FakeRunner())
    assert over[1][2] == "abort" and len(over[1][1]) < 30
    assert over[1][1] == plain[1][1][:len(over[1][1])]
    assert [over[0], over[2]] == [plain[0], plain[2]]


def test_blockers() -> None:
    assert overlap_blocker(Req("a", [1], SamplingParams())) is None
    assert "penalties" in overlap_blocker(Req("a", [1], SamplingParams(frequency_penalty=0.5)))
    assert "min_new_tokens" in overlap_blocker(Req("a", [1], SamplingParams(min_new_tokens=3)))
    constrained = Req("a", [1], SamplingParams())
    constrained.constraint = object()
    assert "grammar" in overlap_blocker(constrained)


# ---------------------------------------------------------------------- the real tiny model

def _engine_results(tiny_llama: str, monkeypatch: pytest.MonkeyPatch, overlap: bool):  # noqa: ANN202
    from radixlm.runtime.engine import Engine

    monkeypatch.setenv(UNVERIFIED_ENV, "1" if overlap else "0")
    shared = "System: answer briefly and politely. " * 3
    prompts = [shared + f"Question {i}: what is {i} plus {i}?" for i in range(6)]
    out = {}
    # overlap scheduling runs no verify steps (a step's shape would depend on the one before)
    with Engine(tiny_llama, device="cpu", max_total_tokens=8192, speculative_algorithm=None) as eng:
        assert (eng._loop.overlap is not None) == overlap
        out["greedy"] = eng.generate(prompts, {"temperature": 0.0, "max_new_tokens": 24})
        out["seeded"] = eng.generate(prompts, [{"temperature": 0.9, "top_p": 0.9, "seed": 7 + i,
                                                "max_new_tokens": 5 + 3 * i} for i in range(6)])
        greedy_text = out["greedy"][2]["text"]
        stop = greedy_text[len(greedy_text) // 2:][:3] or "e"
        out["stop"] = eng.generate(prompts, {"temperature": 0.0, "max_new_tokens": 24, "stop": [stop]})
        out["regex"] = eng.generate(prompts[:3], {"temperature": 0.0, "max_new_tokens": 16,
                                                  "regex": "(yes|no) [a-z]{2,6}\\."})
        out["mixed"] = eng.generate(prompts[:4], [{"temperature": 0.0, "max_new_tokens": 10},
                                                  {"temperature": 0.0, "max_new_tokens": 10, "regex": "[0-9]+"},
                                                  {"temperature": 0.0, "max_new_tokens": 10,
                                                   "frequency_penalty": 0.5},
                                                  {"temperature": 0.0, "max_new_tokens": 10, "ignore_eos": True}])
        out["ahead"] = eng._loop.overlap.num_ahead if overlap else 0
        eng.check_no_leak()
    return out


def test_real_model_identical(tiny_llama: str, monkeypatch: pytest.MonkeyPatch) -> None:
    plain = _engine_results(tiny_llama, monkeypatch, overlap=False)
    over = _engine_results(tiny_llama, monkeypatch, overlap=True)
    assert over.pop("ahead") > 20 and plain.pop("ahead") == 0
    for name in plain:
        keep = [(o["output_ids"], o["text"], o["meta_info"]["finish_reason"], o["meta_info"]["cached_tokens"])
                for o in plain[name]]
        got = [(o["output_ids"], o["text"], o["meta_info"]["finish_reason"], o["meta_info"]["cached_tokens"])
               for o in over[name]]
        assert got == keep, name
    assert any(o["meta_info"]["cached_tokens"] > 0 for o in over["seeded"])  # radix-cache reuse
    assert any(o["meta_info"]["finish_reason"]["type"] == "stop" for o in over["stop"])
