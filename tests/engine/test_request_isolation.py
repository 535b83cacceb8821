"""One request can never hurt another: failure isolation with fault injection, input limits and
prefix-cache namespaces, on the tiny Llama checkpoint.

Each fault test runs 16 concurrent requests, one of which is made to fail at one stage (sampling,
its grammar, detokenization, streaming); that one gets its own exception, the 15 others return
exactly the outputs they return without the fault, and no KV slot leaks.
"""

from __future__ import annotations

import threading
import time

import pytest
from radixlm.runtime.engine import engine as engine_module
from radixlm.runtime.engine import step_loop
from radixlm.runtime.engine.constraints import RequestMatcher
from radixlm.runtime.model import model_runner

from radixlm import Engine

GREEDY = {"temperature": 0.0, "max_new_tokens": 10}
NUM = 16
BAD = "req-7"


NESTED_20: dict = {"type": "integer"}
for _ in range(20):
    NESTED_20 = {"type": "array", "items": NESTED_20}


class InjectedFault(RuntimeError):
    """The exception the fault hooks raise."""


@pytest.fixture(scope="module")
def engine(tiny_llama):
    with Engine(tiny_llama, max_total_tokens=8192, random_seed=1, max_n=8, max_prompts_per_request=32,
                max_sequences_per_request=40, max_logit_bias=4, max_stop_strings=3, max_schema_bytes=2000,
                max_schema_depth=12) as e:
        yield e


@pytest.fixture(autouse=True)
def leak_check(engine):
    yield
    engine.check_no_leak()


def prompts() -> list[str]:
    return [f"A shared system prompt for every agent. Agent {i} asks about item {i * 3}." for i in range(NUM)]


@pytest.fixture(scope="module")
def reference(engine) -> list[list[int]]:
    """Outputs of the 16 requests without any fault."""
    return [engine.generate(p, GREEDY)["output_ids"] for p in prompts()]


