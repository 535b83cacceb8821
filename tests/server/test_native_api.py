"""The SGLang-native HTTP API against a live server (tiny default checkpoint, raw aiohttp client)."""

from __future__ import annotations

import asyncio
import json
import re
import time

import aiohttp
from radixlm.runtime.server.app import BackgroundServer

GREEDY = {"temperature": 0.0, "max_new_tokens": 8}


async def _request(url: str, method: str = "GET", body: object = None) -> tuple[int, object]:
    async with aiohttp.ClientSession() as session:
        async with session.request(method, url, json=body) as resp:
            text = await resp.text()
            kind = resp.headers.get("Content-Type", "")
            return resp.status, json.loads(text) if "json" in kind else text


def call(srv: BackgroundServer, path: str, body: object = None, method: str | None = None):
    return asyncio.run(_request(srv.url + path, method or ("GET" if body is None else "POST"), body))


async def _sse(session: aiohttp.ClientSession, url: str, body: dict) -> list[object]:
    """Every ``data:`` payload of a stream, parsed; the final ``[DONE]`` kept as the string."""
    events = []
    async with session.post(url, json=body) as resp:
        assert resp.status == 200, await resp.text()
        assert resp.headers["Content-Type"].startswith("text/event-stream")
        async for line in resp.content:
            line = line.decode().strip()
            if line.startswith("data: "):
                payload = line[len("data: "):]
                events.append(payload if payload == "[DONE]" else json.loads(payload))
    return events


def stream(srv: BackgroundServer, path: str, body: dict) -> list[object]:
    async def run():
        async with aiohttp.ClientSession() as session:
            return await _sse(session, srv.url + path, body)
    return asyncio.run(run())


def test_generate_single_matches_engine(server):
    status, out = call(server, "/generate", {"text": "The lighthouse keeper", "sampling_params": GREEDY})
    assert status == 200
    ref = server.engine.generate("The lighthouse keeper", dict(GREEDY))
    assert out["text"] == ref["text"] and out["output_ids"] == ref["output_ids"]
    meta = out["meta_info"]
    assert meta["completion_tokens"] == 8 and meta["prompt_tokens"] == ref["meta_info"]["prompt_tokens"]
    assert meta["finish_reason"] == {"type": "length", "matched": None}


def test_generate_batch_text_and_input_ids(server):
    prompts = ["On the first morning", "The lamp was cold"]
    status, out = call(server, "/generate", {"text": prompts, "sampling_params": GREEDY})
    assert status == 200 and isinstance(out, list) and len(out) == 2
    for prompt, item in zip(prompts, out):
        assert item["text"] == call(server, "/generate", {"text": prompt, "sampling_params": GREEDY})[1]["text"]
    ids = [server.engine.tokenizer.encode(p, add_special_tokens=True) for p in prompts]
    status, by_ids = call(server, "/generate", {"input_ids": ids, "sampling_params": GREEDY})
    assert status == 200 and [o["output_ids"] for o in by_ids] == [o["output_ids"] for o in out]
    status, one = call(server, "/generate", {"input_ids": ids[0], "sampling_params": GREEDY, "rid": "my-rid"})
    assert status == 200 and one["meta_info"]["id"] == "my-rid"


def test_generate_streaming_deltas_concatenate(server):
    body = {"text": "He opened the", "sampling_params": {"temperature": 0.0, "max_new_tokens": 12}}
    full = call(server, "/generate", body)[1]
    events = stream(server, "/generate", {**body, "stream": True})
    assert events[-1] == "[DONE]"
    chunks = events[:-1]
    # cumulative, as SGLang streams (deltas: tests/server/test_lenient_protocol.py)
    assert chunks[-1]["text"] == full["text"] and chunks[-1]["output_ids"] == full["output_ids"]
    assert all(b["text"].startswith(a["text"]) for a, b in zip(chunks, chunks[1:]))
    assert all(c["meta_info"]["finish_reason"] is None for c in chunks[:-1])
    assert chunks[-1]["meta_info"]["finish_reason"] == full["meta_info"]["finish_reason"]


def test_generate_batch_streaming_carries_index(server):
    body = {"text": ["a gull", "the wind"], "stream": True, "sampling_params": GREEDY}
    chunks = stream(server, "/generate", body)[:-1]
    assert {c["index"] for c in chunks} == {0, 1}
    for i, prompt in enumerate(["a gull", "the wind"]):
        want = call(server, "/generate", {"text": prompt, "sampling_params": GREEDY})[1]["text"]
        assert [c["text"] for c in chunks if c["index"] == i][-1] == want  # cumulative text


def test_generate_logprobs_with_text(server):
    body = {"text": "The brass was dull", "sampling_params": {"temperature": 0.0, "max_new_tokens": 4},
            "return_logprob": True, "logprob_start_len": 0, "top_logprobs_num": 3,
            "return_text_in_logprobs": True}
    status, out = call(server, "/generate", body)
    assert status == 200
    meta, tok = out["meta_info"], server.engine.tokenizer
    out_lps = meta["output_token_logprobs"]
    assert [e[1] for e in out_lps] == out["output_ids"]
    for lp, tid, text in out_lps:
        assert lp <= 0.0 and text == tok.decode([tid], skip_special_tokens=False)
    assert all(len(top) == 3 for top in meta["output_top_logprobs"])
    # greedy: the chosen token is the most likely one
    assert all(top[0][1] == e[1] for top, e in zip(meta["output_top_logprobs"], out_lps))
    assert len(meta["input_token_logprobs"]) == meta["prompt_tokens"]
    assert meta["input_token_logprobs"][0][0] is None


