"""The router's fanned-out routes (issue 17) against fake replicas with known answers: ``/metrics``
merged (counters and histograms summed, additive gauges summed, ratio gauges per ``dp_rank``),
``/get_load`` per replica, ``/get_server_info`` with every rank's state, flush and abort sent to every
replica, and ``/tokenize`` sent to one. The same routes on two live replicas are in
``test_merged_routes.py``."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
from aiohttp import web
from prometheus_client.parser import text_string_to_metric_families
from radixlm.runtime import free_port
from radixlm.runtime.router.policy import RoutingConfig
from radixlm.runtime.router.router import (
    ROUTER_KEY,
    SUMMED_GAUGES,
    RouterConfig,
    create_router_app,
    merge_metrics,
)
from radixlm.runtime.server.metrics import ServerMetrics

P = "radixlm:"
FLAKY = web.AppKey("flaky", list)  # [True]: the replica's /flush_cache answers 400


def replica_metrics(rank: int) -> str:
    """Known figures: rank 0 served 3 requests, rank 1 one success and one error."""
    m = ServerMetrics("tiny")
    for latency in ((0.15, 0.4, 3.0) if rank == 0 else (0.4,)):
        m.record_request("success", prompt=10, cached=4, completion=5, latency_s=latency)
    if rank == 1:
        m.record_request("error")
    stats = {"num_running_reqs": rank + 1, "num_queued_reqs": 2 * rank, "kv_used_slots": 100 * (rank + 1),
             "kv_usage": 0.1 * (rank + 1), "cache_hit_rate": 0.5 + 0.25 * rank, "kv_total_slots": 1000}
    return m.render(stats)


def fake_replica(rank: int, seen: list[tuple[int, str, str, bytes]]) -> web.Application:
    """A replica answering the native routes with fixed bodies; ``seen`` logs (rank, method, path, body)."""
    async def handle(request: web.Request) -> web.Response:
        body = await request.read()
        seen.append((rank, request.method, request.path, body))
        path = request.path
        if path == "/metrics":
            return web.Response(text=replica_metrics(rank) if rank < 2 else "garbage{{ 1\n", content_type="text/plain")
        if path == "/get_load":
            return web.json_response([{"dp_rank": 0, "num_reqs": rank + 3, "num_waiting_reqs": rank, "num_tokens": 7}])
        if path == "/get_server_info":
            return web.json_response({"port": 9000 + rank, "dp_size": 1, "internal_states": [{"rank": rank}]})
        if path == "/abort_request":
            rid = json.loads(body).get("rid")
            if rid is None:
                return web.json_response({"error": {"message": "rid: required", "param": "rid"}}, status=400)
            mine = rid == f"on-{rank}"
            return web.json_response({"success": mine, "rid": rid, "aborted": int(mine)})
        if path == "/flush_cache":
            return web.json_response({"success": True}) if rank != 1 or not flaky[0] else \
                web.json_response({"error": {"message": "requests are still running"}}, status=400)
        return web.json_response({"rank": rank, "path": path, "body": body.decode()})

    flaky = [False]
    app = web.Application()
    app[FLAKY] = flaky
    app.router.add_route("*", "/{tail:.*}", handle)
    return app


@asynccontextmanager
async def cluster(n: int = 3) -> AsyncIterator[tuple[str, list[web.AppRunner], web.Application, list]]:
    """``n`` fake replicas behind a router (rank 2's ``/metrics`` is not Prometheus text)."""
    seen: list = []
    apps, runners, urls = [fake_replica(i, seen) for i in range(n)], [], []
    for app in apps:
        runner = web.AppRunner(app)
        await runner.setup()
        port = free_port()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        runners.append(runner)
        urls.append(f"http://127.0.0.1:{port}")
    config = RouterConfig(workers=urls, routing=RoutingConfig(policy="round_robin"), health_interval_s=3600)
    router_app = create_router_app(config)
    router = web.AppRunner(router_app)
    await router.setup()
    port = free_port()
    await web.TCPSite(router, "127.0.0.1", port).start()
    try:
        yield f"http://127.0.0.1:{port}", runners, router_app, seen
    finally:
        await router.cleanup()
        for runner in runners:
            await runner.cleanup()


async def fetch(url: str, method: str = "GET", body: Any = None) -> tuple[int, Any]:
    async with aiohttp.ClientSession() as s, s.request(method, url, json=body) as resp:
        text = await resp.text()
        return resp.status, json.loads(text) if "json" in resp.headers.get("Content-Type", "") else text


def run(test: Callable[..., Any], n: int = 3) -> None:
    async def main() -> None:
        async with cluster(n) as (url, runners, router, seen):
            await test(url, runners, router, seen)
    asyncio.run(asyncio.wait_for(main(), 60))


def samples(text: str) -> dict[tuple[str, tuple], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}


def one(found: dict, name: str, **labels: str) -> float:
    return found[(P + name, tuple(sorted({"model_name": "tiny", **labels}.items())))]


def test_metrics_sum_counters_histograms_and_additive_gauges():
    async def check(url, runners, router, seen):
        status, text = await fetch(url + "/metrics")
        assert status == 200
        got = samples(text)
        assert one(got, "requests_total", outcome="success") == 4 and one(got, "requests_total", outcome="error") == 1
        assert one(got, "prompt_tokens_total") == 40 and one(got, "cached_tokens_total") == 16
        assert one(got, "generation_tokens_total") == 20
        # e2e latencies 0.15, 0.4, 3.0 (rank 0) and 0.4 (rank 1): cumulative buckets add up
        assert one(got, "e2e_request_latency_seconds_bucket", le="0.1") == 0
        assert one(got, "e2e_request_latency_seconds_bucket", le="0.2") == 1
        assert one(got, "e2e_request_latency_seconds_bucket", le="0.5") == 3
        assert one(got, "e2e_request_latency_seconds_bucket", le="+Inf") == 4
        assert one(got, "e2e_request_latency_seconds_count") == 4
        assert abs(one(got, "e2e_request_latency_seconds_sum") - 3.95) < 1e-6
        assert one(got, "num_running_reqs") == 3 and one(got, "num_queue_reqs") == 2
        assert one(got, "num_used_tokens") == 300
        # ratios stay per replica, labelled by rank; the broken replica (rank 2) is in none of the sums
        assert one(got, "token_usage", dp_rank="0") == 0.1 and one(got, "token_usage", dp_rank="1") == 0.2
        assert one(got, "cache_hit_rate", dp_rank="1") == 0.75
        assert not any(("dp_rank", "2") in labels for name, labels in got if name != P + "router_replica_up")
        up = {dict(labels)["dp_rank"]: v for (name, labels), v in got.items() if name == P + "router_replica_up"}
        assert up == {"0": 1.0, "1": 1.0, "2": 0.0}
        assert "# TYPE radixlm:e2e_request_latency_seconds histogram" in text
        assert sorted(r for r, _, p, _ in seen if p == "/metrics") == [0, 1, 2]
        await runners[0].cleanup()  # rank 0 goes away: out of rotation, out of the sums
        await router[ROUTER_KEY].check_health()
        got = samples((await fetch(url + "/metrics"))[1])
        assert one(got, "requests_total", outcome="success") == 1 and one(got, "num_running_reqs") == 2
        up = {dict(labels)["dp_rank"]: v for (name, labels), v in got.items() if name == P + "router_replica_up"}
        assert up == {"0": 0.0, "1": 1.0, "2": 0.0}
        assert [e["dp_rank"] for e in (await fetch(url + "/get_load"))[1]] == [1, 2]
    run(check)


def test_merging_one_replica_reproduces_it():
    text = replica_metrics(0)
    merged = samples(merge_metrics({0: text}, {0: "http://a"}))
    own = samples(text)
    ratio = {fam.name for fam in text_string_to_metric_families(text)
             if fam.type == "gauge" and fam.name not in SUMMED_GAUGES}  # one replica's figures: kept per rank
    assert {P + "token_usage", P + "cache_hit_rate", P + "spec_accept_rate"} <= ratio
    for (name, labels), value in own.items():
        key = (name, tuple(sorted({**dict(labels), "dp_rank": "0"}.items()))) if name in ratio else (name, labels)
        assert merged[key] == value, name


def test_load_info_flush_abort_and_tokenize_reach_the_right_replicas():
    async def check(url, runners, router, seen):
        status, load = await fetch(url + "/get_load")
        assert status == 200 and [(e["dp_rank"], e["num_reqs"]) for e in load] == [(0, 3), (1, 4), (2, 5)]
        stats = (await fetch(url + "/router/stats"))[1]
        assert [e["replica"] for e in load] == [r["url"] for r in stats["replicas"]]
        status, info = await fetch(url + "/get_server_info")
        assert status == 200 and info["port"] == 9000 and info["dp_size"] == 3
        assert info["internal_states"] == [{"rank": 0}, {"rank": 1}, {"rank": 2}]
        assert (await fetch(url + "/server_info"))[1]["internal_states"] == info["internal_states"]
        assert (await fetch(url + "/flush_cache", "GET"))[0] == 405  # POST only: an <img> tag cannot flush
        status, out = await fetch(url + "/flush_cache", "POST", {})
        assert status == 200 and out["success"] is True and all(out["flushed"].values()), out
        runners[1].app[FLAKY][0] = True  # one replica refuses: the router says which, with a 400
        status, out = await fetch(url + "/flush_cache", "POST", {})
        assert status == 400 and out["success"] is False and sum(out["flushed"].values()) == 2, out
        status, out = await fetch(url + "/abort_request", "POST", {"rid": "on-1"})
        assert status == 200 and out["success"] is True and out["aborted"] == 1 and len(out["replicas"]) == 3
        status, out = await fetch(url + "/abort_request", "POST", {"rid": "nowhere"})
        assert status == 200 and out["success"] is False and out["aborted"] == 0
        status, out = await fetch(url + "/abort_request", "POST", {})
        assert status == 400 and out["error"]["param"] == "rid"  # the replicas' own error, relayed
        assert {r for r, _, p, _ in seen if p == "/abort_request"} == {0, 1, 2}
        before = len(seen)
        for path in ("/tokenize", "/detokenize", "/v1/tokenize", "/v1/detokenize"):
            status, out = await fetch(url + path, "POST", {"prompt": "hi"})
            assert status == 200 and out["path"] == path and json.loads(out["body"]) == {"prompt": "hi"}
        assert len(seen) == before + 4  # each went to one replica only
    run(check)
