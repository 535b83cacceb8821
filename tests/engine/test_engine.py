"""End-to-end ``Engine`` tests on the tiny Llama checkpoint (float32, CPU).

One module-scoped engine serves most tests; after every test the autouse leak check flushes the
radix cache and asserts that every KV slot and table row is free again.
"""

from __future__ import annotations

import asyncio
import threading

import pytest
import torch

from radixlm import Engine

GREEDY = {"temperature": 0.0, "max_new_tokens": 8}
SYSTEM = ("You are a careful assistant. Answer briefly and cite the tools you used. "
          "Tools: search, calculator, calendar, weather, maps. ") * 2


def user_prompts(n: int) -> list[str]:
    return [f"{SYSTEM}User {i}: what is item number {i * 7}?" for i in range(n)]


@pytest.fixture(scope="module")
def engine(tiny_llama):
    with Engine(tiny_llama, max_total_tokens=8192, max_queued_requests=64, random_seed=1) as e:
        yield e


@pytest.fixture(autouse=True)
def leak_check(engine):
    yield
    engine.check_no_leak()


def test_generate_result_shape(engine):
    out = engine.generate("Hello world", GREEDY)
    assert set(out) == {"text", "output_ids", "meta_info"}
    meta = out["meta_info"]
    assert meta["completion_tokens"] == len(out["output_ids"]) == 8
    assert meta["finish_reason"] == {"type": "length", "matched": None}
    assert meta["prompt_tokens"] == len(engine.tokenizer.encode("Hello world", add_special_tokens=True))
    assert out["text"] == engine.tokenizer.decode(out["output_ids"])
    assert meta["e2e_latency"] > 0 and meta["forward_passes"] == 8
    assert 0 < meta["first_token_latency"] <= meta["e2e_latency"]
    again = engine.generate(input_ids=engine.tokenizer.encode("Hello world", add_special_tokens=True),
                            sampling_params=GREEDY)
    assert again["output_ids"] == out["output_ids"]


def test_batch_of_16_matches_alone_and_shares_prefix(engine):
    prompts = user_prompts(16)
    engine.flush_cache()
    batch = engine.generate(prompts, GREEDY)
    assert len(batch) == 16
    assert sum(o["meta_info"]["cached_tokens"] > 0 for o in batch) >= 15
    engine.flush_cache()
    for prompt, out in zip(prompts, batch):
        assert engine.generate(prompt, GREEDY)["output_ids"] == out["output_ids"]
    assert engine.get_stats()["cache_hit_rate"] > 0


def test_concurrent_threads_are_batched(engine):
    prompts = user_prompts(6)
    want = [o["output_ids"] for o in engine.generate(prompts, GREEDY)]
    got: dict[int, list[int]] = {}

    def worker(i: int) -> None:
        got[i] = engine.generate(prompts[i], GREEDY)["output_ids"]

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert [got[i] for i in range(6)] == want


def test_stop_strings_across_token_boundaries(engine):
    ref = engine.generate("Once upon a time", {"temperature": 0.0, "max_new_tokens": 24})
    ids = ref["output_ids"]
    pieces = [engine.tokenizer.decode(ids[:k]) for k in range(len(ids) + 1)]
    # a stop string made of the end of token 3 and the start of token 4
    a, b = pieces[3], pieces[5]
    stop = b[len(a) - 2:len(a) + 3] if len(a) >= 2 else b[:len(a) + 3]
    start = ref["text"].find(stop)
    assert start >= 0
    out = engine.generate("Once upon a time", {"temperature": 0.0, "max_new_tokens": 24, "stop": [stop]})
    assert out["meta_info"]["finish_reason"] == {"type": "stop", "matched": stop}
    assert out["text"] == ref["text"][:start]
    kept = engine.generate("Once upon a time", {"temperature": 0.0, "max_new_tokens": 24, "stop": stop,
                                                "no_stop_trim": True})
    assert kept["text"].startswith(ref["text"][:start] + stop)


def test_stop_token_ids_and_min_new_tokens(engine):
    ref = engine.generate("Tell me", {"temperature": 0.0, "max_new_tokens": 10})["output_ids"]
    out = engine.generate("Tell me", {"temperature": 0.0, "max_new_tokens": 10, "stop_token_ids": [ref[2]]})
    assert out["output_ids"] == ref[:3]
    assert out["meta_info"]["finish_reason"] == {"type": "stop", "matched": ref[2]}
    eos = engine.tokenizer.eos_token_ids[0]
    biased = {"temperature": 0.0, "max_new_tokens": 6, "logit_bias": {eos: 100.0}}
    assert engine.generate("Tell me", biased)["meta_info"]["finish_reason"]["matched"] == eos
    held = engine.generate("Tell me", {**biased, "min_new_tokens": 4})
    assert held["meta_info"]["completion_tokens"] == 5 and held["output_ids"][:4].count(eos) == 0
    ignored = engine.generate("Tell me", {**biased, "ignore_eos": True})
    assert ignored["output_ids"] == [eos] * 6


