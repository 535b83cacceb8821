"""The int8 matmul paths on the CPU, per linear shape of the checkpoint, activation dtype and batch size.

Paths timed for ``y = x @ W.T`` (``W`` is ``[out, in]``):

* ``float`` — ``F.linear`` on the float weight in the activations' dtype (the unquantized baseline);
* ``int8pack`` — ``torch.ops.aten._weight_int8pack_mm(x, q, scale)`` (torch's int8 weight-only kernel);
* ``dequant`` — ``F.linear(x.float(), q.float()) * scale`` (dequantize inside the call, float32);
* ``radixlm`` — ``quantization.int8_linear``: what ``Int8Linear`` runs for that case (for float32
  activations of at most 64 rows: the native int8 GEMV, ``kernels/csrc/gemv_int8.c``).

Each figure is the fastest of repeated calls (at least 3, about 0.2 s in all; one call after the
warm-up when a call takes longer than that) in microseconds: on a shared machine the minimum is the
uncontended cost (``timeit``'s advice).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

PATHS = ("float", "int8pack", "dequant", "radixlm")


def linear_shapes(cfg: Any) -> dict[str, tuple[int, int]]:
    """name -> (out, in) of the decoder's fused linears and the LM head."""
    h, q, kv = cfg.hidden_size, cfg.num_heads * cfg.head_dim, cfg.num_kv_heads * cfg.head_dim
    return {"qkv_proj": (q + 2 * kv, h), "o_proj": (h, q), "gate_up_proj": (2 * cfg.intermediate_size, h),
            "down_proj": (h, cfg.intermediate_size), "lm_head": (cfg.vocab_size, h)}


def _time_us(fn: Callable[[], Any], budget_s: float = 0.2) -> float:
    t0 = time.perf_counter()
    fn()  # warm-up (allocator, first-call dispatch)
    first = time.perf_counter() - t0
    if first > budget_s:  # a slow path (a scalar kernel at batch 64): one more call is the figure
        t0 = time.perf_counter()
        fn()
        return (time.perf_counter() - t0) * 1e6
    times: list[float] = []
    start = time.perf_counter()
    while len(times) < 3 or (time.perf_counter() - start < budget_s and len(times) < 50):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times) * 1e6


def _case(out_f: int, in_f: int, m: int, dtype: torch.dtype) -> dict[str, float]:
    from radixlm.runtime.model.quantization import int8_linear, quantize_int8

    g = torch.Generator().manual_seed(out_f + in_f + m)
    w = torch.randn(out_f, in_f, generator=g)
    q, scale = quantize_int8(w)
    w_act, scale_act = w.to(dtype), scale.to(dtype)
    x = torch.randn(m, in_f, generator=g).to(dtype)
    fns = {"float": lambda: F.linear(x, w_act),
           "int8pack": lambda: torch.ops.aten._weight_int8pack_mm(x, q, scale_act),
           "dequant": lambda: (F.linear(x.float(), q.float()) * scale).to(dtype),
           "radixlm": lambda: int8_linear(x, q, scale, None, "torch", scale_act)}
    return {name: _time_us(fn) for name, fn in fns.items()}


def measure(cfg: Any, batches: tuple[int, ...], dtypes: tuple[torch.dtype, ...],
            log: Callable[[str], None] = print) -> list[dict[str, Any]]:
    """One row per (dtype, batch, shape): microseconds per path."""
    rows = []
    for dtype in dtypes:
        for m in batches:
            for name, (out_f, in_f) in linear_shapes(cfg).items():
                us = _case(out_f, in_f, m, dtype)
                rows.append({"dtype": str(dtype).removeprefix("torch."), "batch": m, "linear": name,
                             "shape": [out_f, in_f], "us": us})
                log(f"  matmul {rows[-1]['dtype']:<8} b{m:<3} {name:<12} "
                    + " ".join(f"{p}={us[p]:,.0f}us" for p in PATHS))
    return rows


def markdown(rows: list[dict[str, Any]]) -> list[str]:
    """The table: microseconds per path, the fastest int8 path starred, per (dtype, batch)."""
    lines = ["| dtype | batch | linear [out, in] | float F.linear | int8pack_mm | dequant + F.linear "
             "| radixlm int8_linear |", "|---|---:|---|---:|---:|---:|---:|"]
    for r in rows:
        us = r["us"]
        best = min(("int8pack", "dequant"), key=lambda p: us[p])
        cells = [f"**{us[p]:,.0f}**" if p == best else f"{us[p]:,.0f}" for p in ("int8pack", "dequant")]
        lines.append(f"| {r['dtype']} | {r['batch']} | {r['linear']} {r['shape']} | {us['float']:,.0f} "
                     f"| {cells[0]} | {cells[1]} | {us['radixlm']:,.0f} |")
    return lines
