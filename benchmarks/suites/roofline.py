"""The machine's limits, measured in the same run as the suites: memory bandwidth and matmul FLOP/s.

Bandwidth is the best of several full reads (``sum``) of a buffer far larger than the caches, the
access pattern of a decode step that streams every weight once; matmul FLOP/s is the best of
several square float32 ``mm`` calls. Both use torch's default thread count, like the engine.
"""

from __future__ import annotations

import time
from typing import Any

import torch


def _best_seconds(fn: Any, repeats: int) -> float:
    fn()  # first touch / warm-up
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def memory_bandwidth(device: str = "cpu", mbytes: int = 512, repeats: int = 5) -> dict[str, float]:
    """Read and copy bandwidth in GB/s over a ``mbytes`` MB float32 buffer."""
    x = torch.ones(mbytes * 2**20 // 4, dtype=torch.float32, device=device)
    y = torch.empty_like(x)
    sync = torch.cuda.synchronize if x.is_cuda else (lambda: None)
    read_s = _best_seconds(lambda: (x.sum(), sync()), repeats)
    copy_s = _best_seconds(lambda: (y.copy_(x), sync()), repeats)
    nbytes = x.numel() * 4
    return {"read_gb_per_s": nbytes / read_s / 1e9, "copy_gb_per_s": 2 * nbytes / copy_s / 1e9,
            "buffer_mb": mbytes}


def matmul_flops(device: str = "cpu", n: int = 2048, repeats: int = 5) -> dict[str, float]:
    """float32 matmul throughput in GFLOP/s for an ``n`` x ``n`` by ``n`` x ``n`` product."""
    a = torch.randn(n, n, device=device)
    b = torch.randn(n, n, device=device)
    sync = torch.cuda.synchronize if a.is_cuda else (lambda: None)
    seconds = _best_seconds(lambda: (torch.mm(a, b), sync()), repeats)
    return {"matmul_gflop_per_s": 2 * n**3 / seconds / 1e9, "n": n}


def measure(device: str = "cpu", quick: bool = False) -> dict[str, Any]:
    """Both limits plus the thread count they were measured with."""
    return {**memory_bandwidth(device, 128 if quick else 512), **matmul_flops(device, 1024 if quick else 2048),
            "torch_threads": torch.get_num_threads(), "device": device}
