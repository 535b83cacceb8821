"""DSL benchmark: what the compiler's pre-fill and concurrent execution buy on prefix-heavy programs.

Two workloads, each run three ways on one engine (cache flushed between runs):

- ``agents``: ``run_batch`` of N tool-calling agent programs sharing a long system prompt
  (gen an action, run the tool on the host, gen the answer);
- ``tree``: T tree-of-thought programs, each ``fork(8)`` thoughts, then a verdict.

Modes: ``compiled`` (run_batch/fork pre-fill the shared prefix once, members run concurrently),
``no_prefill`` (concurrent, no pre-fill: the engine's own scheduling is all that shares), and
``one_by_one`` (the same requests sent one at a time). Reports wall time, generated tokens per
second, the ratios, and the cache hit rate (cached / prompt tokens over every gen request).

    python3 benchmarks/bench_lang.py                 # tiny checkpoint, CPU
    python3 benchmarks/bench_lang.py --size small --batch 64 --max-tokens 32
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from typing import Any

from radixlm.lang.backends import EngineBackend

import radixlm as sgl

TOOLS = ("search(query): look up a fact. calc(expression): evaluate arithmetic. "
         "weather(city): today's forecast. Reply with exactly one tool call per turn, then the answer. ")


@sgl.function
def agent(s, system_prompt, task):
    s += sgl.system(system_prompt)
    s += sgl.user("Task: " + task)
    s += sgl.assistant(sgl.gen("action", stop="\n"))
    observation = "calc -> " + str(len(s["action"]) * 7)  # the host runs the tool
    s += sgl.user("Observation: " + observation)
    s += sgl.assistant(sgl.gen("answer", stop="\n"))


@sgl.function
def tree_of_thought(s, problem, width):
    s += sgl.system("You solve problems by exploring several lines of thought. " * 6)
    s += sgl.user("Problem: " + problem)
    s += sgl.assistant_begin() + "Let me consider several approaches.\n"
    thoughts = s.fork(width)
    thoughts += lambda i: f"Approach {i + 1}: " + sgl.gen("thought", stop="\n")
    thoughts.join()
    s += "Verdict: " + sgl.gen("verdict", stop="\n") + sgl.assistant_end()


class SerialBackend:
    """The same requests, one at a time: every backend call holds one lock."""

    def __init__(self, inner: Any):
        self.inner = inner
        self.lock = threading.Lock()
        self.role_template = inner.role_template

    def generate(self, *args: Any, **kwargs: Any) -> Any:
        with self.lock:
            return self.inner.generate(*args, **kwargs)

    def generate_stream(self, *args: Any, **kwargs: Any):
        with self.lock:
            yield from self.inner.generate_stream(*args, **kwargs)


def token_counts(states: list) -> tuple[int, int, int]:
    """(prompt, cached, completion) tokens over every gen of every state (forks included)."""
    prompt = cached = completion = 0
    for st in states:
        for name in st._exec.meta_info:
            metas = st.get_meta_info(name)
            for meta in metas if isinstance(metas, list) else [metas]:
                if isinstance(meta, dict) and "prompt_tokens" in meta:
                    prompt += meta["prompt_tokens"]
                    cached += meta["cached_tokens"]
                    completion += meta["completion_tokens"]
    return prompt, cached, completion


def run_mode(engine: Any, workload: str, mode: str, args: argparse.Namespace) -> dict[str, Any]:
    engine.flush_cache()
    backend = EngineBackend(engine)
    prefill = mode == "compiled"
    if mode == "one_by_one":
        backend = SerialBackend(backend)
    opts = {"backend": backend, "prefill_prefix": prefill, "temperature": 0, "max_new_tokens": args.max_tokens,
            "ignore_eos": True}
    start = time.perf_counter()
    if workload == "agents":
        system_prompt = TOOLS * args.system_repeat
        batch = [{"system_prompt": system_prompt, "task": f"request {i}: find fact {i * 37 % 101}"}
                 for i in range(args.batch)]
        states = agent.run_batch(batch, num_threads=1 if mode == "one_by_one" else "auto", **opts)
    else:
        batch = [{"problem": f"puzzle {i}: arrange {i + 3} coins", "width": args.forks} for i in range(args.trees)]
        states = tree_of_thought.run_batch(batch, num_threads=1 if mode == "one_by_one" else "auto", **opts)
    elapsed = time.perf_counter() - start
    errors = [st.error() for st in states if st.error() is not None]
    if errors:
        raise RuntimeError(f"{workload}/{mode}: {errors[0]!r}")
    prompt, cached, completion = token_counts(states)
    return {"workload": workload, "mode": mode, "seconds": round(elapsed, 3),
            "completion_tokens": completion, "tok_per_s": round(completion / elapsed, 1),
            "prompt_tokens": prompt, "cached_tokens": cached,
            "cache_hit_rate": round(cached / prompt, 4) if prompt else 0.0}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--arch", default="llama")
    ap.add_argument("--size", default="tiny")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--batch", type=int, default=64, help="agent programs in the run_batch")
    ap.add_argument("--trees", type=int, default=4, help="tree-of-thought programs")
    ap.add_argument("--forks", type=int, default=8, help="fork width of each tree")
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--system-repeat", type=int, default=12, help="copies of the tool text in the system prompt")
    ap.add_argument("--workloads", default="agents,tree", help="comma-separated: agents, tree")
    ap.add_argument("--repeat", type=int, default=2, help="rounds (modes interleaved); the fastest counts")
    ap.add_argument("--json", action="store_true", help="print one JSON object per row")
    args = ap.parse_args()

    from radixlm.runtime.engine.engine import Engine
    from radixlm.runtime.testing import checkpoint_path

    engine = Engine(model_path=checkpoint_path(args.arch, args.size), device=args.device)
    try:
        engine.generate("warm up", {"max_new_tokens": 4})  # first-call costs out of the measurements
        workloads = [w for w in args.workloads.split(",") if w]
        best: dict[tuple[str, str], dict[str, Any]] = {}
        # Interleave the modes and keep each one's fastest round: a shared machine is noisy.
        for _ in range(args.repeat):
            for w in workloads:
                for m in ("compiled", "no_prefill", "one_by_one"):
                    row = run_mode(engine, w, m, args)
                    if (w, m) not in best or row["seconds"] < best[w, m]["seconds"]:
                        best[w, m] = row
        rows = list(best.values())
    finally:
        engine.shutdown()
    report(rows, args.json)


def report(rows: list[dict[str, Any]], as_json: bool) -> None:
    if as_json:
        for row in rows:
            print(json.dumps(row))
        return
    print(f"{'workload':<8} {'mode':<11} {'seconds':>8} {'tok/s':>8} {'prompt':>8} {'cached':>8} {'hit':>6}")
    for r in rows:
        print(f"{r['workload']:<8} {r['mode']:<11} {r['seconds']:>8.2f} {r['tok_per_s']:>8.1f} "
              f"{r['prompt_tokens']:>8} {r['cached_tokens']:>8} {r['cache_hit_rate']:>6.1%}")
    for workload in dict.fromkeys(r["workload"] for r in rows):
        by_mode = {r["mode"]: r for r in rows if r["workload"] == workload}
        compiled = by_mode["compiled"]["seconds"]
        print(f"{workload}: compiled is {by_mode['no_prefill']['seconds'] / compiled:.2f}x faster than "
              f"no_prefill and {by_mode['one_by_one']['seconds'] / compiled:.2f}x faster than one_by_one")


if __name__ == "__main__":
    main()