def test_seeded_sampling_is_reproducible_alone_and_in_batch(engine):
    params = {"temperature": 1.0, "top_p": 0.9, "max_new_tokens": 12, "seed": 1234}
    alone = engine.generate("Sample this", params)["output_ids"]
    others = [{"temperature": 1.0, "max_new_tokens": 12}] * 3
    batch = engine.generate(["Something else", "Sample this", "More text", "x y z"],
                            [others[0], params, others[1], others[2]])
    assert batch[1]["output_ids"] == alone
    other_seed = engine.generate("Sample this", {**params, "seed": 99})["output_ids"]
    assert other_seed != alone


def test_n_samples_share_the_prompt(engine):
    outs = engine.generate(SYSTEM + "Pick a word:", {"temperature": 1.0, "max_new_tokens": 6, "n": 3, "seed": 5})
    assert isinstance(outs, list) and len(outs) == 3
    assert len({tuple(o["output_ids"]) for o in outs}) > 1
    assert sum(o["meta_info"]["cached_tokens"] > 0 for o in outs) >= 2
    batch = engine.generate(["a b", "c d"], {"temperature": 0.0, "max_new_tokens": 3, "n": 2})
    assert len(batch) == 4 and batch[0]["output_ids"] == batch[1]["output_ids"]


def test_streaming_deltas_concatenate(engine):
    full = engine.generate("Stream me", {"temperature": 0.0, "max_new_tokens": 16})
    chunks = list(engine.generate("Stream me", {"temperature": 0.0, "max_new_tokens": 16}, stream=True))
    assert "".join(c["text"] for c in chunks) == full["text"]
    assert sum((c["output_ids"] for c in chunks), []) == full["output_ids"]
    assert chunks[-1]["meta_info"]["finish_reason"]["type"] == "length"
    assert all(c["meta_info"]["finish_reason"] is None for c in chunks[:-1])
    latencies = {c["meta_info"]["first_token_latency"] for c in chunks if c["output_ids"]}
    assert len(latencies) == 1 and 0 < latencies.pop() <= chunks[-1]["meta_info"]["e2e_latency"]


def test_max_new_tokens_zero_prefills_and_caches(engine):
    prompt = SYSTEM + "Prefill only."
    ids = engine.tokenizer.encode(prompt, add_special_tokens=True)
    engine.flush_cache()
    out = engine.generate(prompt, {"max_new_tokens": 0}, return_logprob=True, logprob_start_len=0)
    meta = out["meta_info"]
    assert out["output_ids"] == [] and out["text"] == "" and meta["completion_tokens"] == 0
    assert meta["finish_reason"] == {"type": "length", "matched": None}
    assert meta["first_token_latency"] is None and meta["output_token_logprobs"] == []
    ref = engine.generate(prompt, {"max_new_tokens": 1}, return_logprob=True, logprob_start_len=0)
    assert [t for _, t, _ in meta["input_token_logprobs"]] == ids
    assert [lp for lp, _, _ in meta["input_token_logprobs"][1:]] == pytest.approx(
        [lp for lp, _, _ in ref["meta_info"]["input_token_logprobs"][1:]], abs=1e-5)
    engine.flush_cache()
    engine.generate(input_ids=ids, sampling_params={"max_new_tokens": 0})
    follow = engine.generate(input_ids=ids + [100, 101], sampling_params=GREEDY)
    assert follow["meta_info"]["cached_tokens"] == len(ids)  # the pre-filled prompt is in the radix cache
    # mixed with sampling requests in one batch, and streamed
    mixed = engine.generate([prompt, prompt + " Go."], [{"max_new_tokens": 0}, GREEDY])
    assert mixed[0]["output_ids"] == [] and mixed[1]["meta_info"]["completion_tokens"] == 8
    chunks = list(engine.generate("Stream nothing", {"max_new_tokens": 0}, stream=True))
    assert len(chunks) == 1 and chunks[0]["output_ids"] == [] and chunks[0]["text"] == ""
    assert chunks[0]["meta_info"]["finish_reason"]["type"] == "length"


def test_async_generate(engine):
    async def main():
        one = await engine.async_generate("Async hello", GREEDY)
        many = await asyncio.gather(*(engine.async_generate(p, GREEDY) for p in user_prompts(3)))
        stream = await engine.async_generate("Async hello", GREEDY, stream=True)
        text = "".join([c["text"] async for c in stream])
        return one, many, text

    one, many, text = asyncio.run(main())
    assert text == one["text"] and len(many) == 3


