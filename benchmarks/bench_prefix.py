"""Prefix-heavy agent workload: radixlm with the radix cache vs without it vs HF transformers.

Workload (the defaults): 64 requests, each a ~1,500-token shared system prompt plus a
distinct 50-token user turn, 64 new tokens each, greedy (EOS ignored so every system generates the
same number of tokens). All three run in this process on the same checkpoint, one after another;
then decode throughput at batch 1/16/64 and the engine's per-step overhead (step time outside
the model forward, from the engine's step timers).

    python benchmarks/bench_prefix.py                 # the `small` checkpoint
    python benchmarks/bench_prefix.py --size tiny     # quick run
    python benchmarks/bench_prefix.py --model-path DIR --json results.json
"""

from __future__ import annotations

import argparse
import json
import random
import time
from typing import Any

import torch

from radixlm import Engine


def build_workload(vocab: int, bos: int | None, args: argparse.Namespace) -> list[list[int]]:
    rng = random.Random(0)
    shared = [rng.randrange(16, vocab) for _ in range(args.shared_len)]
    head = [bos] if bos is not None else []
    return [head + shared + [rng.randrange(16, vocab) for _ in range(args.user_len)]
            for _ in range(args.num_requests)]


def run_engine(path: str, prompts: list[list[int]], args: argparse.Namespace, **server_args: Any) -> dict:
    params = {"temperature": 0.0, "max_new_tokens": args.new_tokens, "ignore_eos": True}
    with Engine(path, max_total_tokens=args.max_total_tokens, **server_args) as engine:
        engine.generate(input_ids=prompts[0][:32], sampling_params={**params, "max_new_tokens": 2})  # warm-up
        engine.flush_cache()
        start = time.perf_counter()
        outs = engine.generate(input_ids=prompts, sampling_params=params)
        elapsed = time.perf_counter() - start
        cached = sum(o["meta_info"]["cached_tokens"] for o in outs)
        prompt_tokens = sum(o["meta_info"]["prompt_tokens"] for o in outs)
        shared_total = (len(prompts[0]) - args.user_len) * (len(prompts) - 1)  # BOS + system prompt
    return {
        "time_s": elapsed,
        "output_tok_per_s": len(prompts) * args.new_tokens / elapsed,
        "total_tok_per_s": (prompt_tokens + len(prompts) * args.new_tokens) / elapsed,
        "cache_hit_rate": cached / prompt_tokens,
        "shared_tokens_hit": cached / shared_total if shared_total else 0.0,
        "outputs": [o["output_ids"] for o in outs],
    }


def run_hf(path: str, prompts: list[list[int]], args: argparse.Namespace, pad_id: int) -> dict:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    start = time.perf_counter()
    outputs = []
    for i in range(0, len(prompts), args.hf_batch_size):
        chunk = prompts[i:i + args.hf_batch_size]
        width = max(len(p) for p in chunk)
        ids = torch.tensor([[pad_id] * (width - len(p)) + p for p in chunk])  # left padding
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in chunk])
        with torch.inference_mode():
            gen = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=args.new_tokens,
                                 min_new_tokens=args.new_tokens, do_sample=False, pad_token_id=pad_id)
        outputs += gen[:, width:].tolist()
    elapsed = time.perf_counter() - start
    prompt_tokens = sum(len(p) for p in prompts)
    return {"time_s": elapsed, "output_tok_per_s": len(prompts) * args.new_tokens / elapsed,
            "total_tok_per_s": (prompt_tokens + len(prompts) * args.new_tokens) / elapsed,
            "cache_hit_rate": 0.0, "outputs": outputs}


