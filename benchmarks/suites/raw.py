"""Raw suite: prefill and decode throughput at batch 1 / 16 / 64 against the measured roofline.

Decode tokens/s at batch B is decode tokens over the time spent in decode steps (the engine's step
timers, which include scheduling and sampling but not prefill) for B distinct random prompts. The decode
roofline is ``min(B * bandwidth / bytes_per_step, flops / flops_per_token)`` with
``bytes_per_step = weight_bytes + B * mean_context * kv_bytes_per_token`` (a decode step streams
every weight once); prefill's is ``flops / (2 * params)``. Fractions are measured / roofline.
Each decode row also reports the bytes it streams per second (``bytes_per_step`` times steps per
second), next to the read bandwidth measured in the same run. When llama.cpp is installed, its batch-1
decode on the float32 and Q8_0 GGUFs (``llama.cpp-decode-b1``, ``llama.cpp-q8-decode-b1``) is measured
the same way (decode steps only), with the GGUF file as its weight bytes.
"""

from __future__ import annotations

import os
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


def decode_trial(system: Any, prompts: list[list[int]], new_tokens: int):
    """Decode rate from the engine's step timers: decode tokens / time in decode steps."""
    def trial() -> dict[str, Any]:
        before = system.engine.get_stats()["timers"]
        system.generate(prompts, new_tokens)
        after = system.engine.get_stats()["timers"]
        system.reset()
        tokens = after["decode_tokens"] - before["decode_tokens"]
        return {"output_tokens": len(prompts) * new_tokens,
                "decode_tok_per_s": tokens / (after["decode_step_s"] - before["decode_step_s"])}
    return trial


def llamacpp_decode_trial(system: Any, prompts: list[list[int]], new_tokens: int):
    """llama.cpp's decode rate for ``prompts`` as parallel sequences, decode steps only."""
    def trial() -> dict[str, Any]:
        return {"output_tokens": len(prompts) * new_tokens,
                "decode_tok_per_s": system.decode_rate(prompts, new_tokens)}
    return trial


def prefill_trial(system: Any, prompts: list[list[int]]):
    def trial() -> dict[str, Any]:
        start = time.perf_counter()
        system.generate(prompts, 1)
        seconds = time.perf_counter() - start
        system.reset()
        n = sum(len(p) for p in prompts)
        return {"output_tokens": len(prompts), "prefill_tokens": n, "prefill_tok_per_s": n / seconds}
    return trial


def run(ctx: SuiteContext) -> dict[str, Any]:
    system = ctx.pool.get("radixlm")
    cfg = system.engine.model_config
    vocab = system.engine.tokenizer.vocab_size
    batches = (1, 16) if ctx.quick else BATCHES
    prompt_len, extra = 32, ctx.scale(32, 8)
    prefill_len = ctx.scale(256, 32)
    weight_bytes = _weight_bytes(ctx.model_path)
    trials: dict[str, Any] = {}
    meta: dict[str, tuple[str, int, int]] = {}  # config -> (kind, batch, weight bytes streamed per step)
    for b in batches:
        trials[f"decode-b{b}"] = decode_trial(system, random_prompts(vocab, b, prompt_len, seed=b), extra)
        trials[f"prefill-b{b}"] = prefill_trial(system, random_prompts(vocab, b, prefill_len, seed=100 + b))
        meta[f"decode-b{b}"], meta[f"prefill-b{b}"] = ("decode", b, weight_bytes), ("prefill", b, weight_bytes)
    ready, _ = ctx.pick(LLAMACPP)
    for name, peer in ready.items():
        trials[f"{name}-decode-b1"] = llamacpp_decode_trial(peer, random_prompts(vocab, 1, prompt_len, seed=1), extra)
        meta[f"{name}-decode-b1"] = ("decode", 1, peer.gguf_path.stat().st_size)
    ctx.log(f"raw: batches {batches}, decode {extra} tokens, prefill {prefill_len} tokens; measuring roofline")
    limits = roofline.measure(quick=ctx.quick)
    ctx.log(f"  roofline: {limits}")
    warm = {"decode-b1": decode_trial(system, random_prompts(vocab, 1, 8), 2),
            **{n: llamacpp_decode_trial(p, random_prompts(vocab, 1, 8), 2) for n, p in ready.items()}}
    runs = alternate(trials, ctx.reps, warmups=warm, log=ctx.log)
    params = weight_bytes / 4 if cfg.torch_dtype == "float32" else weight_bytes / 2
    kv_token = cfg.num_layers * 2 * cfg.num_kv_heads * cfg.head_dim * 4
    flops = limits["matmul_gflop_per_s"] * 1e9
    bandwidth = limits["read_gb_per_s"] * 1e9
    rows: dict[str, Any] = {}
    for name, reps in runs.items():
        kind, b, weights = meta[name]
        key = f"{kind}_tok_per_s"
        measured = sorted(r[key] for r in reps)[len(reps) // 2]
        row = {"status": "ok", "runs": reps, "median": {key: measured}, "batch": b, "kind": kind}
        if kind == "decode":
            step_bytes = weights + b * (prompt_len + extra / 2) * kv_token
            roof = min(b * bandwidth / step_bytes, flops / (2 * params))
            row["streamed_gb_per_s"] = step_bytes * measured / b / 1e9  # bytes per step x steps per second
        else:
            roof = flops / (2 * params)
        rows[name] = {**row, "roofline_tok_per_s": roof, "roofline_fraction": measured / roof}
    b64 = rows.get("decode-b64", {}).get("roofline_fraction")
    return {"workload": {"batches": list(batches), "decode_prompt_len": prompt_len, "decode_extra_tokens": extra,
                         "prefill_len": prefill_len},
            "machine": limits, "model": {"weight_bytes": weight_bytes, "params": params,
                                         "kv_bytes_per_token": kv_token},
            "metric": "roofline_fraction", "systems": rows,
            "targets": [target("decode batch 64 fraction of roofline", b64, 0.5, unit=""), *_peer_targets(rows)]}


def _peer_targets(rows: dict[str, Any]) -> list[dict[str, Any]]:
    """Issue 18's batch-1 decode target against llama.cpp float32, when llama.cpp was measured."""
    ours, peer = rows.get("decode-b1"), rows.get("llama.cpp-decode-b1")
    if ours is None or peer is None:
        return []
    ratio = ours["median"]["decode_tok_per_s"] / peer["median"]["decode_tok_per_s"]
    return [target("decode batch 1 tok/s radixlm / llama.cpp float32", ratio, 0.9)]
