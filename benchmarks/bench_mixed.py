"""Mixed chunked prefill: inter-token latency of running requests while a 4k-token prompt arrives.

Workload: ``--running`` requests (default 8) decode greedily (EOS ignored, streamed); once each has
streamed ``--warm-tokens`` tokens, a ``--long-tokens`` prompt (default 4096) arrives and samples one
token; the running requests go on until each has ``--after-tokens`` tokens past the long prompt's
first token, then they are aborted. Every running request's inter-token latencies (the time between
its consecutive stream chunks, stamped in the engine thread: submission time + ``e2e_latency``) are
put in the window they overlap: *before* the arrival, *during* it (up to the long prompt's first
token) or *after*. For each chunk size of the sweep the engine runs twice, ``--enable-mixed-chunk``
off and on, in one process on one checkpoint; the table gives the median ITL before the arrival
(plain decode steps), the median over all windows, the median, p99 and max during the arrival,
p99(during) / median(all), and the long prompt's time to first token.

With mixing off the running requests wait for the whole prompt (one gap of ~TTFT); with it on a
step is the decode rows plus a chunk of at most ``chunked_prefill_size - running`` prompt tokens
(``runtime/scheduler/admission.py: mixed_prefill_budget``), so the chunk size sets the ITL during the
arrival against the prompt's TTFT.

    python benchmarks/bench_mixed.py                          # `small`, chunks 32, 64, 128
    python benchmarks/bench_mixed.py --size tiny --chunks 64 256
    python benchmarks/bench_mixed.py --json results/mixed.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import threading
import time
from typing import Any

from radixlm import Engine

WINDOWS = ("before", "during", "after")


def percentile(values: list[float], q: float) -> float:
    """The ``q``-th percentile (0..100), linear between the closest ranks; nan when empty."""
    if not values:
        return float("nan")
    xs = sorted(values)
    pos = (len(xs) - 1) * q / 100
    lo = int(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


class Stream:
    """One running request: its stream consumed in a thread, each chunk's engine-side timestamp."""

    def __init__(self, engine: Engine, rid: str, prompt: list[int], max_new_tokens: int) -> None:
        self.rid = rid
        self.times: list[float] = []
        self.submitted = time.perf_counter()
        params = {"temperature": 0.0, "max_new_tokens": max_new_tokens, "ignore_eos": True}
        self._iter = engine.generate(input_ids=prompt, sampling_params=params, stream=True, rid=rid)
        self._thread = threading.Thread(target=self._consume, daemon=True)
        self._thread.start()

    def _consume(self) -> None:
        for chunk in self._iter:
            if chunk["output_ids"]:
                self.times.append(self.submitted + chunk["meta_info"]["e2e_latency"])

    def tokens_after(self, t: float) -> int:
        return sum(x > t for x in self.times)

    def join(self) -> None:
        self._thread.join(timeout=600)


def wait_until(cond, timeout_s: float = 600.0) -> None:
    end = time.perf_counter() + timeout_s
    while not cond():
        if time.perf_counter() > end:
            raise TimeoutError("benchmark condition not reached")
        time.sleep(0.002)


def run_once(path: str, args: argparse.Namespace, chunk: int, mixed: bool, long_prompt: list[int],
             prompts: list[list[int]]) -> dict[str, Any]:
    """One engine, one arrival: the ITLs per window and the long prompt's TTFT."""
    with Engine(path, max_total_tokens=args.max_total_tokens, chunked_prefill_size=chunk,
                enable_mixed_chunk=mixed, context_length=len(long_prompt) + 64) as engine:
        engine.generate(input_ids=prompts[0][:16], sampling_params={"max_new_tokens": 2})  # warm-up
        streams = [Stream(engine, f"run{i}", p, args.max_new_tokens) for i, p in enumerate(prompts)]
        wait_until(lambda: all(len(s.times) >= args.warm_tokens for s in streams))
        arrival = time.perf_counter()
        out = engine.generate(input_ids=long_prompt, sampling_params={"temperature": 0.0, "max_new_tokens": 1})
        first = arrival + out["meta_info"]["first_token_latency"]
        wait_until(lambda: all(s.tokens_after(first) >= args.after_tokens for s in streams))
        for s in streams:
            engine.abort(s.rid)
        for s in streams:
            s.join()
    itl: dict[str, list[float]] = {w: [] for w in WINDOWS}
    for s in streams:
        for prev, cur in zip(s.times, s.times[1:]):
            window = "before" if cur <= arrival else "after" if prev >= first else "during"
            itl[window].append(cur - prev)
    return summarize(itl, first - arrival, chunk, mixed)


