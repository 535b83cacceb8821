"""The data-parallel router in front of two real replicas (subprocesses on 127.0.0.1).

Each replica's KV pool (1,100 slots) holds one ~700-token prompt family at a time, so where requests go decides the
hit rate: cache-aware routing keeps each family on one replica (hits > 90%); round-robin makes the
families evict each other (about half that). Then one replica is killed mid-run: its in-flight
requests fail cleanly with an error, and the router keeps serving on the other.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import subprocess
import sys
import threading

import aiohttp
import pytest
from aiohttp import web
from radixlm.runtime import free_port
from radixlm.runtime.router.launcher import wait_ready
from radixlm.runtime.router.policy import RoutingConfig
from radixlm.runtime.router.router import REPLICA_HEADER, RouterConfig, create_router_app

SYSTEM = {
    0: "You are the billing assistant of a telescope shop. Refund rules: " + "policy clause {} applies. " * 63,
    1: "You are a travel planner for alpine hiking trips. Safety notes: " + "checklist item {} matters. " * 85,
}


def _wait_healthy(url: str, proc: subprocess.Popen, timeout: float = 120.0) -> None:
    try:
        wait_ready(url, proc, timeout)
    except RuntimeError:
        raise RuntimeError(f"replica exited: {proc.stderr.read().decode()[-2000:]}") from None


def _start_replica(port: int, model_path: str) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "radixlm", "serve", "--port", str(port), "--model-path", model_path,
           "--max-total-tokens", "1100", "--no-log-requests"]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)


class _RouterThread:
    """Runs the router app on its own event loop in a daemon thread."""

    def __init__(self, config: RouterConfig) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._ready = threading.Event()
        self._loop = asyncio.new_event_loop()
        self._runner: web.AppRunner | None = None
        self._thread = threading.Thread(target=self._run, args=(config,), daemon=True)
        self._thread.start()
        assert self._ready.wait(30), "router did not start"

    def _run(self, config: RouterConfig) -> None:
        asyncio.set_event_loop(self._loop)
        self._runner = web.AppRunner(create_router_app(config))
        self._loop.run_until_complete(self._runner.setup())
        self._loop.run_until_complete(web.TCPSite(self._runner, "127.0.0.1", self.port).start())
        self._ready.set()
        self._loop.run_forever()

    def close(self) -> None:
        fut = asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop)
        fut.result(30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(30)


@pytest.fixture(scope="module")
def replicas(tiny_llama):
    ports = [free_port(), free_port()]
    procs = [_start_replica(p, tiny_llama) for p in ports]
    urls = [f"http://127.0.0.1:{p}" for p in ports]
    try:
        for url, proc in zip(urls, procs):
            _wait_healthy(url, proc)
        yield urls, procs
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()


async def _generate(session: aiohttp.ClientSession, url: str, text: str) -> tuple[int, dict, str]:
    body = {"text": text, "sampling_params": {"temperature": 0, "max_new_tokens": 2}}
    async with session.post(url + "/generate", json=body) as resp:
        return resp.status, await resp.json(content_type=None), resp.headers.get(REPLICA_HEADER, "")


async def _hit_rates(router_url: str, order: list[int]) -> dict[tuple[str, int], float]:
    """Send the requests one at a time; per (replica, family): cached / prompt tokens."""
    cached: dict[tuple[str, int], int] = {}
    prompt: dict[tuple[str, int], int] = {}
    async with aiohttp.ClientSession() as session:
        async with session.post(router_url + "/flush_cache") as resp:
            assert resp.status == 200, await resp.text()
        for i, fam in enumerate(order):
            status, out, replica = await _generate(session, router_url, SYSTEM[fam] + f"\nUser {i}: hello?")
            assert status == 200, out
            key = (replica, fam)
            cached[key] = cached.get(key, 0) + out["meta_info"]["cached_tokens"]
            prompt[key] = prompt.get(key, 0) + out["meta_info"]["prompt_tokens"]
    return {k: cached[k] / prompt[k] for k in prompt}


def test_cache_aware_routing_splits_families_and_beats_round_robin(replicas):
    urls, _ = replicas
    rng = random.Random(0)
    order = [0, 1] + [rng.randrange(2) for _ in range(22)]
    rates = {}
    for policy in ("cache_aware", "round_robin"):
        router = _RouterThread(RouterConfig(workers=urls, routing=RoutingConfig(policy=policy)))
        try:
            rates[policy] = asyncio.run(_hit_rates(router.url, order))
        finally:
            router.close()
    aware, rr = rates["cache_aware"], rates["round_robin"]
    # cache-aware: each family lives on exactly one replica, and the two families on different ones
    assert len(aware) == 2 and len({replica for replica, _ in aware}) == 2, aware
    # the first request of each family is a miss; nearly everything after it hits
    n = {fam: order.count(fam) for fam in (0, 1)}
    for (_, fam), rate in aware.items():
        assert rate > 0.9 * (n[fam] - 1) / n[fam], aware
    overall_rr = sum(rr.values()) / len(rr)
    overall_aware = sum(aware.values()) / len(aware)
    assert overall_rr < 0.7 * overall_aware, (rates, "round-robin should lose about half the hits")


def test_killed_replica_leaves_rotation_and_router_keeps_serving(replicas):
    urls, procs = replicas
    config = RouterConfig(workers=urls, health_interval_s=0.5, routing=RoutingConfig(policy="round_robin"))
    router = _RouterThread(config)

    async def run() -> tuple[list[int], list[int]]:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120)) as session:
            first = [_generate(session, router.url, f"question {i}: " + "why? " * 50) for i in range(8)]
            tasks = [asyncio.ensure_future(c) for c in first]
            await asyncio.sleep(0.05)
            procs[1].kill()  # replica 1 dies while requests are in flight
            during = [r[0] for r in await asyncio.gather(*tasks)]
            await asyncio.sleep(1.5)  # a health probe takes it out of rotation
            after = await asyncio.gather(*[_generate(session, router.url, f"again {i}") for i in range(6)])
            assert all(replica == urls[0] for _, _, replica in after)
            return during, [r[0] for r in after]

    try:
        during, after = asyncio.run(asyncio.wait_for(run(), 180))
    finally:
        router.close()
    assert set(during) <= {200, 502, 503}, during  # failed cleanly, none hung
    assert after == [200] * 6


def test_serve_dp_size_runs_replicas_behind_the_router_and_stops_cleanly(tiny_llama):
    import json
    import urllib.request

    port = free_port()
    cmd = [sys.executable, "-m", "radixlm", "serve", "--dp-size", "2", "--port", str(port),
           "--model-path", tiny_llama, "--max-total-tokens", "2048", "--no-log-requests"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            env=dict(os.environ, OMP_NUM_THREADS="1"))
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_healthy(url, proc, timeout=180)
        body = json.dumps({"text": "Hello", "sampling_params": {"temperature": 0, "max_new_tokens": 3}})
        for _ in range(2):
            req = urllib.request.Request(url + "/generate", data=body.encode(),
                                         headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(req, timeout=60) as resp:
                assert json.load(resp)["meta_info"]["completion_tokens"] == 3
        with urllib.request.urlopen(url + "/router/stats", timeout=10) as resp:
            stats = json.load(resp)
        assert len(stats["replicas"]) == 2 and all(r["healthy"] for r in stats["replicas"])
        assert sum(r["routed"] for r in stats["replicas"]) >= 2
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise
    assert code == 0, proc.stderr.read().decode()[-2000:]
    replica_ports = [r["url"] for r in stats["replicas"]]
    for replica in replica_ports:  # the replicas went down with the router
        with pytest.raises(OSError):
            urllib.request.urlopen(replica + "/health", timeout=2)
