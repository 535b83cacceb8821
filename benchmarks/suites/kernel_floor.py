"""The agent workload's time with every part at the best rate measured for its own shapes.

The FLOP floor (``flop_floor.py``) runs all of the arithmetic at one rate, that of a large square
matmul, the most favourable shape there is. The workload's parts have other shapes, and on a CPU
not all of them reach that rate:

* the prefill's projections have thousands of rows and run as large matmuls;
* decode's projections and the LM head have one row per request (64 here);
* attention at head_dim 64 pays for one ``exp`` per (query, key) pair next to 128 multiply-adds.

This module times, in the run, the fastest implementation we have of each part at the workload's
own shapes: MKL's sgemm through ``F.linear``, torch's flash-attention kernel, and radixlm's
native kernels (``radixlm.kernels.cpu_native``) where they apply. Each part's FLOPs (from
``flop_floor.workload_flops``) over its best rate gives ``kernel_seconds``: the time of an engine
that ran every part at the best measured rate and spent nothing else. A peer's time over it is
the largest speed-up such an engine could show (``bound``). Suffix-only attention (each prompt's
own keys) runs at the prefix rate, an optimistic choice: it is a small part and runs slower. The
suite measures the rates before and after its repetitions and keeps each part's best.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from radixlm.kernels import cpu_native

from suites.parallel_plan import common_prefix_len

PARTS = ("linear_prefill", "linear_decode", "lm_head", "attention_prefill", "attention_decode")
MAX_PREFILL_ROWS = 4096  # prefill rows timed at most (MKL's rate is flat long before)


def _best(fn: Callable[[], Any], repeats: int) -> float:
    fn()  # warm-up (first touch, the native library's load)
    best = math.inf
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def _projections(cfg: Any) -> list[tuple[str, int, int]]:
    """(name, N, K) of one decoder layer's products; gate and up as one fused [2I, K] weight."""
    h, d = cfg.hidden_size, cfg.head_dim
    return [("qkv", (cfg.num_heads + 2 * cfg.num_kv_heads) * d, h), ("o", h, cfg.num_heads * d),
            ("gate_up", 2 * cfg.intermediate_size, h), ("down", h, cfg.intermediate_size)]


def _linear_rate(shapes: list[tuple[str, int, int]], rows: int, repeats: int) -> dict[str, Any]:
    """GFLOP/s over one layer's products at ``rows`` rows, each product by its fastest path."""
    flops = seconds = 0.0
    paths = {}
    for name, n, k in shapes:
        x, w = torch.randn(rows, k), torch.full((n, k), 0.01)
        candidates = {"mkl": lambda x=x, w=w: F.linear(x, w)}
        if cpu_native.available() and rows <= 128:
            candidates["native"] = lambda x=x, w=w: cpu_native.linear(x, w)
        timed = {p: _best(f, repeats) for p, f in candidates.items()}
        paths[name] = min(timed, key=timed.get)
        flops += 2.0 * rows * n * k
        seconds += timed[paths[name]]
    return {"gflop_per_s": flops / seconds / 1e9, "paths": paths}


