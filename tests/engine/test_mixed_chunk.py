"""Mixed chunked prefill (``--enable-mixed-chunk``): a prefill step also decodes every running request.

Scheduler level (the fake runner of ``test_scheduler``, whose tokens are read back through the KV
slots, so any accounting slip changes the outputs): running requests advance in every step while
a long prompt is chunked (and stall when mixing is off), each step keeps to its token budget,
outputs stay exact through retraction, aborts, stop tokens, prefill-only requests, prompt logprobs
and speculative decoding (a constrained request's grammar drafts are verified in the decode steps
between chunks, and it decodes in the mixed ones), and the radix cache still shares the long prompt
afterwards. Engine level (tiny Llama, float32): greedy
outputs, a JSON-schema request and logprobs are the same with mixing on and off.
"""

from __future__ import annotations

import json
import threading

import jsonschema
import pytest
from radixlm.runtime.sampling_params import SamplingParams
from radixlm.runtime.scheduler.admission import mixed_prefill_budget
from radixlm.runtime.scheduler.req import Req
from radixlm.runtime.scheduler.req_cache import ReqCache
from radixlm.runtime.scheduler.results import StopChecker
from radixlm.runtime.scheduler.scheduler import Scheduler
from radixlm.runtime.scheduler.speculation import SpeculativeConfig
from radixlm.runtime.server_args import ServerArgs
from scheduler_fakes import EOS, FakeRunner, check_outputs, expected_output, prompts, req, run_all

from radixlm import Engine

LONG = [3] + [(j * 11) % 80 + 10 for j in range(299)]  # 300 tokens: 10 chunks of 32


def make(mixed: bool, chunk: int | None = 32, num_slots: int = 4096, max_reqs: int = 32, page_size: int = 1,
         policy: str = "lpm", max_prefill: int = 4096, speculative: SpeculativeConfig | None = None):
    cache = ReqCache(num_slots, max_reqs, page_size=page_size)
    sched = Scheduler(cache, StopChecker([EOS], context_len=2048), schedule_policy=policy,
                      max_running_requests=max_reqs, max_prefill_tokens=max_prefill, chunk_size=chunk,
                      mixed_chunk=mixed, speculative=speculative)
    return sched, FakeRunner(max_reqs, 2048)


def step(sched: Scheduler, runner: FakeRunner):
    batch = sched.schedule()
    return batch, sched.process_batch_result(batch, runner.run(batch))


def start_running(sched, runner, n=4, max_new=40):
    """``n`` short requests, stepped until all of them decode."""
    shorts = [req(f"s{i}", p, max_new=max_new) for i, p in enumerate(prompts(n))]
    for r in shorts:
        sched.add(r)
    while len(sched.running) < n:
        step(sched, runner)
    return shorts


@pytest.mark.parametrize("mixed", [True, False])
def test_running_requests_advance_while_a_long_prompt_is_chunked(mixed):
    sched, runner = make(mixed)
    shorts = start_running(sched, runner)
    long = req("long", LONG, max_new=4)
    sched.add(long)
    chunk_steps = 0
    while long.output_len == 0:
        before = [r.output_len for r in shorts]
        batch, _ = step(sched, runner)
        assert long in batch.reqs, "the long prompt is chunked in every step until it is done"
        chunk_steps += 1
        advanced = [r.output_len - b for r, b in zip(shorts, before)]
        if mixed:
            assert advanced == [1] * len(shorts), f"step {chunk_steps}: running requests stalled"
            assert batch.decode_reqs == shorts and not batch.is_decode
            assert batch.num_tokens <= 32, "the decode rows count against the chunk budget"
        else:
            assert advanced == [0] * len(shorts) and not batch.decode_reqs
    # 300 tokens at 32 per step alone, at 32 - 4 when 4 running requests share the budget
    assert chunk_steps == (11 if mixed else 10)
    run_all(sched, runner)
    check_outputs(shorts + [long])
    # the radix cache shares the long prompt afterwards (all but the recomputed last token)
    again = req("again", LONG + [7, 8, 9], max_new=3)
    sched.add(again)
    run_all(sched, runner)
    check_outputs([again])
    assert again.cached_tokens >= len(LONG) - 1
    assert sched.flush_cache()
    sched.cache.check_no_leak()