def run_concurrently(engine: Engine, params: list[dict] | None = None, stream: bool = False) -> list:
    """Submit the 16 requests from 16 threads at once; each slot holds a result or an exception."""
    results: list = [None] * NUM
    start = threading.Barrier(NUM)

    def one(i: int) -> None:
        start.wait()
        try:
            p = params[i] if params else GREEDY
            if stream:
                chunks = list(engine.generate(prompts()[i], p, rid=f"req-{i}", stream=True))
                results[i] = sum((c["output_ids"] for c in chunks), [])
            else:
                results[i] = engine.generate(prompts()[i], p, rid=f"req-{i}")["output_ids"]
        except Exception as e:  # noqa: BLE001 - recorded for the assertions
            results[i] = e

    threads = [threading.Thread(target=one, args=(i,)) for i in range(NUM)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    return results


def check_isolated(results: list, reference: list[list[int]]) -> None:
    bad = int(BAD.split("-")[1])
    assert isinstance(results[bad], InjectedFault), results[bad]
    for i, out in enumerate(results):
        if i != bad:
            assert out == reference[i], f"request {i} was hurt: {out!r}"


def test_a_failing_sampler_fails_only_its_request(engine, reference, monkeypatch):
    original = model_runner.apply_logit_processors

    def faulty(logits, reqs, eos_token_ids):
        if any(r.rid == BAD for r in reqs):
            raise InjectedFault("sampling failed")
        return original(logits, reqs, eos_token_ids)

    monkeypatch.setattr(model_runner, "apply_logit_processors", faulty)
    check_isolated(run_concurrently(engine), reference)


def test_a_failing_grammar_fails_only_its_request(engine, monkeypatch):
    original = RequestMatcher.accept
    marker = "(yes|no) indeed"

    def faulty(self, token):
        if self.matcher.grammar.spec == marker:
            raise InjectedFault("grammar failed")
        return original(self, token)

    monkeypatch.setattr(RequestMatcher, "accept", faulty)
    params = [{**GREEDY, "regex": marker if i == 7 else "(yes|no) [a-z]{1,6}"} for i in range(NUM)]
    ref = [engine.generate(prompts()[i], params[i])["output_ids"] if i != 7 else None for i in range(NUM)]
    check_isolated(run_concurrently(engine, params), ref)


def test_a_failing_detokenizer_fails_only_its_request(engine, reference, monkeypatch):
    original = engine_module.Engine._make_reqs

    class Exploding:
        def step(self, ids):
            raise InjectedFault("detokenization failed")

    def make_reqs(self, *args):
        reqs, collector = original(self, *args)
        for req in reqs:
            if req.rid == BAD:
                req.decoded.detokenizer = Exploding()
        return reqs, collector

    monkeypatch.setattr(engine_module.Engine, "_make_reqs", make_reqs)
    check_isolated(run_concurrently(engine), reference)


def test_a_failing_stream_chunk_fails_only_its_request(engine, reference, monkeypatch):
    original = step_loop.stream_chunk

    def faulty(req):
        if req.rid == BAD and not req.finished:
            raise InjectedFault("streaming failed")
        return original(req)

    monkeypatch.setattr(step_loop, "stream_chunk", faulty)
    check_isolated(run_concurrently(engine, stream=True), reference)


def test_an_out_of_range_seed_is_a_clear_error_and_hurts_no_one(engine, reference):
    with pytest.raises(ValueError, match="seed"):
        engine.generate("x", {"seed": 10**30, "max_new_tokens": 2})
    extreme = engine.generate("x", {"seed": 2**63 - 1, "n": 3, "max_new_tokens": 2, "temperature": 1.0})
    assert len(extreme) == 3
    assert engine.generate(prompts()[0], GREEDY)["output_ids"] == reference[0]


@pytest.mark.parametrize("params, match", [
    ({"temperature": float("inf")}, "temperature"),
    ({"temperature": 1e308}, "temperature"),
    ({"logit_bias": {"999999": 1.0}}, "logit_bias"),
    ({"logit_bias": {str(i): 1.0 for i in range(5)}}, "logit_bias"),
    ({"stop": ["a", "b", "c", "d"]}, "stop"),
    ({"stop_token_ids": [10**6]}, "stop_token_ids"),
    ({"n": 9}, "max_n"),
    ({"json_schema": {"type": "object", "description": "x" * 3000}}, "max_schema_bytes"),
    ({"json_schema": NESTED_20}, "max_schema_depth"),
    ({"regex": "a" * 3000}, "max_schema_bytes"),
])
def test_request_limits_are_clear_errors(engine, params, match):
    with pytest.raises(ValueError, match=match):
        engine.generate("x", {"max_new_tokens": 2, **params})


def test_fan_out_limits_reject_before_any_work(engine, monkeypatch):
    encoded = []
    encode = engine.tokenizer.encode
    monkeypatch.setattr(engine.tokenizer, "encode", lambda *a, **k: encoded.append(1) or encode(*a, **k))
    with pytest.raises(ValueError, match="max_prompts_per_request"):
        engine.generate(["hello"] * 10_000, {"max_new_tokens": 1})
    with pytest.raises(ValueError, match="max_sequences_per_request"):
        engine.generate(["hello"] * 8, {"max_new_tokens": 1, "n": 8})
    assert not encoded  # nothing was tokenized or queued
    assert engine.get_stats()["num_queued_reqs"] == 0


def test_cache_namespaces_share_nothing_across_keys(engine):
    prompt = "Tenant secret system prompt: the launch code is 1234. " * 4 + "Question?"
    first = engine.generate(prompt, GREEDY, extra_key="tenant-a")
    other = engine.generate(prompt, GREEDY, extra_key="tenant-b")
    again = engine.generate(prompt, GREEDY, extra_key="tenant-a")
    shared = engine.generate(prompt, GREEDY)
    assert first["meta_info"]["cached_tokens"] == 0
    assert other["meta_info"]["cached_tokens"] == 0  # nothing reveals tenant a's prompt
    assert again["meta_info"]["cached_tokens"] > 0
    assert shared["meta_info"]["cached_tokens"] == 0  # the default namespace is a namespace too
    assert first["output_ids"] == other["output_ids"] == again["output_ids"] == shared["output_ids"]
    with pytest.raises(ValueError, match="extra_key"):
        engine.generate([prompt, prompt], GREEDY, extra_key=["only one"])


def test_a_huge_batch_does_not_starve_a_request_behind_it(tiny_llama):
    """With the fan-out limits off, a 400-prompt batch queues 400 sequences; a lone request sent
    after it is admitted at the next free slot (fair admission), not after the whole batch."""
    with Engine(tiny_llama, max_total_tokens=8192, max_running_requests=8, max_prompts_per_request=10_000,
                max_sequences_per_request=10_000) as eng:
        batch_done = threading.Event()

        def big() -> None:
            eng.generate([f"batch prompt {i}" for i in range(400)], {"temperature": 0.0, "max_new_tokens": 6})
            batch_done.set()

        thread = threading.Thread(target=big)
        thread.start()
        while eng.get_stats()["num_running_reqs"] == 0:
            time.sleep(0.01)
        out = eng.generate("a lone request", {"temperature": 0.0, "max_new_tokens": 6})
        assert out["meta_info"]["completion_tokens"] == 6
        assert not batch_done.is_set(), "the lone request waited for the whole batch"
        thread.join(timeout=300)
        assert batch_done.is_set()
        eng.check_no_leak()