def test_logprobs(engine):
    prompt = "The quick brown fox jumps"
    ids = engine.tokenizer.encode(prompt, add_special_tokens=True)
    out = engine.generate(prompt, GREEDY, return_logprob=True, logprob_start_len=0, top_logprobs_num=3)
    meta = out["meta_info"]
    assert len(meta["output_token_logprobs"]) == 8
    for (lp, tok, _), top in zip(meta["output_token_logprobs"], meta["output_top_logprobs"]):
        assert top[0][1] == tok and abs(top[0][0] - lp) < 1e-5 and len(top) == 3
    inputs = meta["input_token_logprobs"]
    assert [t for _, t, _ in inputs] == ids and inputs[0][0] is None
    full = _full_forward_logprobs(engine, ids)  # [len(ids), vocab]
    manual = [full[p - 1, ids[p]].item() for p in range(1, len(ids))]
    assert [lp for lp, _, _ in inputs[1:]] == pytest.approx(manual, abs=1e-4)
    # a cached prompt still gets its logprobs (the match stops at logprob_start_len)
    again = engine.generate(prompt, GREEDY, return_logprob=True, logprob_start_len=2)
    assert [lp for lp, _, _ in again["meta_info"]["input_token_logprobs"][1:]] == pytest.approx(manual[2:], abs=1e-4)
    assert again["meta_info"]["cached_tokens"] == 2  # only positions >= logprob_start_len are recomputed
    k = len(ids) - 2
    late = engine.generate(prompt, GREEDY, return_logprob=True, logprob_start_len=k)["meta_info"]
    assert late["cached_tokens"] == k and [lp for lp, _, _ in late["input_token_logprobs"]][1:] == pytest.approx(
        manual[k:], abs=1e-4)
    assert engine.generate(prompt, GREEDY, return_logprob=True,
                           logprob_start_len=0)["meta_info"]["cached_tokens"] == 0


def _full_forward_logprobs(engine, ids):
    from radixlm.runtime.model.forward_batch import ForwardBatch
    from radixlm.runtime.model.kv_pool import KVPool, ReqToTokenTable
    from radixlm.runtime.scheduler.batch import BatchSpec

    cfg = engine.model_config
    pool = KVPool(len(ids) + 1, cfg.num_layers, cfg.num_kv_heads, cfg.head_dim, engine.runner.kv_dtype, "cpu")
    table = ReqToTokenTable(1, len(ids), "cpu")
    spec = BatchSpec(False, [0], ids, [0], [len(ids)], list(range(1, len(ids) + 1)), list(range(len(ids))))
    logits = engine.runner.model.forward(ForwardBatch.from_spec(spec, table, "cpu"), pool)
    return torch.log_softmax(logits.float(), dim=-1)


def test_abort_running_request_frees_slots(engine):
    stream = engine.generate("Abort me", {"temperature": 0.0, "max_new_tokens": 200, "ignore_eos": True},
                             stream=True, rid="to-abort")
    first = next(stream)
    assert first["meta_info"]["finish_reason"] is None
    engine.abort("to-abort")
    last = list(stream)[-1]
    assert last["meta_info"]["finish_reason"]["type"] == "abort"
    assert last["meta_info"]["completion_tokens"] < 200


@pytest.mark.parametrize("kwargs, field", [
    ({"prompt": ""}, "prompt"),
    ({"prompt": "x" * 40000}, "prompt"),
    ({"prompt": "hi", "sampling_params": {"temprature": 0.5}}, "temprature"),
    ({"prompt": "hi", "sampling_params": {"temperature": -1.0}}, "temperature"),
    ({"prompt": "hi", "sampling_params": {"top_p": 0.0}}, "top_p"),
    ({"prompt": "hi", "sampling_params": {"max_new_tokens": 5000}}, "max_new_tokens"),
    ({"input_ids": [1, 10**9]}, "input_ids"),
    ({"prompt": "hi", "logprob_start_len": 99}, "logprob_start_len"),
    ({"prompt": "hi", "input_ids": [1]}, "prompt"),
])
def test_bad_input_names_the_field(engine, kwargs, field):
    with pytest.raises(ValueError, match=field):
        engine.generate(**kwargs)
    assert engine.generate("still serving", GREEDY)["meta_info"]["completion_tokens"] == 8


def test_queue_limit(engine):
    # issue 47: a call larger than the whole queue can never fit: bad input naming n, not QueueFullError
    with pytest.raises(ValueError, match="max_queued_requests"):
        engine.generate(["p"] * 65, GREEDY)


def test_step_failure_fails_requests_without_hanging(engine, monkeypatch):
    original = engine.runner.run
    calls = {"n": 0}

    def flaky(batch):
        calls["n"] += 1
        if calls["n"] == 2:
            raise RuntimeError("injected fault")
        return original(batch)

    monkeypatch.setattr(engine.runner, "run", flaky)
    with pytest.raises(RuntimeError, match="injected fault"):
        engine.generate(["one", "two"], GREEDY)
    monkeypatch.setattr(engine.runner, "run", original)
    assert engine.generate("recovered", GREEDY)["meta_info"]["completion_tokens"] == 8


def test_stats_fields(engine):
    stats = engine.get_stats()
    for key in ("cache_hit_rate", "cached_tokens", "prompt_tokens", "num_running_reqs", "num_queued_reqs",
                "kv_used_slots", "kv_total_slots", "kv_usage", "num_free_slots"):
        assert key in stats
    assert stats["kv_total_slots"] == 8191
