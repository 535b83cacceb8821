"""Tensor parallelism: decode throughput of ``Engine(tp_size=N)`` against ``tp_size=1``, side by side.

Each engine decodes the same batch greedily (``ignore_eos``); the table shows decode tokens/s
(from the engine's step timers), end-to-end seconds, and whether the outputs equal TP=1's.

    python3 benchmarks/bench_tp.py [--size tiny|small] [--tp 2] [--device cpu] [--batch 8] [--tokens 64]

On a CPU every rank shares the same cores, so TP > 1 is slower there (it adds an all-reduce per
layer twice and the step broadcast); it pays off when each rank owns a GPU.
"""

from __future__ import annotations

import argparse
import time

from radixlm.runtime.testing import checkpoint_path

from radixlm import Engine


def run(path: str, tp_size: int, args: argparse.Namespace) -> tuple[dict, list]:
    engine = Engine(path, tp_size=tp_size, device=args.device, max_total_tokens=args.batch * (args.tokens + 64),
                    max_running_requests=args.batch)
    try:
        prompts = [f"Request {i}: write a short story about the number {i}." for i in range(args.batch)]
        params = {"temperature": 0.0, "max_new_tokens": args.tokens, "ignore_eos": True}
        engine.generate(prompts[:1], {**params, "max_new_tokens": 4})  # warm-up
        timers_before = dict(engine.get_stats()["timers"])
        start = time.perf_counter()
        outs = engine.generate(prompts, params)
        e2e = time.perf_counter() - start
        timers = engine.get_stats()["timers"]
        tokens = timers["decode_tokens"] - timers_before["decode_tokens"]
        seconds = timers["decode_step_s"] - timers_before["decode_step_s"]
        return {"tp": tp_size, "decode_tok_s": tokens / seconds, "e2e_s": e2e}, [o["output_ids"] for o in outs]
    finally:
        engine.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="tiny", choices=("tiny", "small"))
    parser.add_argument("--arch", default="llama")
    parser.add_argument("--tp", type=int, default=2)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=64)
    args = parser.parse_args()
    path = checkpoint_path(args.arch, args.size)
    base, base_ids = run(path, 1, args)
    other, other_ids = run(path, args.tp, args)
    print(f"{args.arch}-{args.size} on {args.device}, batch {args.batch}, {args.tokens} new tokens each")
    print(f"{'tp':>3} {'decode tok/s':>13} {'e2e s':>7} {'ratio':>6} same-as-tp1")
    for row, ids in ((base, base_ids), (other, other_ids)):
        print(f"{row['tp']:>3} {row['decode_tok_s']:>13.1f} {row['e2e_s']:>7.2f} "
              f"{row['decode_tok_s'] / base['decode_tok_s']:>6.2f} {ids == base_ids}")


if __name__ == "__main__":
    main()
