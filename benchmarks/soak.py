"""Soak test: many mixed requests against one ``radixlm serve`` on loopback, with aborts and disconnects.

Starts a server (a subprocess on 127.0.0.1, the tiny model by default), sends ``--requests``
requests from ``--concurrency`` clients: native ``/generate`` and OpenAI chat / completions,
streamed and not, a share (``--abort-fraction``) aborted through ``/abort_request`` or by closing
the connection mid-stream, and a few hostile bodies that must get a 4xx. Bounded in count and
time (``--max-seconds``); only loopback traffic. Afterwards, with the server idle: the KV leak
check (used slots == radix-cache tokens; 0 after a flush), one normal request, and the server's
RSS before and after. Prints one table and writes ``results/soak.json``.

    python benchmarks/soak.py [--requests 10000] [--concurrency 32] [--abort-fraction 0.1]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
from radixlm.runtime import free_port
from radixlm.runtime.router.launcher import stop_replicas, wait_ready

SYSTEM = ("You are the planning agent of a logistics company. Tools: route(origin, dest), "
          "weather(city), book(truck, date). Rules: " + " ".join(f"rule {i}: confirm twice." for i in range(40)))
JSON = "application/json"
HOSTILE = [  # (route, raw body, content type): each must get a 4xx, never a 5xx or a stall
    ("/generate", b"{not json", JSON),
    ("/generate", b"[" * 5000 + b"]" * 5000, JSON),
    ("/generate", json.dumps({"text": "x", "sampling_params": {"seed": 10**30}}).encode(), JSON),
    ("/generate", json.dumps({"text": "x", "sampling_params": {"temperature": 1e308}}).encode(), JSON),
    ("/v1/chat/completions", json.dumps({"model": "default", "messages": "hi"}).encode(), JSON),
    ("/v1/completions", json.dumps({"model": "default", "prompt": "x", "n": 100000}).encode(), JSON),
    # what the reliability report lists (docs/reliability.md)
    ("/generate", json.dumps({"text": "a", "sampling_params": {"stop_regex": "(a)\\1"}}).encode(), JSON),
    ("/generate", json.dumps({"text": "a", "sampling_params": {"stop_regex": ["x"] * 1000}}).encode(), JSON),
    ("/v1/completions", json.dumps({"model": "default", "prompt": ["x"] * 5000}).encode(), JSON),
    ("/generate", json.dumps({"text": "x", "sampling_params": {"logit_bias": {"1": 1e308}}}).encode(), JSON),
    ("/generate", json.dumps({"text": "\ud800", "sampling_params": {"max_new_tokens": 1}}).encode(), JSON),
    ("/generate", json.dumps({"text": "x", "sampling_params": {"json_schema": False}}).encode(), JSON),
    ("/abort_request", json.dumps({"abort_all": True}).encode(), "text/plain"),
]


def rss_kb(pid: int) -> int:
    """Resident set size of ``pid`` in KiB (Linux)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


class Soak:
    """One soak run against ``url``; ``outcomes`` counts what each request got."""

    def __init__(self, url: str, args: argparse.Namespace) -> None:
        self.url, self.args = url, args
        self.rng = random.Random(args.seed)
        self.outcomes: collections.Counter = collections.Counter()
        self.latencies: list[float] = []

    async def run(self) -> None:
        timeout = aiohttp.ClientTimeout(total=self.args.request_timeout)
        deadline = time.monotonic() + self.args.max_seconds
        queue: asyncio.Queue = asyncio.Queue()
        for i in range(self.args.requests):
            queue.put_nowait(i)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            await asyncio.gather(*(self._client(session, queue, deadline) for _ in range(self.args.concurrency)))

    async def _client(self, session: aiohttp.ClientSession, queue: asyncio.Queue, deadline: float) -> None:
        while not queue.empty() and time.monotonic() < deadline:
            i = queue.get_nowait()
            start = time.perf_counter()
            try:
                outcome = await self._one(session, i)
            except asyncio.TimeoutError:
                outcome = "hung"
            except aiohttp.ClientError as e:
                outcome = f"client error: {type(e).__name__}"
            self.outcomes[outcome] += 1
            if outcome == "ok":
                self.latencies.append(time.perf_counter() - start)

    async def _one(self, session: aiohttp.ClientSession, i: int) -> str:
        roll = self.rng.random()
        if roll < self.args.abort_fraction / 2:
            return await self._disconnect_mid_stream(session, i)
        if roll < self.args.abort_fraction:
            return await self._abort_by_rid(session, i)
        if roll < self.args.abort_fraction + 0.01:
            route, body, ctype = HOSTILE[i % len(HOSTILE)]
            async with session.post(self.url + route, data=body, headers={"Content-Type": ctype}) as r:
                await r.read()
                return "hostile 4xx" if 400 <= r.status < 500 else f"hostile got {r.status}"
        route, body = self._normal(i)
        async with session.post(self.url + route, json=body) as r:
            await r.read()
            return "ok" if r.status == 200 else f"http {r.status}"

    def _normal(self, i: int) -> tuple[str, dict]:
        user = f"Shipment {i}: plan a route from depot {i % 17} to city {i % 23}."
        tokens = self.rng.randint(4, 16)
        kind = i % 4
        if kind == 0:
            return "/generate", {"text": SYSTEM + user, "sampling_params": {"max_new_tokens": tokens}}
        if kind == 1:
            return "/generate", {"text": SYSTEM + user, "stream": True, "sampling_params": {"max_new_tokens": tokens}}
        if kind == 2:
            return "/v1/completions", {"model": "default", "prompt": SYSTEM + user, "max_tokens": tokens}
        return "/v1/chat/completions", {"model": "default", "max_tokens": tokens, "stream": i % 8 == 3,
                                        "messages": [{"role": "system", "content": SYSTEM},
                                                     {"role": "user", "content": user}]}

    async def _disconnect_mid_stream(self, session: aiohttp.ClientSession, i: int) -> str:
        body = {"text": SYSTEM + f"Long plan {i}.", "stream": True,
                "sampling_params": {"max_new_tokens": 64, "ignore_eos": True}}
        async with session.post(self.url + "/generate", json=body) as r:
            await r.content.readline()  # the first event, then hang up
            r.close()
        return "disconnected"

    async def _abort_by_rid(self, session: aiohttp.ClientSession, i: int) -> str:
        rid = f"soak-abort-{i}"
        body = {"text": SYSTEM + f"Plan {i}.", "rid": rid,
                "sampling_params": {"max_new_tokens": 64, "ignore_eos": True}}
        pending = asyncio.ensure_future(session.post(self.url + "/generate", json=body))
        await asyncio.sleep(self.rng.uniform(0.0, 0.2))
        async with session.post(self.url + "/abort_request", json={"rid": rid}) as r:
            await r.read()
        async with await pending as r:
            await r.read()
            return "aborted" if r.status == 200 else f"abort got {r.status}"