def _prefix_attention_rate(cfg: Any, queries: int, prefix: int, repeats: int) -> dict[str, Any]:
    """GFLOP/s of ``queries`` query rows (all heads) attending to ``prefix`` shared keys, one call per
    layer as the engine makes it: torch's flash kernel over the cascade's layout, or the native
    cascade kernel (each query also sees one key of its own, itself), whichever is faster."""
    kvh, heads, d = cfg.num_kv_heads, cfg.num_heads, cfg.head_dim
    q = torch.randn(1, kvh, queries * (heads // kvh), d)
    k, v = torch.randn(1, kvh, prefix, d), torch.randn(1, kvh, prefix, d)
    candidates = {"flash": lambda: F.scaled_dot_product_attention(q, k, v, scale=d ** -0.5)}
    if cpu_native.available() and cpu_native.decode_attention_ok(heads, kvh, d):
        k_pool, v_pool = torch.randn(prefix + queries, kvh, d), torch.randn(prefix + queries, kvh, d)
        indices = torch.arange(prefix + queries)
        own = torch.arange(prefix, prefix + queries)
        rows = torch.randn(queries, heads, d)
        candidates["native"] = lambda: cpu_native.cascade_attention(rows, k_pool, v_pool, indices[:prefix], own,
                                                                    own + 1, indices, d ** -0.5)
    timed = {p: _best(f, repeats) for p, f in candidates.items()}
    path = min(timed, key=timed.get)
    return {"gflop_per_s": 4.0 * heads * queries * prefix * d / timed[path] / 1e9, "path": path}


def _decode_attention_rate(cfg: Any, requests: int, prefix: int, own: int, repeats: int) -> dict[str, Any]:
    """GFLOP/s of one decode step's attention: ``requests`` queries over a shared ``prefix`` and
    ``own`` keys each, by the native cascade kernel or torch's flash kernel, whichever is faster
    (flash over K/V already gathered per request, which the engine would have to pay for)."""
    kvh, heads, d = cfg.num_kv_heads, cfg.num_heads, cfg.head_dim
    ctx = prefix + own
    slots = prefix + requests * own
    k_pool, v_pool = torch.randn(slots, kvh, d), torch.randn(slots, kvh, d)
    own_slots = torch.arange(prefix, slots).view(requests, own)
    indices = torch.cat([torch.cat([torch.arange(prefix), own_slots[r]]) for r in range(requests)])
    indptr = torch.arange(0, (requests + 1) * ctx, ctx)
    q = torch.randn(requests, heads, d)
    qf = q.view(requests, kvh, heads // kvh, d)  # head h reads KV head h // group
    kf = k_pool[indices].view(requests, ctx, kvh, d).transpose(1, 2)
    vf = v_pool[indices].view(requests, ctx, kvh, d).transpose(1, 2)
    candidates = {"flash": lambda: F.scaled_dot_product_attention(qf, kf, vf, scale=d ** -0.5)}
    if cpu_native.available() and cpu_native.decode_attention_ok(heads, kvh, d):
        candidates["native"] = lambda: cpu_native.decode_attention(q, k_pool, v_pool, indptr, indices, d ** -0.5,
                                                                   shared_prefix_len=prefix)
    timed = {p: _best(f, repeats) for p, f in candidates.items()}
    path = min(timed, key=timed.get)
    return {"gflop_per_s": 4.0 * heads * requests * ctx * d / timed[path] / 1e9, "path": path}


def rates(cfg: Any, requests: int, prefix: int, suffix: int, new_tokens: int, repeats: int = 3) -> dict[str, Any]:
    """The best measured rate (GFLOP/s) of each part of the workload, at its own shapes: ``requests``
    prompts sharing ``prefix`` tokens, each with ``suffix`` tokens of its own, decoding ``new_tokens``."""
    shapes = _projections(cfg)
    rows = max(min(requests * suffix, MAX_PREFILL_ROWS), 1)  # one prefill step of every prompt's own tokens
    prefill = _linear_rate(shapes, rows, repeats)
    decode = _linear_rate(shapes, requests, repeats)
    head = _linear_rate([("lm_head", cfg.vocab_size, cfg.hidden_size)], requests, repeats)
    attn_decode = _decode_attention_rate(cfg, requests, prefix, max(suffix + new_tokens // 2, 1), 3 * repeats)
    attn_prefill = _prefix_attention_rate(cfg, rows, max(prefix, 1), repeats)
    return {"linear_prefill": prefill["gflop_per_s"], "linear_decode": decode["gflop_per_s"],
            "lm_head": head["gflop_per_s"], "attention_prefill": attn_prefill["gflop_per_s"],
            "attention_decode": attn_decode["gflop_per_s"],
            "paths": {"linear_decode": decode["paths"], "lm_head": head["paths"]["lm_head"],
                      "attention_prefill": attn_prefill["path"], "attention_decode": attn_decode["path"]}}


def workload_rates(cfg: Any, prompts: list[list[int]], new_tokens: int, quick: bool = False) -> dict[str, Any]:
    """``rates`` at the shapes of ``prompts`` (their shared prefix, their mean own length)."""
    prefix = common_prefix_len(prompts)
    suffix = round(sum(len(p) - prefix for p in prompts) / len(prompts))
    return rates(cfg, len(prompts), prefix, suffix, new_tokens, repeats=1 if quick else 3)


def best_of(*measured: dict[str, Any]) -> dict[str, Any]:
    """Each part's highest rate over several measurements (a busy machine only lowers a rate)."""
    best = {p: max(m[p] for m in measured) for p in PARTS}
    return {**best, "paths": measured[-1]["paths"]}


def bound(flops: dict[str, float], part_rates: dict[str, Any], systems: dict[str, Any]) -> dict[str, Any]:
    """``kernel_seconds`` (each part's GFLOP over its rate) and, per system, its seconds over it:
    the largest speed-up an engine running every part at the best measured rate could show."""
    part_seconds = {p: flops[f"{p}_gflop"] / part_rates[p] for p in PARTS}
    total = sum(part_seconds.values())
    out: dict[str, Any] = {"kernel_seconds": total, "part_seconds": part_seconds,
                           "rates_gflop_per_s": part_rates, "systems": {}}
    for name, s in systems.items():
        seconds = s.get("median", {}).get("seconds") if s.get("status") == "ok" else None
        if seconds:
            out["systems"][name] = {"seconds": seconds, "bound": seconds / total}
    return out
