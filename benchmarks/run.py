"""Run the benchmark suites side by side and write ``results/<suite>.json``, Markdown tables and plots.

    python3 benchmarks/run.py --suite all                      # the `small` checkpoint, 3 reps
    python3 benchmarks/run.py --suite agent --suite json --size tiny --reps 5
    python3 benchmarks/run.py --suite raw --model-path /path/to/hf/checkpoint
    python3 benchmarks/run.py --suite agent --quick --size tiny # seconds: a smoke run
    python3 benchmarks/run.py --suite agent --arch qwen2 --size 0.5b  # the real-shape Qwen2.5-0.5B
    radixlm bench --suite all --size tiny                       # the same, through the CLI

Systems alternate within each repetition; the tables report medians and speed-up ratios. See
``benchmarks/README.md`` for the suites and systems, ``benchmarks/RESULTS.md`` for the latest figures.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from suites import SUITES, get_suite  # noqa: E402
from suites.context import SuiteContext  # noqa: E402
from suites.report import write_all  # noqa: E402
from suites.systems import SystemPool  # noqa: E402

DESCRIPTIONS = {
    "agent": "64 tool-calling requests sharing a ~1,500-token tool-definition system prompt.",
    "chat": "32 conversations x 4 turns, each turn resending the history.",
    "few_shot": "5-shot prompt + 4 choices scored by select, 64 questions.",
    "tree_of_thought": "fork(4) thoughts, then fork(4) checks per thought, 16 programs.",
    "json": "schema-constrained tool calls, jump-forward on vs off.",
    "raw": "prefill / decode throughput at batch 1, 16, 64 vs the measured roofline.",
    "profile": "per-op time of one prefill step and one decode step at batch 1 and 64.",
    "profile_agent": "per-op time of the agent workload's prefill and decode steps.",
    "quant": "int8 weight-only vs float32 and llama.cpp Q8_0: batch-1 decode, logits, greedy agreement.",
}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="radixlm bench", description="Run radixlm's benchmark suites.")
    add_arguments(p)
    return p


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The harness's flags (shared by ``benchmarks/run.py`` and ``radixlm bench``)."""
    p.add_argument("--suite", action="append", default=None,
                   help=f"suite to run, repeatable: {', '.join(SUITES)} or all (default: all)")
    p.add_argument("--size", choices=("tiny", "small", "0.5b", "0.6b", "1b"), default="small",
                   help="locally built checkpoint size (default: %(default)s); 0.5b / 0.6b / 1b build the "
                        "real-shape Qwen2.5-0.5B / Qwen3-0.6B / Llama-3.2-1B (random weights) and need "
                        "--arch qwen2 / qwen3 / llama")
    p.add_argument("--arch", default="llama", help="checkpoint architecture (default: %(default)s)")
    p.add_argument("--model-path", default=None, help="an HF-format checkpoint instead of a built one")
    p.add_argument("--reps", type=int, default=3, help="repetitions per system (default: %(default)s)")
    p.add_argument("--quick", action="store_true", help="tiny workloads (smoke test; numbers mean little)")
    p.add_argument("--systems", default=None,
                   help=f"comma-separated subset of {', '.join(SystemPool.NAMES)} (default: each suite's own)")
    p.add_argument("--max-total-tokens", type=int, default=None,
                   help="KV slots of each radixlm engine (default: 131072 tiny, 40000 small)")
    p.add_argument("--hf-batch-size", type=int, default=16, help="prompts per HF generate call")
    p.add_argument("--llamacpp-parallel", default="8,16,32,64",
                   help="parallel sequences swept for llama.cpp / llama.cpp-q8, comma-separated (default: %(default)s)")
    p.add_argument("--out", default="results", help="output directory (default: %(default)s)")


def resolve_suites(names: list[str] | None) -> list[str]:
    """The suites to run, in canonical order; ``all`` (or nothing) means every suite."""
    chosen = names or ["all"]
    if "all" in chosen:
        return list(SUITES)
    for name in chosen:
        get_suite(name)  # raises ValueError naming an unknown suite
    return [s for s in SUITES if s in chosen]


def parse_parallel(text: str) -> tuple[int, ...]:
    """``--llamacpp-parallel``: positive integers, comma-separated (``8,16,32,64``)."""
    try:
        values = tuple(int(v) for v in text.split(","))
    except ValueError:
        values = ()
    if not values or min(values) < 1 or max(values) > 256:  # llama.cpp's LLAMA_MAX_SEQ is 256
        raise ValueError(f"--llamacpp-parallel must be comma-separated integers in 1..256, got {text!r}")
    return values


def run_suites(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Run the chosen suites; returns their results (also written under ``args.out``)."""
    if args.reps < 1:
        raise ValueError(f"--reps must be >= 1, got {args.reps}")
    suites = resolve_suites(args.suite)
    if args.model_path:
        model_path = args.model_path
    else:
        from radixlm.runtime.testing import checkpoint_path

        model_path = checkpoint_path(arch=args.arch, size=args.size)
    kv = args.max_total_tokens or (131072 if args.size == "tiny" else 40000)
    pool = SystemPool(model_path, kv, args.hf_batch_size, parse_parallel(args.llamacpp_parallel))
    systems = tuple(args.systems.split(",")) if args.systems else None
    for name in systems or ():
        if name not in SystemPool.NAMES:
            raise ValueError(f"--systems: unknown system {name!r}; choose from {SystemPool.NAMES}")
    ctx = SuiteContext(model_path=model_path, size=args.size, reps=args.reps, quick=args.quick, pool=pool,
                       systems=systems, log=lambda m: print(m, flush=True))
    out = Path(args.out)
    results = []
    try:
        for name in suites:
            start = time.perf_counter()
            result = get_suite(name)(ctx)
            result.update(suite=name, description=DESCRIPTIONS[name], reps=args.reps, quick=args.quick,
                          model={"path": model_path, "size": "custom" if args.model_path else args.size},
                          wall_s=time.perf_counter() - start)
            paths = write_all(result, out)
            print(f"{name}: {time.perf_counter() - start:.1f} s -> {paths['json']}", flush=True)
            print_table(result)
            results.append(result)
    finally:
        pool.close()
    from suites.report import markdown

    (out / "summary.md").write_text("\n".join(markdown(r) for r in results))
    return results


def print_table(result: dict[str, Any]) -> None:
    """Print a suite's table (the Markdown of ``<suite>.md``); for the json suite, also the jump-forward
    line: how many times jump-forward's output tok/s is no-jump-forward's, and the forward passes."""
    from suites.report import markdown

    print(markdown(result), flush=True)
    rows = result["systems"]
    on, off = rows.get("jump-forward", {}), rows.get("no-jump-forward", {})
    if result["suite"] != "json" or on.get("status") != "ok" or off.get("status") != "ok":
        return
    metric = result["metric"]
    fast, slow = on["median"].get(metric), off["median"].get(metric)
    if fast and slow:
        print(f"jump-forward: {fast / slow:.2f}x the {metric} of no-jump-forward "
              f"({on.get('forward_passes_median', '-')} vs {off.get('forward_passes_median', '-')} forward "
              "passes per request)", flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``benchmarks/run.py`` and ``radixlm bench``; returns the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        run_suites(args)
    except ValueError as e:
        parser.error(str(e))
    return 0


if __name__ == "__main__":
    sys.exit(main())