def test_mixed_budget_rule():
    assert mixed_prefill_budget(32, 4) == 28
    assert mixed_prefill_budget(32, 16) == 16  # at least half of the budget is prefill
    assert mixed_prefill_budget(32, 100) == 16
    assert mixed_prefill_budget(1, 5) == 1


@pytest.mark.parametrize("policy", ["lpm", "fcfs", "dfs-weight"])
@pytest.mark.parametrize("chunk", [8, 32, None])
def test_outputs_exact_with_staggered_arrivals(policy, chunk):
    sched, runner = make(True, chunk=chunk, policy=policy)
    reqs = [req(f"r{i}", p, max_new=5 + i % 7) for i, p in enumerate(prompts(12, shared=40, distinct=30))]
    for r in reqs:  # one arrival per step: most steps mix
        sched.add(r)
        step(sched, runner)
    run_all(sched, runner)
    mixed = [b for b in runner.steps if b.decode_reqs]
    assert len(mixed) >= 6
    if chunk is not None:  # unchunked, a first prompt goes whole
        for b in mixed:
            assert b.num_tokens <= max(chunk, len(b.decode_reqs) + chunk // 2)
    check_outputs(reqs)
    assert sched.flush_cache()
    sched.cache.check_no_leak()


@pytest.mark.parametrize("page_size", [1, 4])
def test_retraction_in_a_tiny_pool(page_size):
    sched, runner = make(True, chunk=16, num_slots=160, page_size=page_size)
    sched.new_token_ratio = 0.05  # optimistic admission, so decode runs short and retracts
    reqs = [req(f"r{i}", p, max_new=30) for i, p in enumerate(prompts(8, distinct=25))]
    for r in reqs[:4]:
        sched.add(r)
    for _ in range(3):
        step(sched, runner)
    for r in reqs[4:]:
        sched.add(r)
    run_all(sched, runner)
    assert sched.num_retractions > 0
    check_outputs(reqs)
    assert sched.flush_cache()
    sched.cache.check_no_leak()


def test_abort_prefill_only_and_prompt_logprobs_in_mixed_steps():
    sched, runner = make(True)
    shorts = start_running(sched, runner)
    long = req("long", LONG, max_new=4, return_logprob=True, logprob_start_len=100)
    prefill_only = req("p0", [2] + LONG[1:80], max_new=0)
    for r in (long, prefill_only):
        sched.add(r)
    step(sched, runner)
    aborted = sched.abort("s1")
    assert aborted == [shorts[1]] and shorts[1].finished_reason.type == "abort"
    batch, _ = step(sched, runner)
    assert shorts[1] not in batch.reqs and batch.decode_reqs == [shorts[0]] + shorts[2:]
    run_all(sched, runner)
    check_outputs(shorts[:1] + shorts[2:] + [long])
    # prompt logprobs: one None, then one entry per position 101 .. 299, despite the chunking
    assert long.logprobs.input_token[0] is None and len(long.logprobs.input_token) == len(LONG) - 100
    assert prefill_only.output_ids == [] and prefill_only.finished_reason.type == "length"
    assert sched.flush_cache()
    sched.cache.check_no_leak()


def test_stop_tokens_finish_decode_rows_of_a_mixed_step():
    sched, runner = make(True)
    p = prompts(1)[0]
    third = expected_output(p, 3)[2]
    stopper = Req("stop", p, SamplingParams(max_new_tokens=20, temperature=0.0, stop_token_ids=[third]))
    sched.add(stopper)
    step(sched, runner)
    sched.add(req("long", LONG, max_new=2))
    finished = []
    while stopper.output_len < 3:
        batch, done = step(sched, runner)
        assert batch.decode_reqs == [stopper]
        finished += done
    assert stopper in finished and stopper.finished_reason.type == "stop"
    assert stopper.output_ids == expected_output(p, 3)
    run_all(sched, runner)
    assert sched.flush_cache()
    sched.cache.check_no_leak()


class DraftingConstraint:
    """A fake constraint that allows every token and, after every 4th it accepts, proposes
    ``FORCED`` as the grammar's forced text (which the fake model never writes: every draft is
    rejected, so every verify step hands slots back)."""

    FORCED = [50, 51]

    def __init__(self) -> None:
        self.accepted = 0
        self.drafted = 0

    def accept(self, token: int) -> None:
        self.accepted += 1

    def rollback(self, n: int) -> None:
        self.accepted -= n

    def validate(self, tokens: list[int]) -> int:
        return len(tokens)

    def draft(self, max_tokens: int) -> list[int]:
        if self.accepted % 4 or self.accepted == 0:
            return []
        self.drafted += 1
        return self.FORCED[:max_tokens]

    def close(self, output_len: int, max_output_len: int) -> None:
        return None


@pytest.mark.parametrize("mixed", [True, False])
def test_drafting_requests_keep_decoding_while_a_long_prompt_is_chunked(mixed):
    sched, runner = make(mixed, speculative=SpeculativeConfig(num_draft_tokens=4, max_batch_size=8))
    shorts = start_running(sched, runner, n=2)
    constrained = req("c", prompts(3)[2], max_new=60)
    constrained.constraint = DraftingConstraint()
    sched.add(constrained)
    step(sched, runner)
    long = req("long", LONG, max_new=2)
    sched.add(long)
    stalled = 0
    while long.output_len == 0:
        before = constrained.output_len
        step(sched, runner)
        stalled += constrained.output_len == before
    assert stalled == (0 if mixed else 10)
    run_all(sched, runner)
    assert constrained.output_ids == expected_output(constrained.origin_input_ids, 60)
    assert constrained.constraint.drafted > 0 and constrained.spec_verify_ct > 0
    check_outputs(shorts + [long])
    assert sched.flush_cache()
    sched.cache.check_no_leak()


def test_server_arg_and_flag():
    assert ServerArgs().enable_mixed_chunk is False
    with pytest.raises(ValueError, match="enable_mixed_chunk"):
        ServerArgs(enable_mixed_chunk="yes")
    from radixlm.flags import IGNORED_FLAGS
    assert "--enable-mixed-chunk" not in IGNORED_FLAGS


# ---------------------------------------------------------------------- engine (tiny Llama)

SCHEMA = {"type": "object", "properties": {"story": {"type": "string", "maxLength": 100},
                                           "age": {"type": "integer", "minimum": 0, "maximum": 99}},
          "required": ["story", "age"], "additionalProperties": False}
GREEDY = {"temperature": 0.0, "max_new_tokens": 48, "ignore_eos": True}


def run_arrival(model: str, mixed: bool) -> dict:
    """Three plain requests (one with logprobs) and a JSON-schema one decode; a 600-token prompt
    arrives once all of them streamed two chunks; returns everything the callers got, and the
    decode rows of every mixed step."""
    outs: dict = {}
    # a float32 KV cache: a decode row in a mixed forward differs from one in a decode forward by float32
    # rounding, which a 16-bit cache would turn into float16 ulps of its stored keys (3e-4 in a logprob)
    with Engine(model, max_total_tokens=8192, chunked_prefill_size=64, enable_mixed_chunk=mixed,
                kv_cache_dtype="float32") as engine:
        decode_rows: list[list[str]] = []  # per mixed step, the rids decoding in it
        run = engine.runner.run

        long_in = threading.Event()  # the long prompt reached the engine's inbox
        submit = engine._loop.submit

        def recording_submit(reqs):
            submit(reqs)
            if any(r.rid == "long" for r in reqs):
                long_in.set()

        def recording_run(batch):
            # Counts, not timing: once all four decode with two tokens out, the engine waits for the
            # long prompt, so it always arrives with 40+ tokens left to decode beside its chunks.
            if batch.is_decode and not long_in.is_set() and len(batch.reqs) == 4 and \
                    all(len(r.output_ids) >= 2 for r in batch.reqs):
                assert long_in.wait(60)
            if batch.decode_reqs and not batch.is_verify:  # a verify step decodes all: it is not mixed
                decode_rows.append([r.rid for r in batch.decode_reqs])
            return run(batch)

        engine._loop.submit = recording_submit
        engine.runner.run = recording_run
        started = [threading.Event() for _ in range(4)]
        specs = [("a", "Once upon a time", GREEDY, {}),
                 ("b", "The river flows", GREEDY, {"return_logprob": True, "top_logprobs_num": 3}),
                 ("c", "Numbers: 1 2 3", {**GREEDY, "max_new_tokens": 64}, {}),
                 ("json", "Person:", {"temperature": 0.0, "max_new_tokens": 96, "json_schema": json.dumps(SCHEMA)},
                  {})]

        def consume(i, rid, prompt, params, extra):
            chunks = []
            for chunk in engine.generate(prompt, params, stream=True, rid=rid, **extra):
                chunks.append(chunk)
                if len(chunks) >= 2:  # decoding (past the grammar's forced opening)
                    started[i].set()
            outs[rid] = chunks

        threads = [threading.Thread(target=consume, args=(i, *s)) for i, s in enumerate(specs)]
        threads[3].start()  # the constrained one first: its grammar compiles meanwhile
        assert started[3].wait(60)
        for t in threads[:3]:
            t.start()
        for e in started:
            assert e.wait(60)
        long_prompt = " ".join(f"word{i % 97}" for i in range(250))
        outs["long"] = engine.generate(long_prompt, {"temperature": 0.0, "max_new_tokens": 8}, rid="long",
                                       return_logprob=True, logprob_start_len=300)
        for t in threads:
            t.join(60)
        outs["again"] = engine.generate(long_prompt + " and more", {"temperature": 0.0, "max_new_tokens": 4})
        outs["decode_rows"] = decode_rows
        engine.check_no_leak()
    return outs


def joined(chunks: list[dict]) -> tuple[list[int], list]:
    ids, lps = [], []
    for c in chunks:
        ids += c["output_ids"]
        lps += c["meta_info"].get("output_token_logprobs", [])
    return ids, lps


def test_engine_outputs_identical_mixed_on_and_off(tiny_llama):
    on, off = run_arrival(tiny_llama, True), run_arrival(tiny_llama, False)
    assert not off["decode_rows"]
    # 600 tokens in chunks of 64 - 4 while all four decode (the constrained one included)
    assert sum(set(rids) >= {"a", "b", "c", "json"} for rids in on["decode_rows"]) >= 8
    long_tokens = on["long"]["meta_info"]["prompt_tokens"]
    assert long_tokens > 500
    for rid in ("a", "b", "c", "json"):
        (ids_on, lps_on), (ids_off, lps_off) = joined(on[rid]), joined(off[rid])
        assert ids_on == ids_off, rid
        assert [t for _, t, _ in lps_on] == [t for _, t, _ in lps_off]
        for (a, _, _), (b, _, _) in zip(lps_on, lps_off):
            assert a == pytest.approx(b, abs=1e-4)
    assert len(joined(on["b"])[1]) == 48
    text = "".join(c["text"] for c in on["json"])
    jsonschema.validate(json.loads(text), SCHEMA)
    assert on["long"]["output_ids"] == off["long"]["output_ids"]
    lp_on = [v for v, _, _ in on["long"]["meta_info"]["input_token_logprobs"][1:]]
    lp_off = [v for v, _, _ in off["long"]["meta_info"]["input_token_logprobs"][1:]]
    assert len(lp_on) == long_tokens - 301 and lp_on == pytest.approx(lp_off, abs=1e-4)
    assert on["again"]["output_ids"] == off["again"]["output_ids"]
    assert on["again"]["meta_info"]["cached_tokens"] >= long_tokens - 1
