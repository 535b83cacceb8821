"""Cache-aware routing vs round-robin over two replicas: the agent workload with two prompt families.

Starts two ``radixlm serve`` replicas (subprocesses on 127.0.0.1) and, for each policy in turn
(alternating, several repetitions), a router in front of them; sends the same requests (two long
system prompts, distinct user turns, concurrent clients) and reports throughput and the prefix
cache hit rate (cached / prompt tokens, from each response's meta_info). The replicas' KV pools are
sized (``--max-total-tokens``) so that one replica can hold about one family's prefix at a time,
as on a loaded server, which is where routing matters.

    python benchmarks/bench_router.py [--size tiny] [--requests 64] [--clients 8] [--reps 2]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import subprocess
import sys
import threading
import time

import aiohttp
from aiohttp import web
from radixlm.runtime import free_port
from radixlm.runtime.router.launcher import stop_replicas, wait_ready
from radixlm.runtime.router.policy import RoutingConfig
from radixlm.runtime.router.router import RouterConfig, create_router_app
from radixlm.runtime.testing import checkpoint_path

FAMILIES = [
    "You are the support agent of a telescope shop. Tools: refund(order_id), track(order_id), "
    "escalate(reason). Policy: " + " ".join(f"rule {i}: refunds within {i + 10} days need a receipt." for i in range(60)),
    "You are a travel planner for alpine hiking trips. Tools: weather(place), huts(region), "
    "book(hut, date). Safety: " + " ".join(f"note {i}: check the forecast {i + 2} hours before leaving." for i in range(60)),
]


def start_replica(model_path: str, max_total_tokens: int) -> tuple[subprocess.Popen, str]:
    port = free_port()
    cmd = [sys.executable, "-m", "radixlm", "serve", "--port", str(port), "--model-path", model_path,
           "--max-total-tokens", str(max_total_tokens), "--no-log-requests"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env=dict(os.environ, OMP_NUM_THREADS="1"))
    url = f"http://127.0.0.1:{port}"
    wait_ready(url, proc, 300)
    return proc, url


class RouterThread:
    """The router app on its own event loop in a daemon thread."""

    def __init__(self, config: RouterConfig) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.loop = asyncio.new_event_loop()
        self.runner = web.AppRunner(create_router_app(config))
        ready = threading.Event()

        def run() -> None:
            asyncio.set_event_loop(self.loop)
            self.loop.run_until_complete(self.runner.setup())
            self.loop.run_until_complete(web.TCPSite(self.runner, "127.0.0.1", self.port).start())
            ready.set()
            self.loop.run_forever()

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()
        ready.wait(30)

    def close(self) -> None:
        asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result(30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(30)


async def run_workload(url: str, prompts: list[str], clients: int, max_new_tokens: int) -> dict:
    queue: asyncio.Queue[str] = asyncio.Queue()
    for p in prompts:
        queue.put_nowait(p)
    cached = prompt_tokens = completion = 0

    async def client(session: aiohttp.ClientSession) -> None:
        nonlocal cached, prompt_tokens, completion
        while not queue.empty():
            text = queue.get_nowait()
            body = {"text": text, "sampling_params": {"temperature": 0, "max_new_tokens": max_new_tokens}}
            async with session.post(url + "/generate", json=body) as resp:
                out = await resp.json()
                assert resp.status == 200, out
            cached += out["meta_info"]["cached_tokens"]
            prompt_tokens += out["meta_info"]["prompt_tokens"]
            completion += out["meta_info"]["completion_tokens"]

    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=3600)) as session:
        async with session.post(url + "/flush_cache") as resp:
            assert resp.status == 200, await resp.text()
        start = time.perf_counter()
        await asyncio.gather(*(client(session) for _ in range(clients)))
        elapsed = time.perf_counter() - start
    return {"seconds": elapsed, "tok_per_s": completion / elapsed, "hit_rate": cached / prompt_tokens}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", default="tiny", choices=["tiny", "small"])
    ap.add_argument("--model-path", default=None)
    ap.add_argument("--requests", type=int, default=64)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=16)
    ap.add_argument("--max-total-tokens", type=int, default=1500,
                    help="KV slots per replica (default fits about one family's prefix plus the running batch)")
    ap.add_argument("--reps", type=int, default=2)
    args = ap.parse_args(argv)
    model = args.model_path or checkpoint_path("llama", args.size)
    rng = random.Random(0)
    prompts = [FAMILIES[rng.randrange(2)] + f"\nUser {i}: my question number {i}, please help." for i in range(args.requests)]
    procs, urls = zip(*(start_replica(model, args.max_total_tokens) for _ in range(2)))
    results: dict[str, list[dict]] = {"cache_aware": [], "round_robin": []}
    try:
        for rep in range(args.reps):
            order = ["cache_aware", "round_robin"] if rep % 2 == 0 else ["round_robin", "cache_aware"]
            for policy in order:
                router = RouterThread(RouterConfig(workers=list(urls), routing=RoutingConfig(policy=policy)))
                try:
                    results[policy].append(asyncio.run(run_workload(router.url, prompts, args.clients,
                                                                    args.max_new_tokens)))
                finally:
                    router.close()
    finally:
        stop_replicas(list(procs))
    med = {p: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for p, rs in results.items()}
    print(f"{args.requests} requests, 2 prompt families, 2 replicas, {args.clients} clients, "
          f"{args.max_new_tokens} new tokens, median of {args.reps}")
    print(f"{'policy':<12} {'seconds':>8} {'tok/s':>8} {'hit rate':>9}")
    for p, m in med.items():
        print(f"{p:<12} {m['seconds']:8.2f} {m['tok_per_s']:8.1f} {m['hit_rate']:9.1%}")
    ca, rr = med["cache_aware"], med["round_robin"]
    print(f"cache-aware / round-robin: throughput {ca['tok_per_s'] / rr['tok_per_s']:.2f}x, "
          f"hit rate {ca['hit_rate']:.1%} vs {rr['hit_rate']:.1%}")


if __name__ == "__main__":
    main()
