"""The router's fanned-out routes (issue 17) in front of two live replicas (in-process servers on the
tiny model): the merged ``/metrics`` equals the sum of the replicas' own, ``/get_load`` and
``/get_server_info`` cover both, abort and flush reach the replica that has the work, and
``/tokenize`` / ``/detokenize`` answer as a replica does."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from prometheus_client.parser import text_string_to_metric_families
from radixlm.runtime import free_port
from radixlm.runtime.engine.engine import Engine
from radixlm.runtime.router.policy import RoutingConfig
from radixlm.runtime.router.router import REPLICA_HEADER, RouterConfig, create_router_app
from radixlm.runtime.server.app import BackgroundServer
from radixlm.runtime.server.transport.state import ServerConfig

P = "radixlm:"


@pytest.fixture(scope="module")
def replicas():
    engines = [Engine(max_total_tokens=4096, random_seed=0) for _ in range(2)]
    servers = [BackgroundServer(e, ServerConfig(port=0)).start() for e in engines]
    try:
        yield [s.url for s in servers]
    finally:
        for server, engine in zip(servers, engines):
            server.stop()
            engine.shutdown()


async def _call(session: aiohttp.ClientSession, url: str, method: str = "GET", body: Any = None) -> tuple[int, Any]:
    async with session.request(method, url, json=body) as resp:
        text = await resp.text()
        return resp.status, json.loads(text) if "json" in resp.headers.get("Content-Type", "") else text


def _totals(text: str) -> dict[str, float]:
    """Each sample name summed over its label sets (``le`` and ``dp_rank`` included)."""
    out: dict[str, float] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if "le" not in s.labels:
                out[s.name] = out.get(s.name, 0.0) + s.value
    return out


async def _with_router(urls: list[str], test) -> None:
    runner = web.AppRunner(create_router_app(RouterConfig(workers=urls, routing=RoutingConfig(policy="round_robin"))))
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120)) as session:
            await test(session, f"http://127.0.0.1:{port}")
    finally:
        await runner.cleanup()


def test_metrics_load_and_info_cover_every_replica(replicas):
    async def check(session: aiohttp.ClientSession, router: str) -> None:
        served = []
        for i in range(4):  # round-robin: two on each replica
            body = {"text": f"count {i}", "sampling_params": {"temperature": 0, "max_new_tokens": 3}}
            async with session.post(router + "/generate", json=body) as resp:
                assert resp.status == 200
                served.append(resp.headers[REPLICA_HEADER])
        assert sorted(served) == sorted(replicas * 2)
        own = [_totals((await _call(session, u + "/metrics"))[1]) for u in replicas]
        status, text = await _call(session, router + "/metrics")
        merged = _totals(text)
        assert status == 200
        for name in ("requests_total", "generation_tokens_total", "prompt_tokens_total",
                     "e2e_request_latency_seconds_count", "time_to_first_token_seconds_count"):
            assert merged[P + name] == own[0][P + name] + own[1][P + name] > 0, name
        assert merged[P + "generation_tokens_total"] >= 12
        assert merged[P + "router_replica_up"] == 2
        ranks = {s.labels["dp_rank"] for f in text_string_to_metric_families(text) if f.name == P + "token_usage"
                 for s in f.samples}
        assert ranks == {"0", "1"}
        status, load = await _call(session, router + "/get_load")
        assert status == 200 and [e["dp_rank"] for e in load] == [0, 1] and [e["replica"] for e in load] == replicas
        status, info = await _call(session, router + "/get_server_info")
        assert status == 200 and info["dp_size"] == 2 and len(info["internal_states"]) == 2
        assert "num_running_reqs" in info["internal_states"][1]
    asyncio.run(_with_router(replicas, check))


def test_abort_flush_and_tokenize_through_the_router(replicas):
    async def check(session: aiohttp.ClientSession, router: str) -> None:
        body = {"text": "long", "rid": "far-away", "stream": True,
                "sampling_params": {"max_new_tokens": 3000, "ignore_eos": True}}
        async with session.post(router + "/generate", json=body) as resp:
            await resp.content.readline()  # it is running on one of the replicas
            status, out = await _call(session, router + "/abort_request", "POST", {"rid": "far-away"})
            rest = [line async for line in resp.content]
        assert status == 200 and out["success"] is True and out["aborted"] == 1, out
        assert sorted(out["replicas"]) == sorted(replicas)
        assert b"data: [DONE]\n" in rest and b'"abort"' in b"".join(rest)
        status, out = await _call(session, router + "/abort_request", "POST", {"rid": "nobody"})
        assert status == 200 and out["success"] is False and "nobody" in out["message"]
        assert (await _call(session, router + "/flush_cache", "GET", None))[0] == 405  # POST only
        status, out = await _call(session, router + "/flush_cache", "POST", {})
        assert status == 200 and out["success"] and sorted(out["flushed"]) == sorted(replicas), out
        direct = (await _call(session, replicas[0] + "/tokenize", "POST", {"prompt": "hello router"}))[1]
        status, out = await _call(session, router + "/tokenize", "POST", {"prompt": "hello router"})
        assert status == 200 and out == direct
        status, out = await _call(session, router + "/v1/detokenize", "POST", {"tokens": direct["tokens"]})
        assert status == 200 and out["text"].endswith("hello router")
    asyncio.run(_with_router(replicas, check))
