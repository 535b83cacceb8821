"""GGUF block matmul (``kernels/gguf_blocks``) throughput per type, beside float32 torch and the int8 kernel.

For each weight shape (Qwen2.5-0.5B's by default: 896x896, 4864x896, 896x4864, 151936x896) and type,
``block_linear`` at batch 1 (decode) and 512 (prefill) on random weights, against ``x @ W.T`` in
float32 torch (MKL) and the native int8 kernel (``cpu_native.linear_int8``). ``--real FILE`` times
one pass over every 2-D tensor of a GGUF file at its own type instead (what one decode step or one
512-token prefill spends in matmuls; the lm_head at one row), ``--llamacpp`` beside llama.cpp's
whole eval of as many tokens on the same file (llama-cpp-python), interleaved round by round. Each figure names the ISA path it used.

    python3 benchmarks/bench_gguf_matmul.py --types Q5_0 Q4_K --batches 1 512 --threads 2
    python3 benchmarks/bench_gguf_matmul.py --real ~/.cache/radixlm/real-gguf/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf \
        --llamacpp --threads 2 --clock cpu
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable

import numpy as np
import torch
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, GGUFReader
from radixlm.kernels import cpu_native, gguf_blocks_native
from radixlm.kernels.gguf_blocks import BlockWeight, block_linear

SHAPES = ((896, 896), (4864, 896), (896, 4864), (151936, 896))
TYPES = ("F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q4_K", "Q5_K", "Q6_K")
SCALE_OFFSETS = {"Q4_K": (0, 2), "Q5_K": (0, 2), "Q6_K": (208,)}  # fp16 d / dmin fields of a K block


CLOCK = {"wall": time.perf_counter, "cpu": time.process_time}
_clock = time.perf_counter


def timeit(fn: Callable[[], object], min_time: float) -> float:
    """Median seconds per call after one warm-up call (``--clock cpu``: the process's CPU seconds, all
    threads together: steadier than wall time on a shared machine, and at 1 thread the same measure)."""
    fn()
    times: list[float] = []
    deadline = time.perf_counter() + min_time
    while len(times) < 3 or (time.perf_counter() < deadline and len(times) < 50):
        t0 = _clock()
        fn()
        times.append(_clock() - t0)
    return statistics.median(times)


def random_weight(name: str, n: int, k: int, rng: np.random.Generator) -> BlockWeight:
    """Random blocks of type ``name`` with finite scales (the byte pattern does not change the speed)."""
    qtype = GGMLQuantizationType[name]
    block, size = GGML_QUANT_SIZES[qtype]
    raw = rng.integers(0, 256, (n, k // block, size), dtype=np.uint8)
    if name in ("F16", "BF16"):
        raw = rng.standard_normal((n, k), dtype=np.float32)
        raw = raw.astype(np.float16) if name == "F16" else (raw.view(np.uint32) >> 16).astype(np.uint16)
    else:
        for off in (0,) if name not in SCALE_OFFSETS else SCALE_OFFSETS[name]:
            raw[..., off:off + 2] = np.full(raw.shape[:2], 0.01, np.float16).view(np.uint8).reshape(*raw.shape[:2], 2)
    return BlockWeight(int(qtype), torch.from_numpy(raw.view(np.uint8).reshape(n, -1).copy()), (n, k))


def bench_shapes(args: argparse.Namespace) -> list[dict]:
    rng, rows = np.random.default_rng(0), []
    for n, k in args.shapes:
        w32 = torch.randn(n, k)
        q8, scale = torch.randint(-127, 128, (n, k), dtype=torch.int8), torch.rand(n)
        for m in args.batches:
            x = torch.randn(m, k)
            flops = 2.0 * m * n * k
            base = {"shape": f"{n}x{k}", "batch": m}
            t = timeit(lambda x=x, w32=w32: x @ w32.T, args.min_time)
            rows.append({**base, "type": "F32 torch", "isa": "mkl", "ms": 1e3 * t})
            if cpu_native.available():
                t = timeit(lambda x=x, q8=q8, scale=scale: cpu_native.linear_int8(x, q8, scale), args.min_time)
                rows.append({**base, "type": "int8 native", "isa": "avx2", "ms": 1e3 * t})
            for name in args.types:
                if k % GGML_QUANT_SIZES[GGMLQuantizationType[name]][0]:
                    continue  # K-quants need whole 256-blocks (llama.cpp falls back to Q5_0/Q8_0 there)
                w = random_weight(name, n, k, rng)
                rows.append({**base, "type": name, "isa": gguf_blocks_native.isa(),
                             "ms": 1e3 * timeit(lambda w=w, x=x: block_linear(x, w), args.min_time)})
            for r in rows:
                if r["shape"] == base["shape"] and r["batch"] == m:
                    r["gflops"] = flops / (r["ms"] * 1e6)
            print_rows([r for r in rows if r["shape"] == base["shape"] and r["batch"] == m])
    return rows


def real_weights(path: str) -> list[BlockWeight]:
    """Every 2-D weight a forward pass multiplies by (the lm_head last: ``output``, else ``token_embd``)."""
    tensors = GGUFReader(path).tensors
    head = [t for t in tensors if t.name == "output.weight"] or [t for t in tensors if t.name == "token_embd.weight"]
    body = [t for t in tensors if len(t.shape) == 2 and t.name not in ("output.weight", "token_embd.weight")]
    out = []
    for t in body + head:
        k, n = (int(d) for d in t.shape)
        out.append(BlockWeight(int(t.tensor_type), torch.from_numpy(np.array(t.data).view(np.uint8).reshape(n, -1)),
                               (n, k)))
    return out


def matmuls_once(weights: list[BlockWeight], m: int) -> float:
    """Seconds (``--clock``) of one pass over the weights at ``m`` rows; the lm_head at 1 row (the
    last token's logits, as an engine's prefill computes)."""
    xs = {w.shape[1]: torch.randn(m, w.shape[1]) for w in weights}
    t0 = _clock()
    for w in weights[:-1]:
        block_linear(xs[w.shape[1]], w)
    block_linear(xs[weights[-1].shape[1]][-1:], weights[-1])
    return _clock() - t0


def llamacpp_once(llm: object, m: int) -> float:
    """Seconds (``--clock``) of llama.cpp evaluating ``m`` new tokens after a 16-token context."""
    llm.reset()
    llm.eval([100 + i for i in range(16)])
    t0 = _clock()
    llm.eval([1000 + (i * 7919) % 30000 for i in range(m)])
    return _clock() - t0


def bench_real(args: argparse.Namespace) -> list[dict]:
    weights, rows = real_weights(args.real), []
    llm = None
    if args.llamacpp:
        from llama_cpp import Llama

        llm = Llama(model_path=args.real, n_threads=args.threads, n_threads_batch=args.threads, n_ctx=1024,
                    n_batch=512, n_ubatch=512, verbose=False)
    for m in args.batches:
        ours, theirs = [], []
        for _ in range(args.rounds):  # interleaved, so both see the same machine load
            ours.append(matmuls_once(weights, m))
            if llm is not None:
                theirs.append(llamacpp_once(llm, m))
        row = {"file": args.real, "batch": m, "isa": gguf_blocks_native.isa(), "matmuls": len(weights),
               "radixlm_matmul_ms": 1e3 * statistics.median(ours)}
        if theirs:
            row["llamacpp_eval_ms"] = 1e3 * statistics.median(theirs)
        rows.append(row)
        print(f"batch {m:4d} [{row['isa']}]: {len(weights)} matmuls {row['radixlm_matmul_ms']:8.1f} ms"
              + (f"   llama.cpp whole eval {row['llamacpp_eval_ms']:8.1f} ms" if theirs else ""))
    return rows


def print_rows(rows: list[dict]) -> None:
    for r in rows:
        print(f"{r['shape']:>11} M={r['batch']:<4d} {r['type']:<12} [{r['isa']:>6}] {r['ms']:9.3f} ms "
              f"{r['gflops']:8.1f} GFLOP/s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--types", nargs="+", default=list(TYPES), choices=TYPES)
    parser.add_argument("--batches", nargs="+", type=int, default=[1, 512])
    parser.add_argument("--shapes", nargs="+", default=[f"{n}x{k}" for n, k in SHAPES])
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--isa", choices=sorted(gguf_blocks_native.ISAS), help="force an ISA path")
    parser.add_argument("--min-time", type=float, default=0.5, help="seconds of calls per figure (median)")
    parser.add_argument("--real", help="time every 2-D tensor of this GGUF file instead")
    parser.add_argument("--clock", choices=sorted(CLOCK), default="wall")
    parser.add_argument("--llamacpp", action="store_true", help="with --real: llama.cpp's eval, interleaved")
    parser.add_argument("--rounds", type=int, default=5, help="with --real: passes per figure (median)")
    parser.add_argument("--json", help="write the rows here")
    args = parser.parse_args()
    args.shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes]
    torch.set_num_threads(args.threads)
    global _clock
    _clock = CLOCK[args.clock]
    if not gguf_blocks_native.available():
        raise SystemExit("the native kernels are unavailable here (see kernels/cpu_native.py)")
    with gguf_blocks_native.forced_isa(args.isa or gguf_blocks_native.isa()):
        rows = bench_real(args) if args.real else bench_shapes(args)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"threads": args.threads, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
