"""Raw suite: prefill and decode throughput at batch 1 / 16 / 64 against the machine measured in the same run.

Decode tokens/s at batch B is decode tokens over the time spent in decode steps (the engine's step
timers, which include scheduling and sampling but not prefill) for B distinct random prompts; the
same timers give the share of a decode step spent outside the model forward (engine overhead).
Prefill tokens/s is prompt tokens over the wall time of a one-new-token run.

The machine (``roofline``: read bandwidth, float32 matmul rate) is measured before and after the
trials and the better of the two is used (a busy shared machine only ever lowers them). Per row:

* ``of matmul rate``: achieved matmul FLOP/s (``2 * matmul_params`` per token) over the measured
  float32 matmul rate; ``matmul_params`` are the decoder's and the LM head's weights (the
  embedding is a lookup, not a matmul).
* ``of paired rate`` (batch 64, what the targets read): the same share per repetition against the
  matmul rate measured right before and right after that repetition (their mean), then the median
  over the repetitions. This 2-core machine's speed drifts by 10-25% within minutes (the same
  batch-64 decode step, even within one minute and one process), so a rate measured
  minutes away from a trial says more about the drift than about the kernels; the paired share
  compares a trial with the machine it ran on. Both columns are reported.
* decode rows: ``streamed GB/s`` = bytes a step reads (matmul weights + the batch's KV) times steps
  per second, next to the read bandwidth; ``roofline`` = ``min(B * bandwidth / step_bytes,
  flops / (2 * matmul_params))``. prefill rows: roofline = the matmul rate.

When llama.cpp is installed its batch-1 decode on the float32 and Q8_0 GGUFs (``llama.cpp-decode-b1``,
``llama.cpp-q8-decode-b1``) is measured the same way (decode steps only); its streamed bytes are the
GGUF file scaled by the same matmul share of the checkpoint.
"""

from __future__ import annotations

import os
import statistics
import time
from typing import Any

from suites import roofline
from suites.context import SuiteContext
from suites.measure import alternate, target
from suites.workloads import random_prompts

BATCHES = (1, 16, 64)
LLAMACPP = ("llama.cpp", "llama.cpp-q8")


def _weight_bytes(model_path: str) -> int:
    return sum(os.path.getsize(os.path.join(model_path, f)) for f in os.listdir(model_path)
               if f.endswith(".safetensors"))


def _embedding_bytes(cfg: Any) -> int:
    """Bytes of the embedding table when it is a lookup only (an untied LM head is its own matmul)."""
    itemsize = 4 if cfg.torch_dtype == "float32" else 2
    return 0 if cfg.tie_word_embeddings else cfg.vocab_size * cfg.hidden_size * itemsize


PAIRED_BATCH = 64  # the batch whose matmul-rate share is a target: paired with its own rate


def _paired(run: Any, paired: bool) -> dict[str, Any]:
    """``run()``'s row, with the mean of the matmul rates measured just before and after it when ``paired``."""
    if not paired:
        return run()
    before = roofline.matmul_flops()["matmul_gflop_per_s"]
    row = run()
    after = roofline.matmul_flops()["matmul_gflop_per_s"]
    return {**row, "paired_matmul_gflop_per_s": (before + after) / 2}


def decode_trial(system: Any, prompts: list[list[int]], new_tokens: int):
    """Decode rate from the engine's step timers: decode tokens / time in decode steps; and the share
    of those steps outside the model forward."""
    def run() -> dict[str, Any]:
        before = system.engine.get_stats()["timers"]
        system.generate(prompts, new_tokens)
        after = system.engine.get_stats()["timers"]
        system.reset()
        tokens = after["decode_tokens"] - before["decode_tokens"]
        step_s = after["decode_step_s"] - before["decode_step_s"]
        forward_s = after["decode_forward_s"] - before["decode_forward_s"]
        return {"output_tokens": len(prompts) * new_tokens, "decode_tok_per_s": tokens / step_s,
                "outside_forward": (step_s - forward_s) / step_s}
    return lambda: _paired(run, len(prompts) == PAIRED_BATCH)


def llamacpp_decode_trial(system: Any, prompts: list[list[int]], new_tokens: int):
    """llama.cpp's decode rate for ``prompts`` as parallel sequences, decode steps only."""
    def trial() -> dict[str, Any]:
        return {"output_tokens": len(prompts) * new_tokens,
                "decode_tok_per_s": system.decode_rate(prompts, new_tokens)}
    return trial


def prefill_trial(system: Any, prompts: list[list[int]]):
    def run() -> dict[str, Any]:
        start = time.perf_counter()
        system.generate(prompts, 1)
        seconds = time.perf_counter() - start
        system.reset()
        n = sum(len(p) for p in prompts)
        return {"output_tokens": len(prompts), "prefill_tokens": n, "prefill_tok_per_s": n / seconds}
    return lambda: _paired(run, len(prompts) == PAIRED_BATCH)


def _best_machine(first: dict[str, Any], second: dict[str, Any]) -> dict[str, Any]:
    best = {k: max(first[k], second[k]) for k in ("read_gb_per_s", "copy_gb_per_s", "matmul_gflop_per_s")}
    return {**first, **best, "before": first, "after": second}


