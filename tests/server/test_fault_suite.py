"""The standing fault suite: a live ``radixlm serve`` (a subprocess on loopback) under hostile
bodies, disconnects, aborts, overload, SIGTERM under load and a replica killed behind the router.

After each scenario the server must be healthy: idle KV accounts balance (used slots == radix-cache
tokens, 0 after a flush), a normal request is answered, and its RSS stays within a bound.
``benchmarks/soak.py`` runs the long version (10,000 mixed requests).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import aiohttp
import pytest
from radixlm.runtime import free_port
from radixlm.runtime.router.launcher import stop_replicas, wait_ready

pytestmark = pytest.mark.timeout(300)

SYSTEM = "You are a helpful agent with tools: search, calendar, mail. " * 6
ROUTES = ("/generate", "/v1/completions", "/v1/chat/completions", "/abort_request")
HOSTILE_BODIES = [
    b"{not json",
    b"[1, 2, 3]",
    b"\xff\xfe\x00",
    b"[" * 10_000 + b"]" * 10_000,
    b'{"a": ' * 3000 + b"1" + b"}" * 3000,
    json.dumps({"text": 5, "prompt": 5, "messages": 5, "rid": 5}).encode(),
    json.dumps({"text": "x", "prompt": "x", "model": "default", "messages": [{"role": "user", "content": "x"}],
                "max_tokens": -1, "sampling_params": {"max_new_tokens": -1}, "rid": ""}).encode(),
    json.dumps({"text": "x", "prompt": "x", "model": "default", "messages": [{"role": "user", "content": "x"}],
                "n": 10**6, "sampling_params": {"n": 10**6}, "rid": ["a"]}).encode(),
]


def start_server(tmp: Path, *extra: str) -> tuple[subprocess.Popen, str]:
    port = free_port()
    log = open(tmp / f"server-{port}.log", "wb")  # noqa: SIM115 - closed with the process
    proc = subprocess.Popen([sys.executable, "-m", "radixlm", "serve", "--port", str(port),
                             "--max-total-tokens", "8192", *extra], cwd=tmp, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    wait_ready(url, proc, timeout_s=120)
    return proc, url


def call(url: str, path: str, body: dict | bytes | None = None, method: str = "POST") -> tuple[int, dict, dict]:
    """``(status, json body, headers)`` of one request."""
    data = body if isinstance(body, bytes) or body is None else json.dumps(body).encode()
    req = urllib.request.Request(url + path, data=data, method=method, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=120) as resp:
            return resp.status, json.load(resp), dict(resp.headers)
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}"), dict(e.headers)


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def assert_healthy(proc: subprocess.Popen, url: str, rss_limit_mib: float) -> None:
    """Idle KV accounts balance, a flush frees everything, a normal request works, RSS is bounded."""
    deadline = time.monotonic() + 30
    while True:
        _, info, _ = call(url, "/get_server_info", method="GET")
        s = info["stats"]
        idle = info["inflight_requests"] == 0 and s["num_running_reqs"] == 0 and s["num_queued_reqs"] == 0
        if idle or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert idle, f"server not idle: {info}"
    assert s["kv_used_slots"] == s["radix_cache_tokens"], f"KV slots leaked: {s}"
    assert call(url, "/flush_cache")[0] == 200
    assert call(url, "/get_server_info", method="GET")[1]["stats"]["kv_used_slots"] == 0
    status, out, _ = call(url, "/generate", {"text": "A normal request.", "sampling_params": {"max_new_tokens": 3}})
    assert status == 200 and out["meta_info"]["completion_tokens"] == 3
    assert rss_mib(proc.pid) < rss_limit_mib, f"RSS {rss_mib(proc.pid):.0f} MiB over {rss_limit_mib:.0f}"


@pytest.fixture(scope="module")
def server(tmp_path_factory, tiny_llama):
    proc, url = start_server(tmp_path_factory.mktemp("fault"), "--max-queued-requests", "8")
    call(url, "/generate", {"text": SYSTEM + "warm up", "sampling_params": {"max_new_tokens": 4}})
    baseline = rss_mib(proc.pid)
    yield proc, url, baseline * 1.10 + 64  # 10% growth, plus allocator slack for a small process
    stop_replicas([proc])


@pytest.mark.parametrize("route", ROUTES)
def test_hostile_bodies_get_openai_shaped_4xx(server, route):
    proc, url, limit = server
    for body in HOSTILE_BODIES:
        status, out, _ = call(url, route, body)
        assert 400 <= status < 500, (route, body[:40], status, out)
        err = out.get("error", {})
        assert {"message", "type", "param", "code"} <= set(err), (route, body[:40], out)
        assert "Traceback" not in err["message"] and "object is not" not in err["message"], err
    assert_healthy(proc, url, limit)


async def _disconnect_streams(url: str, n: int) -> None:
    body = {"text": SYSTEM + "Tell a long story.", "stream": True,
            "sampling_params": {"max_new_tokens": 200, "ignore_eos": True}}
    async with aiohttp.ClientSession() as session:
        async def one() -> None:
            async with session.post(url + "/generate", json=body) as resp:
                await resp.content.readline()
                resp.close()  # hang up mid-stream
        await asyncio.gather(*(one() for _ in range(n)))


def test_disconnects_mid_stream_free_their_kv(server):
    proc, url, limit = server
    asyncio.run(_disconnect_streams(url, 6))
    assert_healthy(proc, url, limit)


def test_aborts_end_requests_and_free_their_kv(server):
    proc, url, limit = server

    async def run() -> list[dict]:
        async with aiohttp.ClientSession() as session:
            async def one(i: int) -> dict:
                body = {"text": SYSTEM + f"job {i}", "rid": f"fault-abort-{i}",
                        "sampling_params": {"max_new_tokens": 300, "ignore_eos": True}}
                async with session.post(url + "/generate", json=body) as resp:
                    return await resp.json()

            tasks = [asyncio.ensure_future(one(i)) for i in range(4)]
            await asyncio.sleep(0.5)
            for i in range(4):
                async with session.post(url + "/abort_request", json={"rid": f"fault-abort-{i}"}) as resp:
                    assert resp.status == 200
            return await asyncio.gather(*tasks)

    results = asyncio.run(run())
    assert all(r["meta_info"]["finish_reason"]["type"] == "abort" for r in results), results
    assert_healthy(proc, url, limit)


def test_overload_gets_503_with_retry_after_and_recovers(server):
    proc, url, limit = server

    async def run() -> list[tuple[int, dict]]:
        async with aiohttp.ClientSession() as session:
            async def one(i: int) -> tuple[int, dict]:
                body = {"text": SYSTEM + f"burst {i}", "sampling_params": {"max_new_tokens": 24, "ignore_eos": True}}
                async with session.post(url + "/generate", json=body) as resp:
                    await resp.read()
                    return resp.status, dict(resp.headers)
            return await asyncio.gather(*(one(i) for i in range(48)))

    results = asyncio.run(run())
    statuses = [s for s, _ in results]
    assert set(statuses) <= {200, 503} and 503 in statuses and 200 in statuses, statuses
    assert all("Retry-After" in h for s, h in results if s == 503)
    assert_healthy(proc, url, limit)


def test_sigterm_under_load_drains_and_exits_cleanly(tmp_path, tiny_llama):
    proc, url = start_server(tmp_path, "--graceful-shutdown-s", "30")

    async def load() -> list[int]:
        async with aiohttp.ClientSession() as session:
            async def one(i: int) -> int:
                body = {"text": SYSTEM + f"work {i}", "sampling_params": {"max_new_tokens": 16}}
                async with session.post(url + "/generate", json=body) as resp:
                    await resp.read()
                    return resp.status
            tasks = [asyncio.ensure_future(one(i)) for i in range(8)]
            await asyncio.sleep(0.3)
            proc.send_signal(signal.SIGTERM)
            return await asyncio.gather(*tasks, return_exceptions=True)

    statuses = asyncio.run(load())
    assert proc.wait(timeout=60) == 0
    assert all(s == 200 for s in statuses), statuses  # in-flight requests were drained, not dropped


def test_a_killed_replica_leaves_the_router_serving(tmp_path, tiny_llama):
    port = free_port()
    log = open(tmp_path / "dp.log", "wb")  # noqa: SIM115 - closed with the process
    proc = subprocess.Popen([sys.executable, "-m", "radixlm", "serve", "--port", str(port), "--dp-size", "2",
                             "--max-total-tokens", "4096"], cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(url, proc, timeout_s=180)
        body = {"text": "Before the failure.", "sampling_params": {"max_new_tokens": 2}}
        assert call(url, "/generate", body)[0] == 200
        children = subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True, text=True).stdout.split()
        replicas = [int(c) for c in children
                    if "serve" in Path(f"/proc/{c}/cmdline").read_bytes().decode(errors="replace")]
        assert len(replicas) == 2, children
        os.kill(replicas[0], signal.SIGKILL)
        ok = sum(call(url, "/generate", {**body, "text": f"after {i}"})[0] == 200 for i in range(6))
        assert ok >= 5, f"{ok}/6 answered after one replica died"
    finally:
        stop_replicas([proc])


@pytest.mark.parametrize("route, body", [
    ("/generate", {"text": "x", "sampling_params": {"seed": 10**30, "max_new_tokens": 2}}),
    ("/v1/completions", {"model": "default", "prompt": "x", "seed": 10**30, "max_tokens": 2}),
    ("/v1/chat/completions", {"model": "default", "seed": 10**30, "max_tokens": 2,
                              "messages": [{"role": "user", "content": "x"}]}),
])
def test_one_bad_seed_fails_alone_beside_running_requests(server, route, body):
    """The 10**30 seed once failed every request in its batch with a 500."""
    proc, url, limit = server

    async def run() -> tuple[int, list[int]]:
        async with aiohttp.ClientSession() as session:
            async def normal(i: int) -> int:
                b = {"text": SYSTEM + f"neighbour {i}", "sampling_params": {"max_new_tokens": 12, "seed": i}}
                async with session.post(url + "/generate", json=b) as resp:
                    await resp.read()
                    return resp.status
            neighbours = [asyncio.ensure_future(normal(i)) for i in range(4)]
            await asyncio.sleep(0.2)
            async with session.post(url + route, json=body) as resp:
                bad = resp.status
                err = (await resp.json())["error"]
            assert err["param"] and "seed" in err["param"], err
            return bad, await asyncio.gather(*neighbours)

    bad, neighbours = asyncio.run(run())
    assert bad == 400 and neighbours == [200] * 4
    assert_healthy(proc, url, limit)
