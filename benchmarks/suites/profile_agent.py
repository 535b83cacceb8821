"""Profile of the agent workload: where its prefill and decode steps spend their time, part by part.

    python benchmarks/run.py --suite profile_agent --arch qwen2 --size 0.5b

The agent suite's workload (64 requests sharing a ~1,500-token system prompt, 32 new tokens each)
runs once through radixlm under the ``profile`` suite's timed wrappers (``profile.Probes``), after
one untimed warm-up run. The tables give the mean prefill step and the mean decode step, each part
with its GFLOP/s against the matmul rate measured in the same run, and the steps' total seconds:
the figures to set against the agent suite's kernel floor (``kernel_floor.py``), which times the
same parts in isolation.
"""

from __future__ import annotations

from typing import Any

from suites import roofline
from suites.context import SuiteContext
from suites.profile import Probes, summarize, table
from suites.workloads import agent_prompts


def run(ctx: SuiteContext) -> dict[str, Any]:
    system = ctx.pool.get("radixlm")
    prompts = agent_prompts(ctx.tokenizer, ctx.scale(64, 4), ctx.scale(1500, 300))
    new_tokens = ctx.scale(32, 4)
    ctx.log(f"profile_agent: {len(prompts)} requests, prompt {len(prompts[0])} tokens, {new_tokens} new tokens")
    machine = roofline.measure(quick=ctx.quick)
    system.generate(prompts, new_tokens)  # warm-up: allocator, kernel caches
    system.reset()
    with Probes(system.engine) as probes:
        system.generate(prompts, new_tokens)
    system.reset()
    rows: dict[str, Any] = {}
    lines = [f"Matmul rate {machine['matmul_gflop_per_s']:.1f} GFLOP/s and read bandwidth "
             f"{machine['read_gb_per_s']:.1f} GB/s, measured in the same run.", ""]
    for kind in ("prefill", "decode"):
        prof = summarize(probes.steps, kind)
        total = prof["step_s"] * prof["steps"]
        ctx.log(f"  agent-{kind}: {prof['steps']} steps, {total:.2f} s")
        rows[f"agent-{kind}"] = {"status": "ok", "median": {"step_ms": prof["step_s"] * 1e3}, "profile": prof,
                                 "total_s": total}
        lines += [f"All {kind} steps: {total:.2f} s.", ""] + table(f"agent-{kind}", prof, machine)
    return {"workload": {"requests": len(prompts), "prompt_tokens_each": [len(p) for p in prompts][:4],
                         "new_tokens": new_tokens},
            "machine": machine, "metric": "step_ms", "systems": rows, "table_md": lines, "targets": []}