def run(ctx: SuiteContext) -> dict[str, Any]:
    system = ctx.pool.get("radixlm")
    cfg = system.engine.model_config
    vocab = system.engine.tokenizer.vocab_size
    batches = (1, 16) if ctx.quick else BATCHES
    prompt_len, extra = 32, ctx.scale(32, 8)
    prefill_len = ctx.scale(256, 32)
    weight_bytes = _weight_bytes(ctx.model_path)
    matmul_bytes = weight_bytes - _embedding_bytes(cfg)
    trials: dict[str, Any] = {}
    meta: dict[str, tuple[str, int, float]] = {}  # config -> (kind, batch, matmul weight bytes streamed per step)
    for b in batches:
        trials[f"decode-b{b}"] = decode_trial(system, random_prompts(vocab, b, prompt_len, seed=b), extra)
        trials[f"prefill-b{b}"] = prefill_trial(system, random_prompts(vocab, b, prefill_len, seed=100 + b))
        meta[f"decode-b{b}"], meta[f"prefill-b{b}"] = ("decode", b, matmul_bytes), ("prefill", b, matmul_bytes)
    ready, _ = ctx.pick(LLAMACPP)
    for name, peer in ready.items():
        trials[f"{name}-decode-b1"] = llamacpp_decode_trial(peer, random_prompts(vocab, 1, prompt_len, seed=1), extra)
        meta[f"{name}-decode-b1"] = ("decode", 1, peer.gguf_path.stat().st_size * matmul_bytes / weight_bytes)
    ctx.log(f"raw: batches {batches}, decode {extra} tokens, prefill {prefill_len} tokens; measuring roofline")
    first = roofline.measure(quick=ctx.quick)
    ctx.log(f"  roofline (before): {first}")
    warm = {"decode-b1": decode_trial(system, random_prompts(vocab, 1, 8), 2),
            **{n: llamacpp_decode_trial(p, random_prompts(vocab, 1, 8), 2) for n, p in ready.items()}}
    runs = alternate(trials, ctx.reps, warmups=warm, log=ctx.log)
    limits = _best_machine(first, roofline.measure(quick=ctx.quick))
    ctx.log(f"  roofline (after): {limits['after']}")
    params = matmul_bytes / (4 if cfg.torch_dtype == "float32" else 2)
    kv_token = cfg.num_layers * 2 * cfg.num_kv_heads * cfg.head_dim * 4
    rows = {name: _row(reps, *meta[name], limits, params, kv_token, prompt_len + extra / 2)
            for name, reps in runs.items()}
    return {"workload": {"batches": list(batches), "decode_prompt_len": prompt_len, "decode_extra_tokens": extra,
                         "prefill_len": prefill_len},
            "machine": limits, "model": {"weight_bytes": weight_bytes, "matmul_weight_bytes": matmul_bytes,
                                         "matmul_params": params, "kv_bytes_per_token": kv_token},
            "metric": "roofline_fraction", "systems": rows, "targets": _targets(rows)}


def _row(reps: list[dict[str, Any]], kind: str, b: int, weights: float, limits: dict[str, Any], params: float,
         kv_token: int, mean_context: float) -> dict[str, Any]:
    """One config's result row: median rate, matmul-rate share, roofline fraction (+ streamed GB/s)."""
    key = f"{kind}_tok_per_s"
    measured = sorted(r[key] for r in reps)[len(reps) // 2]
    flops, bandwidth = limits["matmul_gflop_per_s"] * 1e9, limits["read_gb_per_s"] * 1e9
    row = {"status": "ok", "runs": reps, "median": {key: measured}, "batch": b, "kind": kind,
           "matmul_rate_fraction": 2 * params * measured / flops}
    if all("paired_matmul_gflop_per_s" in r for r in reps):
        shares = sorted(2 * params * r[key] / (r["paired_matmul_gflop_per_s"] * 1e9) for r in reps)
        row["paired_matmul_rate_fraction"] = statistics.median(shares)
    roof = flops / (2 * params)
    if kind == "decode":
        step_bytes = weights + b * mean_context * kv_token
        roof = min(b * bandwidth / step_bytes, roof)
        row["streamed_gb_per_s"] = step_bytes * measured / b / 1e9  # bytes per step x steps per second
        if "outside_forward" in reps[0]:
            row["outside_forward"] = sorted(r["outside_forward"] for r in reps)[len(reps) // 2]
    return {**row, "roofline_tok_per_s": roof, "roofline_fraction": measured / roof}


def _targets(rows: dict[str, Any]) -> list[dict[str, Any]]:
    """The suite's targets: matmul-rate shares at batch 64, engine overhead, batch-1 decode vs llama.cpp."""
    out = []
    for name in ("prefill-b64", "decode-b64"):
        if name in rows:
            share = rows[name].get("paired_matmul_rate_fraction", rows[name]["matmul_rate_fraction"])
            out.append(target(f"{name} fraction of the float32 matmul rate (paired per repetition)", share,
                              0.75, unit=""))
    for name in ("decode-b1", "decode-b64"):
        if "outside_forward" in rows.get(name, {}):
            out.append(target(f"{name}: share of a decode step inside the forward (overhead <= 5%)",
                              1 - rows[name]["outside_forward"], 0.95, unit=""))
    ours, peer = rows.get("decode-b1"), rows.get("llama.cpp-decode-b1")
    if ours is not None and peer is not None:
        ratio = ours["median"]["decode_tok_per_s"] / peer["median"]["decode_tok_per_s"]
        out.append(target("decode batch 1 tok/s radixlm / llama.cpp float32", ratio, 0.9))
    return out
