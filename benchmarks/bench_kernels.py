"""Kernel throughput, side by side in one run.

On CUDA: the Triton kernels against (a) torch SDPA over K/V already laid out densely (the
no-gather ideal: what attention costs when the cache is one contiguous tensor per request) and
(b) the pure-torch paged path (gather by slot index, then attention: ``kernels/torch_ops.py``).
On the CPU: the fast torch ops against the loop-per-request references.

    python3 benchmarks/bench_kernels.py                  # CUDA if present, else CPU
    python3 benchmarks/bench_kernels.py --device cpu --json results/kernels.json
    python3 benchmarks/bench_kernels.py --compile-only   # compile the Triton kernels for sm_90 (no GPU needed)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F
from radixlm.kernels import get_ops
from radixlm.kernels.attention_ref import decode_attention_ref, extend_attention_ref
from radixlm.kernels.testing.random_batch import PagedBatch, random_paged_batch

LAYOUT = (32, 8, 128)  # Llama-3-8B: heads, kv heads, head_dim


def timeit(fn: Callable[[], object], device: torch.device, min_time: float = 0.2) -> float:
    """Median seconds per call (after warm-up)."""
    fn()
    times = []
    deadline = time.perf_counter() + min_time
    while len(times) < 5 or (time.perf_counter() < deadline and len(times) < 200):
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
        else:
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


def dense_sdpa(b: PagedBatch, kv_lens: list[int], q_lens: list[int]) -> Callable[[], object]:
    """SDPA over per-request contiguous K/V (gathered once, outside the timed call)."""
    kv = torch.tensor(kv_lens)
    starts = torch.cat([torch.zeros(1, dtype=torch.long), kv.cumsum(0)[:-1]]).tolist()
    qo = b.qo_indptr.tolist()
    reqs = []
    for i, (s, n) in enumerate(zip(starts, kv_lens)):
        idx = b.kv_indices[s:s + n].long()
        k = b.k_pool[idx].transpose(0, 1).unsqueeze(0).contiguous()  # [1, kv_heads, n, D]
        v = b.v_pool[idx].transpose(0, 1).unsqueeze(0).contiguous()
        q = b.q[qo[i]:qo[i + 1]].transpose(0, 1).unsqueeze(0).contiguous()  # [1, H, q_len, D]
        mask = None
        if q_lens[i] > 1:  # causal aligned to the end
            mask = (torch.arange(n, device=q.device)[None, :]
                    <= torch.arange(q_lens[i], device=q.device)[:, None] + (n - q_lens[i]))
        reqs.append((q, k, v, mask))
    if all(n == kv_lens[0] for n in kv_lens) and all(m == 1 for m in q_lens):  # batched decode
        q = torch.cat([r[0] for r in reqs])
        k, v = torch.cat([r[1] for r in reqs]), torch.cat([r[2] for r in reqs])
        return lambda: F.scaled_dot_product_attention(q, k, v, scale=b.sm_scale, enable_gqa=True)
    return lambda: [F.scaled_dot_product_attention(q, k, v, attn_mask=m, scale=b.sm_scale, enable_gqa=True)
                    for q, k, v, m in reqs]


def attention_rows(device: torch.device, dtype: torch.dtype, quick: bool) -> list[dict]:
    heads, kv_heads, head_dim = LAYOUT if device.type == "cuda" else (8, 4, 64)
    if device.type == "cuda":
        decode = [(1, 4096), (16, 4096), (64, 2048), (256, 1024), (8, 32768)]
        extend = [(1, 0, 4096), (4, 2048, 512), (16, 512, 128), (32, 0, 256)]
    else:
        decode = [(1, 512), (16, 512), (64, 256)]
        extend = [(1, 0, 256), (4, 256, 64), (16, 64, 16)]
    if quick:
        decode, extend = decode[:2], extend[:2]
    rows = []
    ops_torch = get_ops("torch")
    ops_fast = get_ops("triton") if device.type == "cuda" else None
    for bs, ctx in decode:
        b = random_paged_batch([ctx - 1] * bs, [1] * bs, heads, kv_heads, head_dim, dtype, device)
        cand = {"torch_paged": lambda b=b: ops_torch.decode_attention(*b.decode_args())}
        if ops_fast:
            cand["triton"] = lambda b=b: ops_fast.decode_attention(*b.decode_args())
            cand["sdpa_dense"] = dense_sdpa(b, [ctx] * bs, [1] * bs)
        else:
            cand["reference"] = lambda b=b: decode_attention_ref(*b.decode_args())
        kv_bytes = 2 * bs * ctx * kv_heads * head_dim * b.k_pool.element_size()
        rows.append(_row("decode", f"bs={bs} ctx={ctx}", cand, device, kv_bytes))
    for bs, prefix, ext in extend:
        b = random_paged_batch([prefix] * bs, [ext] * bs, heads, kv_heads, head_dim, dtype, device)
        cand = {"torch_paged": lambda b=b: ops_torch.extend_attention(*b.extend_args())}
        if ops_fast:
            cand["triton"] = lambda b=b, m=ext: ops_fast.extend_attention(*b.extend_args(), max_q_len=m)
            cand["sdpa_dense"] = dense_sdpa(b, [prefix + ext] * bs, [ext] * bs)
        else:
            cand["reference"] = lambda b=b: extend_attention_ref(*b.extend_args())
        rows.append(_row("extend", f"bs={bs} prefix={prefix} new={ext}", cand, device, None))
    return rows


def _row(op: str, size: str, cand: dict[str, Callable[[], object]], device: torch.device,
         kv_bytes: int | None) -> dict:
    times = {name: timeit(fn, device) for name, fn in cand.items()}
    fast = "triton" if "triton" in times else "torch_paged"
    base = times[fast]
    row = {"op": op, "size": size, "fast": fast, "us": {k: round(v * 1e6, 1) for k, v in times.items()},
           "speedup_vs": {k: round(v / base, 2) for k, v in times.items() if k != fast}}
    if kv_bytes is not None:
        row["kv_GBps"] = round(kv_bytes / base / 1e9, 1)
    return row


def misc_rows(device: torch.device, dtype: torch.dtype) -> list[dict]:
    rows = []
    ops_torch = get_ops("torch")
    ops_fast = get_ops("triton") if device.type == "cuda" else None
    n, kv_heads, head_dim = (4096, 8, 128) if device.type == "cuda" else (512, 4, 64)
    pool = [torch.zeros(8 * n, kv_heads, head_dim, dtype=dtype, device=device) for _ in range(2)]
    k = torch.randn(n, kv_heads, head_dim, device=device, dtype=dtype)
    loc = torch.randperm(8 * n - 1, device=device)[:n] + 1
    cand = {"torch_paged": lambda: ops_torch.store_kv(pool[0], pool[1], loc, k, k)}
    if ops_fast:
        cand["triton"] = lambda: ops_fast.store_kv(pool[0], pool[1], loc, k, k)
    rows.append(_row("store_kv", f"tokens={n}", cand, device, None))
    vocab = 128256
    logits = torch.randn(64, vocab, device=device)
    mask = torch.randint(-2 ** 31, 2 ** 31 - 1, (64, (vocab + 31) // 32), dtype=torch.int32, device=device)
    cand = {"torch_paged": lambda: ops_torch.apply_token_bitmask(logits, mask)}
    if ops_fast:
        cand["triton"] = lambda: ops_fast.apply_token_bitmask(logits, mask)
    rows.append(_row("bitmask", f"bs=64 vocab={vocab}", cand, device, None))
    return rows


def compile_only() -> None:
    """Compile every Triton kernel for sm_90 with triton's bundled ptxas; no GPU needed."""
    if os.environ.get("TRITON_INTERPRET"):
        sys.exit("unset TRITON_INTERPRET for --compile-only")
    import triton
    from radixlm.kernels.decode_attention import _decode_stage1, _decode_stage2
    from radixlm.kernels.extend_attention import _extend_kernel
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    ptrs = {"Q", "K", "V", "Out", "Mid_O", "Mid_LSE", "qo_indptr", "kv_indptr", "kv_indices"}
    for fn, consts in [
        (_extend_kernel, dict(GROUP=4, GROUP_P=4, HEAD_DIM=128, BLOCK_D=128, BLOCK_T=16, BLOCK_N=64,
                              PRECISION="tf32", DOT_F32=False)),
        (_decode_stage1, dict(GROUP=4, BLOCK_H=16, HEAD_DIM=128, BLOCK_D=128, BLOCK_N=64, SINGLE_SPLIT=False,
                              PRECISION="tf32", DOT_F32=False)),
        (_decode_stage2, dict(GROUP=4, BLOCK_G=4, HEAD_DIM=128, BLOCK_D=128, BLOCK_S=8)),
    ]:
        sig = {}
        for name in fn.arg_names:
            if name in consts:
                sig[name] = "constexpr"
            elif name in ptrs:
                sig[name] = "*fp32" if name.startswith("Mid") else "*i32" if "ind" in name else "*bf16"
            else:
                sig[name] = "fp32" if name == "sm_scale" else "i32"
        start = time.perf_counter()
        kernel = triton.compile(ASTSource(fn, sig, constexprs=consts), target=GPUTarget("cuda", 90, 32))
        print(f"{fn.__name__}: compiled for sm_90 in {time.perf_counter() - start:.1f}s, "
              f"shared memory {kernel.metadata.shared} B")


