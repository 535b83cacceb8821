"""Serving benchmark: the agent workload through HTTP vs the same through ``Engine`` in-process.

Workload (the agent workload, scaled by flags): R requests = one S-token shared system
prompt + a distinct U-token user turn each, G new tokens each (greedy, ``ignore_eos``), sent by N
concurrent clients (each client sends its share of requests one after another). Every request
streams, so time-to-first-token (TTFT) and inter-token latency (ITL) are measured at the client.

Modes, alternated for ``--rounds`` rounds (the cache flushed and a warm-up request before each
run; the server subprocess and the in-process engine are both started once and idle while the
other runs), so that background load hits both alike:

- ``engine``: N asyncio tasks calling ``Engine.async_generate(stream=True)`` in this process;
- ``http``: N aiohttp clients streaming ``POST /generate`` (or ``/v1/completions``) from a
  ``radixlm serve`` subprocess with the same server arguments.

Reports the median round's wall time, request and output-token throughput, TTFT and ITL p50/p99,
and the server overhead: the median over rounds of ``http_wall / engine_wall - 1`` (target <= 10%).
``--threads`` (default 1) sets torch's intra-op threads in both modes, leaving a core for the HTTP
layer and the clients on small machines.

    python3 benchmarks/bench_serving.py                        # tiny checkpoint, CPU
    python3 benchmarks/bench_serving.py --clients 16 --requests 64 --system-tokens 1500 --api completions
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp

CORPUS = Path(__file__).resolve().parents[1] / "runtime" / "checkpoints" / "data" / "corpus.txt"


@dataclass
class Sample:
    """One request as the client saw it: timestamps of each token-carrying chunk."""

    start: float
    token_times: list[float] = field(default_factory=list)  # one entry per generated token

    @property
    def ttft(self) -> float:
        return self.token_times[0] - self.start

    @property
    def itls(self) -> list[float]:
        return [b - a for a, b in zip(self.token_times, self.token_times[1:])]


def make_workload(tokenizer, requests: int, system_tokens: int, user_tokens: int) -> list[list[int]]:
    """Token-exact prompts: a shared system prefix plus a distinct user turn per request."""
    ids = tokenizer.encode(CORPUS.read_text(encoding="utf-8"))
    need = system_tokens + requests * user_tokens
    ids = (ids * (need // len(ids) + 1))[:need]
    system = ids[:system_tokens]
    return [system + ids[system_tokens + i * user_tokens: system_tokens + (i + 1) * user_tokens]
            for i in range(requests)]


def _mark(sample: Sample, new_tokens: int) -> None:
    now = time.perf_counter()
    sample.token_times.extend([now] * new_tokens)


async def run_clients(prompts: list[list[int]], clients: int, one) -> tuple[float, list[Sample]]:
    """N clients drain a shared queue of prompts; returns (wall seconds, samples)."""
    queue: asyncio.Queue = asyncio.Queue()
    for p in prompts:
        queue.put_nowait(p)
    samples: list[Sample] = []

    async def client() -> None:
        while not queue.empty():
            prompt = queue.get_nowait()
            samples.append(await one(prompt))

    start = time.perf_counter()
    await asyncio.gather(*[client() for _ in range(clients)])
    return time.perf_counter() - start, samples


def engine_request(engine, params: dict):
    async def one(prompt: list[int]) -> Sample:
        sample = Sample(time.perf_counter())
        seen = 0
        async for chunk in await engine.async_generate(input_ids=prompt, sampling_params=params, stream=True):
            total = chunk["meta_info"]["completion_tokens"]
            _mark(sample, total - seen)
            seen = total
        return sample
    return one


def http_request(session: aiohttp.ClientSession, url: str, api: str, params: dict):
    async def one(prompt: list[int]) -> Sample:
        if api == "generate":
            body = {"input_ids": prompt, "sampling_params": params, "stream": True}
        else:
            body = {"prompt": prompt, "max_tokens": params["max_new_tokens"], "temperature": 0.0,
                    "ignore_eos": True, "stream": True}
        sample = Sample(time.perf_counter())
        seen = 0
        async with session.post(f"{url}/{'generate' if api == 'generate' else 'v1/completions'}",
                                json=body) as resp:
            resp.raise_for_status()
            async for line in resp.content:
                if not line.startswith(b"data: ") or line.startswith(b"data: [DONE]"):
                    continue
                chunk = json.loads(line[6:])
                if api == "generate":
                    total = chunk["meta_info"]["completion_tokens"]
                    _mark(sample, total - seen)
                    seen = total
                elif chunk["choices"] and chunk["choices"][0]["text"]:
                    _mark(sample, 1)  # a completions chunk carries no count; one per chunk
        return sample
    return one


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(int(q * len(values)), len(values) - 1)]


def summarize(name: str, wall: float, samples: list[Sample]) -> dict:
    tokens = sum(len(s.token_times) for s in samples)
    ttfts = [s.ttft for s in samples if s.token_times]
    itls = [x for s in samples for x in s.itls]
    return {"mode": name, "wall_s": wall, "req_per_s": len(samples) / wall, "out_tok_per_s": tokens / wall,
            "ttft_p50_ms": pct(ttfts, 0.5) * 1e3, "ttft_p99_ms": pct(ttfts, 0.99) * 1e3,
            "itl_p50_ms": pct(itls, 0.5) * 1e3, "itl_p99_ms": pct(itls, 0.99) * 1e3,
            "ttft_mean_ms": statistics.fmean(ttfts) * 1e3 if ttfts else float("nan")}


def engine_kwargs(args) -> dict:
    kwargs = {"max_total_tokens": args.max_total_tokens, "random_seed": 0}
    if args.model_path:
        kwargs["model_path"] = args.model_path
    return kwargs


def start_server(args) -> tuple[subprocess.Popen, str]:
    """A ``radixlm serve`` subprocess with the same engine arguments; returns (process, url)."""
    flags = [x for k, v in engine_kwargs(args).items() for x in ("--" + k.replace("_", "-"), str(v))]
    cmd = [sys.executable, "-m", "radixlm", "serve", "--port", "0", "--no-log-requests", *flags]
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": str(args.threads)}
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, env=env)
    return proc, _wait_for_url(proc)


async def run_engine(engine, args, prompts: list[list[int]], params: dict) -> dict:
    await engine.async_generate(input_ids=prompts[0][:8], sampling_params={"max_new_tokens": 4})
    engine.flush_cache()
    wall, samples = await run_clients(prompts, args.clients, engine_request(engine, params))
    return summarize("engine", wall, samples)


async def run_http(url: str, args, prompts: list[list[int]], params: dict) -> dict:
    connector = aiohttp.TCPConnector(limit=args.clients + 4)
    async with aiohttp.ClientSession(connector=connector) as session:
        async with session.post(url + "/generate", json={"input_ids": prompts[0][:8],
                                                         "sampling_params": {"max_new_tokens": 4}}) as r:
            r.raise_for_status()
        async with session.post(url + "/flush_cache", json={}) as r:
            r.raise_for_status()
        wall, samples = await run_clients(prompts, args.clients, http_request(session, url, args.api, params))
    return summarize(f"http ({args.api})", wall, samples)


def bench(args, prompts: list[list[int]], params: dict) -> tuple[list[dict], list[dict]]:
    """Alternate engine and HTTP runs ``rounds`` times (both idle while the other runs), so that
    background load on the machine hits both modes alike."""
    from radixlm.runtime.engine.engine import Engine

    proc, url = start_server(args)
    engine = Engine(**engine_kwargs(args))
    runs: tuple[list[dict], list[dict]] = ([], [])
    try:
        for _ in range(args.rounds):
            runs[0].append(asyncio.run(run_engine(engine, args, prompts, params)))
            runs[1].append(asyncio.run(run_http(url, args, prompts, params)))
    finally:
        engine.shutdown()
        proc.terminate()
        proc.wait(timeout=60)
    return runs


def median_run(runs: list[dict]) -> dict:
    """The run with the median wall time (its latency figures come with it)."""
    return sorted(runs, key=lambda r: r["wall_s"])[len(runs) // 2]


def _wait_for_url(proc: subprocess.Popen) -> str:
    for line in proc.stderr:
        m = re.search(rb"on (http://[\d.]+:\d+)", line)
        if m:
            return m.group(1).decode()
    raise RuntimeError(f"the server exited with {proc.wait()} before listening")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model-path", default=None, help="checkpoint (default: the embedded tiny model)")
    p.add_argument("--clients", type=int, default=16)
    p.add_argument("--requests", type=int, default=64)
    p.add_argument("--system-tokens", type=int, default=1500)
    p.add_argument("--user-tokens", type=int, default=50)
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--max-total-tokens", type=int, default=65536)
    p.add_argument("--api", choices=("generate", "completions"), default="generate")
    p.add_argument("--rounds", type=int, default=3, help="alternating engine/HTTP rounds")
    p.add_argument("--threads", type=int, default=1,
                   help="torch intra-op threads in both modes (leave a core for the HTTP layer and clients)")
    p.add_argument("--json", action="store_true", help="print the results as JSON")
    args = p.parse_args()
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    import torch

    torch.set_num_threads(args.threads)

    from radixlm.runtime.checkpoints.synthetic import default_model_path
    from radixlm.runtime.tokenizer.tokenizer import Tokenizer

    tokenizer = Tokenizer(args.model_path or default_model_path())
    prompts = make_workload(tokenizer, args.requests, args.system_tokens, args.user_tokens)
    params = {"max_new_tokens": args.max_new_tokens, "temperature": 0.0, "ignore_eos": True}
    engine_runs, http_runs = bench(args, prompts, params)
    ratios = sorted(h["wall_s"] / e["wall_s"] for e, h in zip(engine_runs, http_runs))
    overhead = ratios[len(ratios) // 2] - 1.0
    engine, http = median_run(engine_runs), median_run(http_runs)
    if args.json:
        print(json.dumps({"engine": engine_runs, "http": http_runs, "overhead": overhead}, indent=2))
        return
    print(f"agent workload: {args.requests} requests x ({args.system_tokens} shared + {args.user_tokens} "
          f"own prompt tokens, {args.max_new_tokens} new), {args.clients} concurrent clients, "
          f"{args.rounds} alternating rounds (median shown)")
    header = f"{'mode':<20}{'wall s':>8}{'req/s':>8}{'tok/s':>9}{'TTFT p50':>10}{'TTFT p99':>10}" \
             f"{'ITL p50':>9}{'ITL p99':>9}   (ms)"
    print(header)
    for r in (engine, http):
        print(f"{r['mode']:<20}{r['wall_s']:>8.2f}{r['req_per_s']:>8.1f}{r['out_tok_per_s']:>9.0f}"
              f"{r['ttft_p50_ms']:>10.1f}{r['ttft_p99_ms']:>10.1f}{r['itl_p50_ms']:>9.2f}{r['itl_p99_ms']:>9.2f}")
    print("per-round http/engine wall ratios: " + ", ".join(f"{x:.3f}" for x in ratios))
    print(f"server overhead (median http/engine wall - 1): {overhead * 100:+.1f}%  (target <= 10%)")


if __name__ == "__main__":
    main()
