"""Decode and prefill throughput of the engine, with CUDA graphs + overlap scheduling on and off.

    python benchmarks/bench_decode.py --json out.json                       # CUDA, bfloat16, small + real shapes
    python benchmarks/bench_decode.py --device cpu --dtype float32 --models llama:tiny --batches 1,4 --quick
    python benchmarks/bench_decode.py --cpu-paths --models llama:small --batches 1,2,4,8 --prompt-len 32 --new-tokens 17
    python benchmarks/bench_decode.py --kv-paths --model-path $GGUF --batches 1,16 --prompt-len 1500 --new-tokens 33

``--cpu-paths`` (CPU, float32) compares the native decode kernels (``kernels/cpu_native``) with the
torch ops (``cpu_native.torch_only()``) in one engine instead, alternating them ``--reps`` times, and
prints ms per decode step (the engine's step timers) with the greedy outputs compared. ``--kv-paths``
(CPU) does the same for a float16 KV cache against a float32 one (``--kv-cache-dtype``), two engines
alternating, speculative decoding off; ``--model-path`` (a GGUF file, say) replaces ``--models``.

Per checkpoint, mode and batch size B: B distinct prompts of ``--prompt-len`` tokens; prefill
tokens/s from a one-token run on an empty cache, decode tokens/s from the difference between a
``--new-tokens`` run and the one-token run (``ignore_eos``). "on" asks for CUDA graphs and overlap
(``RADIXLM_UNVERIFIED_GPU_FEATURES=1`` until they are verified), "off" passes
``disable_cuda_graph`` and ``disable_overlap_schedule``. Greedy outputs of the two modes are
compared (bfloat16: graphs pad the batch, so rare near-tie flips are possible).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from typing import Any


def checkpoint(spec: str) -> str | None:
    """``arch:size`` -> a checkpoint path (synthetic tiny/small or a real shape); None if unavailable."""
    arch, size = spec.split(":")
    if size in ("tiny", "small"):
        from radixlm.runtime.testing import checkpoint_path
        return checkpoint_path(arch, size)
    from radixlm.runtime.testing.real_shapes import real_checkpoint_path
    try:
        return real_checkpoint_path(arch, size)
    except Exception as e:  # noqa: BLE001 - e.g. the llama.cpp fixtures were not carried
        print(f"{spec}: unavailable ({type(e).__name__}: {e})", flush=True)
        return None


def measure(path: str, mode: str, batches: list[int], args: argparse.Namespace) -> list[dict[str, Any]]:
    from radixlm.runtime.engine import Engine

    os.environ["RADIXLM_UNVERIFIED_GPU_FEATURES"] = "1" if mode == "on" else "0"
    off = mode == "off"
    rows = []
    with Engine(path, device=args.device, dtype=args.dtype, max_total_tokens=args.max_total_tokens,
                max_running_requests=max(batches), disable_cuda_graph=off, disable_overlap_schedule=off) as eng:
        graphs = eng.runner.graph_runner is not None
        overlap = eng._loop.overlap is not None
        vocab = eng.tokenizer.vocab_size
        for bs in batches:
            prompts = [[(7 + 13 * i + 31 * j) % (vocab - 10) + 5 for j in range(args.prompt_len)] for i in range(bs)]
            one = {"temperature": 0.0, "max_new_tokens": 1, "ignore_eos": True}
            many = dict(one, max_new_tokens=args.new_tokens)
            eng.generate(input_ids=prompts, sampling_params=many)  # warm-up (kernels, graphs)
            eng.flush_cache()
            t0 = time.perf_counter()
            eng.generate(input_ids=prompts, sampling_params=one)
            t_one = time.perf_counter() - t0
            eng.flush_cache()
            t0 = time.perf_counter()
            outs = eng.generate(input_ids=prompts, sampling_params=many)
            t_many = time.perf_counter() - t0
            eng.flush_cache()
            rows.append({"batch": bs, "mode": mode, "cuda_graph": graphs, "overlap": overlap,
                         "prefill_tok_s": round(bs * args.prompt_len / t_one, 1),
                         "decode_tok_s": round(bs * (args.new_tokens - 1) / max(t_many - t_one, 1e-9), 1),
                         "ids": [o["output_ids"] for o in outs]})
            print({k: v for k, v in rows[-1].items() if k != "ids"}, flush=True)
    return rows


def decode_step_ms(eng: Any, prompts: list[list[int]], params: dict) -> tuple[float, list[list[int]]]:
    """Mean ms per decode step of one ``generate`` over ``prompts`` (the engine's own timers), and the
    outputs; the prefix cache is flushed after, so every round prefills alike."""
    before = eng.get_stats()["timers"]
    outs = eng.generate(input_ids=prompts, sampling_params=params)
    after = eng.get_stats()["timers"]
    eng.flush_cache()
    steps = after["decode_steps"] - before["decode_steps"]
    return 1e3 * (after["decode_step_s"] - before["decode_step_s"]) / steps, [o["output_ids"] for o in outs]


def measure_cpu_paths(path: str, batches: list[int], args: argparse.Namespace) -> list[dict[str, Any]]:
    """ms per decode step (best of ``--reps``) of the native kernels and of the torch ops, per batch size."""
    from contextlib import nullcontext

    from radixlm.kernels import cpu_native
    from radixlm.runtime.engine import Engine

    rows = []
    with Engine(path, device="cpu", dtype="float32", max_total_tokens=args.max_total_tokens,
                max_running_requests=max(batches), log_level="error") as eng:
        vocab = eng.tokenizer.vocab_size
        params = {"temperature": 0.0, "max_new_tokens": args.new_tokens, "ignore_eos": True}

        def step_ms(prompts: list[list[int]], mode: str) -> tuple[float, list[list[int]]]:
            with nullcontext() if mode == "native" else cpu_native.torch_only():
                return decode_step_ms(eng, prompts, params)

        for bs in batches:
            prompts = [[(7 + 13 * i + 31 * j) % (vocab - 10) + 5 for j in range(args.prompt_len)] for i in range(bs)]
            best, ids = {"native": float("inf"), "torch": float("inf")}, {}
            for _ in range(args.reps + 1):  # the first round warms up
                for mode in best:
                    ms, ids[mode] = step_ms(prompts, mode)
                    best[mode] = min(best[mode], ms)
            rows.append({"batch": bs, "native_ms_per_step": round(best["native"], 2),
                         "torch_ms_per_step": round(best["torch"], 2),
                         "speedup": round(best["torch"] / best["native"], 2),
                         "greedy_same": f"{sum(a == b for a, b in zip(ids['native'], ids['torch']))}/{bs}"})
            print(rows[-1], flush=True)
    return rows


def measure_kv_paths(path: str, batches: list[int], args: argparse.Namespace) -> list[dict[str, Any]]:
    """ms per decode step (best of ``--reps``) with a float16 and a float32 KV cache, per batch size."""
    from contextlib import ExitStack

    from radixlm.runtime.engine import Engine

    rows = []
    with ExitStack() as stack:
        engines = {kv: stack.enter_context(Engine(path, device="cpu", kv_cache_dtype=kv, speculative_algorithm=None,
                                                  max_total_tokens=args.max_total_tokens, log_level="error",
                                                  max_running_requests=max(batches)))
                   for kv in ("float16", "float32")}
        vocab = engines["float32"].tokenizer.vocab_size
        params = {"temperature": 0.0, "max_new_tokens": args.new_tokens, "ignore_eos": True}

        for bs in batches:
            prompts = [[(7 + 13 * i + 31 * j) % (vocab - 10) + 5 for j in range(args.prompt_len)] for i in range(bs)]
            best, ids = {kv: float("inf") for kv in engines}, {}
            for _ in range(args.reps + 1):  # the first round warms up
                for kv, eng in engines.items():
                    ms, ids[kv] = decode_step_ms(eng, prompts, params)
                    best[kv] = min(best[kv], ms)
            rows.append({"batch": bs, "context": args.prompt_len, "kv16_ms_per_step": round(best["float16"], 2),
                         "kv32_ms_per_step": round(best["float32"], 2),
                         "speedup": round(best["float32"] / best["float16"], 2),
                         "greedy_same": f"{sum(a == b for a, b in zip(ids['float16'], ids['float32']))}/{bs}"})
            print(rows[-1], flush=True)
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda")
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--models", default="llama:small,qwen2:0.5b,llama:1b")
    p.add_argument("--batches", default="1,16,64")
    p.add_argument("--prompt-len", type=int, default=256)
    p.add_argument("--new-tokens", type=int, default=128)
    p.add_argument("--max-total-tokens", type=int, default=65536)
    p.add_argument("--quick", action="store_true", help="short prompts and outputs")
    p.add_argument("--json", default=None)
    p.add_argument("--cpu-paths", action="store_true", help="CPU float32: native decode kernels vs torch ops")
    p.add_argument("--reps", type=int, default=3, help="--cpu-paths, --kv-paths: alternations per batch size")
    p.add_argument("--kv-paths", action="store_true", help="CPU: a float16 KV cache vs a float32 one")
    p.add_argument("--model-path", default=None, help="--kv-paths: this checkpoint instead of --models")
    args = p.parse_args()
    if args.quick:
        args.prompt_len, args.new_tokens = 32, 8
    batches = [int(b) for b in args.batches.split(",")]
    if args.kv_paths:
        paths = [args.model_path] if args.model_path else [checkpoint(spec) for spec in args.models.split(",")]
        rows = [dict(r, model=path) for path in paths if path for r in measure_kv_paths(path, batches, args)]
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"rows": rows, "device": "cpu"}, f, indent=1)
        return
    if args.cpu_paths:
        rows = [dict(r, model=spec) for spec in args.models.split(",") if (path := checkpoint(spec))
                for r in measure_cpu_paths(path, batches, args)]
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"rows": rows, "device": "cpu", "dtype": "float32"}, f, indent=1)
        return
    results = []
    for spec in args.models.split(","):
        path = checkpoint(spec)
        if path is None:
            results.append({"model": spec, "skipped": "checkpoint unavailable"})
            continue
        on, off = measure(path, "on", batches, args), measure(path, "off", batches, args)
        for a, b in zip(on, off):
            same = sum(x == y for x, y in zip(a.pop("ids"), b.pop("ids")))
            for row in (a, b):
                results.append(dict(row, model=spec, greedy_same=f"{same}/{row['batch']}"))
            results[-1]["speedup_on_vs_off"] = round(a["decode_tok_s"] / max(b["decode_tok_s"], 1e-9), 2)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": results, "device": args.device, "dtype": args.dtype}, f, indent=1)


if __name__ == "__main__":
    main()