def decode_throughput(path: str, args: argparse.Namespace, vocab: int) -> list[dict]:
    rng = random.Random(1)
    rows = []
    with Engine(path, max_total_tokens=args.max_total_tokens) as engine:
        for bs in args.decode_batch_sizes:
            prompts = [[rng.randrange(16, vocab) for _ in range(32)] for _ in range(bs)]
            before = engine.get_stats()["timers"]
            engine.generate(input_ids=prompts, sampling_params={"temperature": 0.0, "ignore_eos": True,
                                                                "max_new_tokens": args.new_tokens})
            after = engine.get_stats()["timers"]
            step_s = after["decode_step_s"] - before["decode_step_s"]
            fwd_s = after["decode_forward_s"] - before["decode_forward_s"]
            steps = after["decode_steps"] - before["decode_steps"]
            tokens = after["decode_tokens"] - before["decode_tokens"]
            rows.append({"batch": bs, "decode_tok_per_s": tokens / step_s, "step_ms": 1e3 * step_s / steps,
                         "overhead_ms": 1e3 * (step_s - fwd_s) / steps, "overhead_share": (step_s - fwd_s) / step_s})
            engine.flush_cache()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", choices=["tiny", "small"], default="small")
    parser.add_argument("--model-path", default=None, help="checkpoint directory (overrides --size)")
    parser.add_argument("--num-requests", type=int, default=64)
    parser.add_argument("--shared-len", type=int, default=1500)
    parser.add_argument("--user-len", type=int, default=50)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--max-total-tokens", type=int, default=200_000)
    parser.add_argument("--hf-batch-size", type=int, default=64)
    parser.add_argument("--decode-batch-sizes", type=int, nargs="*", default=[1, 16, 64])
    parser.add_argument("--skip-hf", action="store_true")
    parser.add_argument("--json", default=None, help="also write the figures here")
    args = parser.parse_args()

    from radixlm.runtime.testing import checkpoint_path
    from radixlm.runtime.tokenizer.tokenizer import Tokenizer

    path = args.model_path or checkpoint_path("llama", args.size)
    tok = Tokenizer(path)
    prompts = build_workload(tok.vocab_size, tok.bos_token_id, args)
    print(f"checkpoint {path}; {len(prompts)} requests x ({args.shared_len} shared + {args.user_len}) tokens, "
          f"{args.new_tokens} new, threads={torch.get_num_threads()}")
    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_ids[0]
    systems = [("cache_on", lambda: run_engine(path, prompts, args)),
               ("cache_off", lambda: run_engine(path, prompts, args, disable_radix_cache=True))]
    if not args.skip_hf:
        systems.append(("hf_transformers", lambda: run_hf(path, prompts, args, pad)))
    results: dict[str, dict] = {}
    print(f"{'system':<16}{'time s':>9}{'out tok/s':>11}{'total tok/s':>13}{'hit rate':>10}{'same out':>10}")
    for name, run in systems:  # each row is printed as soon as it is measured
        r = results[name] = run()
        same = sum(a == b for a, b in zip(r["outputs"], results["cache_on"]["outputs"]))
        print(f"{name:<16}{r['time_s']:>9.2f}{r['output_tok_per_s']:>11.1f}{r['total_tok_per_s']:>13.1f}"
              f"{r['cache_hit_rate']:>10.3f}{same:>7}/{len(prompts)}", flush=True)
    ref = results["cache_on"]
    print(f"shared-prefix tokens served from cache: {ref['shared_tokens_hit']:.1%}")
    for name in results:
        if name != "cache_on":
            print(f"speedup cache_on vs {name}: {results[name]['time_s'] / ref['time_s']:.2f}x")
    decode = decode_throughput(path, args, tok.vocab_size)
    print(f"{'batch':>6}{'decode tok/s':>14}{'step ms':>9}{'overhead ms':>13}{'overhead':>10}")
    for row in decode:
        print(f"{row['batch']:>6}{row['decode_tok_per_s']:>14.1f}{row['step_ms']:>9.2f}{row['overhead_ms']:>13.2f}"
              f"{row['overhead_share']:>10.1%}")
    if args.json:
        for r in results.values():
            r.pop("outputs")
        with open(args.json, "w") as f:
            json.dump({"workload": vars(args), "results": results, "decode": decode}, f, indent=2)


if __name__ == "__main__":
    main()
