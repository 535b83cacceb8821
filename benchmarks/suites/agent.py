"""Agent suite: N tool-calling requests sharing a ~1,500-token tool-definition system prompt.

Each request is the same system turn (tools rendered by the chat template) plus a distinct user
turn; every system decodes ``new_tokens`` tokens greedily with EOS ignored (the same token work
everywhere; constrained tool-call JSON is measured in the ``json`` suite). Throughput is output
tokens per second over the whole batch, caches flushed before each repetition.

llama.cpp runs in its best configuration for this workload (``llama.cpp``, ``llama.cpp-q8``: the
shared prefix prefilled once, then the requests as parallel sequences in batched ``llama_decode``
calls; the number of parallel sequences is swept first and the best kept), and one request at a
time as a second, labelled row (``llama.cpp-serial``).

The result also carries the workload's FLOP floor (``flop_floor.py``): its arithmetic at the best
float32 rate measured in the run, and per system the largest speed-up any engine could show over it;
and its kernel floor (``kernel_floor.py``): each part at the best rate measured for its own shapes.
"""

from __future__ import annotations

from typing import Any

from suites import flop_floor, kernel_floor, roofline
from suites.context import SuiteContext
from suites.measure import agreement, alternate, summarize, sweep_parallel, target
from suites.workloads import agent_prompts

SYSTEMS = ("radixlm", "radixlm-nocache", "hf", "hf-prefix", "llama.cpp", "llama.cpp-q8", "llama.cpp-serial")


def token_trial(system: Any, prompts: list[list[int]], new_tokens: int, sink: list | None = None):
    """A trial running ``prompts`` through ``system`` once (its outputs replace ``sink``'s contents)."""
    def trial() -> dict[str, Any]:
        gen = system.generate(prompts, new_tokens)
        if sink is not None:
            sink[:] = gen.outputs
        return {"output_tokens": gen.output_tokens, "prompt_tokens": gen.prompt_tokens,
                "cached_tokens": gen.cached_tokens, "requests": len(prompts)}
    return trial


def run(ctx: SuiteContext) -> dict[str, Any]:
    num = ctx.scale(64, 8)
    new_tokens = ctx.scale(32, 8)
    system_tokens = ctx.scale(1500, 400)
    prompts = agent_prompts(ctx.tokenizer, num, system_tokens)
    ready, missing = ctx.pick(SYSTEMS)
    ctx.log(f"agent: {num} requests, prompt {len(prompts[0])} tokens, {new_tokens} new tokens each")
    outputs: dict[str, list[list[int]]] = {n: [] for n in ready}
    trials = {n: token_trial(s, prompts, new_tokens, outputs[n]) for n, s in ready.items()}
    warm = {n: token_trial(s, prompts[:2], 2) for n, s in ready.items()}
    for name, trial in warm.items():
        trial()  # before the sweep too, so its first setting is not the one paying the cold start
        ctx.log(f"  warm-up {name} done")
    swept = sweep_parallel(ready, trials, "output_tok_per_s", num, log=ctx.log)
    cfg = ctx.pool.get("radixlm").engine.model_config

    def machine_rates() -> tuple[float, dict]:  # before and after the repetitions: a busy machine only lowers them
        return (roofline.matmul_flops(n=1024 if ctx.quick else 2048)["matmul_gflop_per_s"],
                kernel_floor.workload_rates(cfg, prompts, new_tokens, quick=ctx.quick))

    before = machine_rates()
    runs = alternate(trials, ctx.reps, resets={n: s.reset for n, s in ready.items()}, log=ctx.log)
    after = machine_rates()
    systems = summarize(runs, "radixlm", unavailable=missing)
    need = flop_floor.floor(cfg, prompts, new_tokens, max(before[0], after[0]))
    floor = {**need, **flop_floor.bound(need, systems)}
    floor["kernel_floor"] = kernel_floor.bound(need, kernel_floor.best_of(before[1], after[1]), systems)
    speedup = {n: systems[n].get("radixlm_speedup") for n in systems}
    targets = [target("radixlm / hf output tok/s", speedup.get("hf"), 6.0),
               target("radixlm / radixlm-nocache output tok/s", speedup.get("radixlm-nocache"), 3.0)]
    if systems.get("llama.cpp", {}).get("status") == "ok":  # against llama.cpp's best configuration
        targets.append(target("radixlm / llama.cpp (best parallel) output tok/s", speedup.get("llama.cpp"), 1.5))
        peer = floor["systems"].get("llama.cpp", {})
        targets.append(target("largest speed-up over llama.cpp (best parallel) the FLOP floor allows",
                              peer.get("bound"), 1.5))
        peer = floor["kernel_floor"]["systems"].get("llama.cpp", {})
        targets.append(target("largest speed-up over llama.cpp (best parallel) the kernel floor allows",
                              peer.get("bound"), 1.5))
    return {"workload": {"requests": num, "prompt_tokens_each": [len(p) for p in prompts][:4],
                         "shared_system_tokens": system_tokens, "new_tokens": new_tokens},
            "metric": "output_tok_per_s", "systems": systems, "flop_floor": floor, "targets": targets,
            "parallel_sweep": swept,
            "greedy_agreement": agreement(outputs, "radixlm")}