def stats(url: str) -> dict:
    """The server's engine stats (``/get_server_info``)."""
    import urllib.request

    with urllib.request.urlopen(url + "/get_server_info", timeout=30) as resp:
        return json.load(resp)


def settle_and_check(url: str, timeout_s: float = 60.0) -> dict:
    """Wait for the server to go idle, then check KV accounts and one normal request."""
    import urllib.request

    deadline = time.monotonic() + timeout_s
    while True:
        info = stats(url)
        s = info["stats"]
        if (info["inflight_requests"] == 0 and s["num_running_reqs"] == 0 and s["num_queued_reqs"] == 0) \
                or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    idle_leak = s["kv_used_slots"] - s["radix_cache_tokens"]
    req = urllib.request.Request(url + "/flush_cache", data=b"", method="POST")
    urllib.request.urlopen(req, timeout=30).read()
    after_flush = stats(url)["stats"]["kv_used_slots"]
    body = json.dumps({"text": "A normal request after the soak.", "sampling_params": {"max_new_tokens": 4}})
    req = urllib.request.Request(url + "/generate", data=body.encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as resp:
        normal_ok = resp.status == 200
    return {"leaked_slots_idle": idle_leak, "used_slots_after_flush": after_flush, "normal_request_ok": normal_ok}


def start_server(args: argparse.Namespace) -> tuple[subprocess.Popen, str]:
    port = free_port()
    argv = [sys.executable, "-m", "radixlm", "serve", "--host", "127.0.0.1", "--port", str(port),
            "--max-total-tokens", str(args.max_total_tokens), "--max-queued-requests", "256"]
    if args.model_path:
        argv += ["--model-path", args.model_path]
    # run from an empty folder: a clone named radixlm/ in the cwd must not shadow the package
    workdir = tempfile.mkdtemp(prefix="radixlm-soak-")
    log = open(os.path.join(workdir, "server.log"), "wb")  # noqa: SIM115 - lives as long as the server
    print(f"server log: {log.name}", file=sys.stderr)
    proc = subprocess.Popen(argv, cwd=workdir, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    wait_ready(url, proc, timeout_s=300)
    return proc, url


def table(result: dict) -> str:
    lines = ["| metric | value |", "|---|---|"]
    for key, value in result.items():
        lines.append(f"| {key} | {value} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--requests", type=int, default=10_000)
    p.add_argument("--concurrency", type=int, default=32)
    p.add_argument("--abort-fraction", type=float, default=0.1)
    p.add_argument("--max-seconds", type=float, default=3600.0, help="stop sending after this long")
    p.add_argument("--request-timeout", type=float, default=120.0, help="a request slower than this is hung")
    p.add_argument("--max-total-tokens", type=int, default=32768)
    p.add_argument("--model-path", default=None)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="results/soak.json")
    args = p.parse_args(argv)
    proc, url = start_server(args)
    try:
        asyncio.run(Soak(url, argparse.Namespace(**{**vars(args), "requests": 64, "abort_fraction": 0.0})).run())
        rss_before = rss_kb(proc.pid)  # after a warm-up: the baseline is a server that has served
        soak = Soak(url, args)
        start = time.perf_counter()
        asyncio.run(soak.run())
        elapsed = time.perf_counter() - start
        checks = settle_and_check(url)
        rss_after = rss_kb(proc.pid)
    finally:
        stop_replicas([proc])
    lat = sorted(soak.latencies)
    result = {
        "requests sent": sum(soak.outcomes.values()),
        "completed (200)": soak.outcomes["ok"],
        "outcomes": dict(sorted(soak.outcomes.items())),
        "hung": soak.outcomes["hung"],
        "5xx": sum(n for k, n in soak.outcomes.items() if k.startswith(("http 5", "hostile got 5", "abort got 5"))),
        "p50 latency s": round(statistics.median(lat), 3) if lat else None,
        "p99 latency s": round(lat[int(0.99 * (len(lat) - 1))], 3) if lat else None,
        "elapsed s": round(elapsed, 1),
        "RSS before MiB": round(rss_before / 1024, 1),
        "RSS after MiB": round(rss_after / 1024, 1),
        "RSS growth %": round(100 * (rss_after - rss_before) / max(rss_before, 1), 1),
        **checks,
        "server exit code": proc.returncode,
    }
    print(table(result))
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