def print_table(rows: list[dict]) -> None:
    print(f"{'op':9} {'size':28} {'times (us)':58} speedup of the fast path")
    for r in rows:
        times = "  ".join(f"{k}={v}" for k, v in r["us"].items())
        extra = f"  [{r['kv_GBps']} GB/s KV]" if "kv_GBps" in r else ""
        speed = "  ".join(f"vs {k}: {v}x" for k, v in r["speedup_vs"].items())
        print(f"{r['op']:9} {r['size']:28} {times:58} {speed}{extra}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dtype", default=None, help="bfloat16 on CUDA, float32 on CPU by default")
    parser.add_argument("--quick", action="store_true", help="two sizes per op")
    parser.add_argument("--json", default=None, help="also write the rows to this file")
    parser.add_argument("--threads", type=int, default=1, help="CPU threads for torch (default 1: stable timings)")
    parser.add_argument("--compile-only", action="store_true")
    args = parser.parse_args()
    if args.compile_only:
        compile_only()
        return
    device = torch.device(args.device)
    torch.set_num_threads(args.threads)
    dtype = getattr(torch, args.dtype or ("bfloat16" if device.type == "cuda" else "float32"))
    with torch.inference_mode():
        rows = attention_rows(device, dtype, args.quick) + misc_rows(device, dtype)
    print(f"device={device} dtype={dtype} threads={args.threads} layout(heads, kv_heads, head_dim)="
          f"{LAYOUT if device.type == 'cuda' else (8, 4, 64)}")
    print_table(rows)
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump({"device": str(device), "dtype": str(dtype), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