def summarize(itl: dict[str, list[float]], ttft: float, chunk: int, mixed: bool) -> dict[str, Any]:
    every = [x for w in WINDOWS for x in itl[w]]
    median_all = statistics.median(every)
    p99_during = percentile(itl["during"], 99)
    return {
        "chunk": chunk, "mixed": mixed, "ttft_s": ttft,
        "median_before_ms": 1e3 * statistics.median(itl["before"]),
        "median_all_ms": 1e3 * median_all,
        "median_during_ms": 1e3 * statistics.median(itl["during"]),
        "p99_during_ms": 1e3 * p99_during,
        "max_during_ms": 1e3 * max(itl["during"]),
        "p99_over_median": p99_during / median_all,
        "samples": {w: len(itl[w]) for w in WINDOWS},
    }


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| chunk | mixed | median ITL before (ms) | median ITL all (ms) | median during (ms) | "
             "p99 during (ms) | max during (ms) | p99 during / median all | long TTFT (s) | ITL samples b/d/a |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        n = r["samples"]
        lines.append(f"| {r['chunk']} | {'on' if r['mixed'] else 'off'} | {r['median_before_ms']:.1f} | "
                     f"{r['median_all_ms']:.1f} | {r['median_during_ms']:.1f} | {r['p99_during_ms']:.1f} | {r['max_during_ms']:.1f} | "
                     f"{r['p99_over_median']:.2f} | {r['ttft_s']:.2f} | "
                     f"{n['before']}/{n['during']}/{n['after']} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", choices=["tiny", "small"], default="small")
    parser.add_argument("--model-path", default=None, help="checkpoint directory (overrides --size)")
    parser.add_argument("--running", type=int, default=8, help="requests decoding when the prompt arrives")
    parser.add_argument("--prompt-len", type=int, default=32, help="prompt tokens of each running request")
    parser.add_argument("--long-tokens", type=int, default=4096)
    parser.add_argument("--chunks", type=int, nargs="+", default=[32, 64, 128],
                        help="chunked_prefill_size values swept (each with mixing off and on)")
    parser.add_argument("--modes", default="off,on", help="mixing off, on or both (off,on) per chunk size")
    parser.add_argument("--warm-tokens", type=int, default=16, help="tokens each running request streams first")
    parser.add_argument("--after-tokens", type=int, default=16, help="tokens after the long prompt's first")
    parser.add_argument("--max-new-tokens", type=int, default=2048, help="running requests' cap (aborted earlier)")
    parser.add_argument("--max-total-tokens", type=int, default=32768)
    parser.add_argument("--json", default=None, help="also write the figures here")
    args = parser.parse_args()

    from radixlm.runtime.testing import checkpoint_path
    from radixlm.runtime.tokenizer.tokenizer import Tokenizer

    path = args.model_path or checkpoint_path("llama", args.size)
    vocab = Tokenizer(path).vocab_size
    span = max(vocab - 300, 1)  # ordinary tokens, past the specials at the start
    prompts = [[1 + (i * 7919 + j * 104729) % span + 256 for j in range(args.prompt_len)]
               for i in range(args.running)]
    long_prompt = [1 + (j * 7727 + 13) % span + 256 for j in range(args.long_tokens)]
    rows = []
    for chunk in args.chunks:
        for mixed in [{"off": False, "on": True}[m] for m in args.modes.split(",")]:
            rows.append(run_once(path, args, chunk, mixed, long_prompt, prompts))
            print(table(rows[-1:]).splitlines()[-1], flush=True)
    print(f"\n{args.running} running requests, a {args.long_tokens}-token prompt arrives "
          f"({path.rstrip('/').split('/')[-1]})\n")
    print(table(rows))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"workload": vars(args), "results": rows}, f, indent=2)


if __name__ == "__main__":
    main()