def test_info_health_and_cache_routes(server):
    assert call(server, "/health") == (200, {"status": "ok"})
    status, health = call(server, "/health_generate")
    assert status == 200 and health["status"] == "ok"
    status, info = call(server, "/get_model_info")
    assert status == 200 and info["is_generation"] is True
    assert info["model_path"] == server.engine.model_path
    assert info["context_length"] == server.engine.model_config.context_len
    status, sinfo = call(server, "/get_server_info")
    assert status == 200 and sinfo["version"] and sinfo["server_args"]["schedule_policy"] == "lpm"
    assert {"kv_used_slots", "num_running_reqs", "num_queued_reqs"} <= set(sinfo["stats"])
    assert sinfo["http"]["port"] == server.port
    assert call(server, "/flush_cache", {})[0] == 200


def test_abort_request_stops_a_running_stream(server):
    body = {"text": "Count the steps", "stream": True, "rid": "abort-me",
            "sampling_params": {"max_new_tokens": 3000, "ignore_eos": True}}

    async def run():
        async with aiohttp.ClientSession() as session:
            task = asyncio.ensure_future(_sse(session, server.url + "/generate", body))
            await asyncio.sleep(0.3)
            async with session.post(server.url + "/abort_request", json={"rid": "abort-me"}) as resp:
                assert resp.status == 200
            return await asyncio.wait_for(task, 30)

    events = asyncio.run(run())
    last = events[-2]
    assert events[-1] == "[DONE]" and last["meta_info"]["finish_reason"]["type"] == "abort"
    assert last["meta_info"]["completion_tokens"] < 3000


def _samples(text: str) -> dict[str, float]:
    """Metric samples by name and labels, the model_name label (on every sample) dropped."""
    values = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            assert 'model_name="' in name, name
            name = re.sub(r'model_name="[^"]*"', "", name).replace("{,", "{").replace(",}", "}").replace("{}", "")
            values[name] = float(value)
    return values


def test_metrics_prometheus_text(server):
    stream(server, "/generate", {"text": "metrics please", "stream": True, "sampling_params": GREEDY})
    status, text = call(server, "/metrics")
    assert status == 200
    values = _samples(text)
    assert values['radixlm:requests_total{outcome="success"}'] >= 1
    for name in ("prompt_tokens_total", "generation_tokens_total", "cached_tokens_total", "cache_hit_rate",
                 "num_running_reqs", "num_queue_reqs", "num_used_tokens", "token_usage", "gen_throughput"):
        assert f"radixlm:{name}" in values, name
    for name in ("time_to_first_token", "inter_token_latency", "time_per_output_token"):
        assert values[f"radixlm:{name}_seconds_count"] >= 1, name
    assert values['radixlm:time_to_first_token_seconds_bucket{le="+Inf"}'] == \
        values["radixlm:time_to_first_token_seconds_count"]


def _wait_idle(srv: BackgroundServer, timeout: float = 20.0) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        stats = call(srv, "/get_server_info")[1]["stats"]
        if stats["num_running_reqs"] == 0 and stats["num_queued_reqs"] == 0:
            return stats
        assert time.monotonic() < deadline, stats
        time.sleep(0.05)


def test_disconnect_mid_stream_frees_kv(server):
    body = {"text": "A long, long story", "stream": True,
            "sampling_params": {"max_new_tokens": 3000, "ignore_eos": True}}

    async def run():
        async with aiohttp.ClientSession() as session:
            resp = await session.post(server.url + "/generate", json=body)
            seen = 0
            async for line in resp.content:
                seen += line.startswith(b"data: ")
                if seen >= 3:
                    break
            resp.close()  # drop the connection mid-stream

    asyncio.run(run())
    _wait_idle(server)
    assert call(server, "/flush_cache", {})[0] == 200
    stats = call(server, "/get_server_info")[1]["stats"]
    assert stats["kv_used_slots"] == 0
    server.engine.check_no_leak()


def test_64_concurrent_streaming_clients(server):
    async def run():
        async with aiohttp.ClientSession() as session:
            bodies = [{"text": f"Client {i} says", "stream": True,
                       "sampling_params": {"max_new_tokens": 6, "ignore_eos": True}} for i in range(64)]
            return await asyncio.gather(*[_sse(session, server.url + "/generate", b) for b in bodies])

    results = asyncio.run(run())
    for events in results:
        assert events[-1] == "[DONE]"
        assert events[-2]["meta_info"]["completion_tokens"] == 6
    _wait_idle(server)


def test_non_streamed_requests_record_time_to_first_token(server):
    def ttft_count() -> float:
        _, text = call(server, "/metrics")
        return _samples(text)["radixlm:time_to_first_token_seconds_count"]

    before = ttft_count()
    status, out = call(server, "/generate", {"text": ["ttft one", "ttft two"], "sampling_params": GREEDY})
    assert status == 200 and all(o["meta_info"]["first_token_latency"] > 0 for o in out)
    assert ttft_count() == before + 2
