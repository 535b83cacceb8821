"""Offline batch generation: ``Engine.generate`` on a list of prompts (continuous batching in-process).

    python3 examples/batch_offline.py [--model-path DIR]
"""

from __future__ import annotations

import argparse
import time

from radixlm import Engine


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model-path", default=None)
    ap.add_argument("--max-new-tokens", type=int, default=16)
    args = ap.parse_args()
    prefix = "Summarise the following customer review in one sentence.\n\nReview: "
    reviews = ["The battery lasts two days.", "Shipping took a month.", "Great screen, weak speakers.",
               "Support answered within an hour.", "The case cracked after a week.", "Works as advertised."]
    prompts = [prefix + r + "\nSummary:" for r in reviews]
    with Engine(model_path=args.model_path, max_total_tokens=16384) as engine:
        start = time.perf_counter()
        # Prompts of one batch are prefilled together, so none finds another's KV in the cache yet:
        # prefill the shared instruction once (max_new_tokens=0), and every prompt then reuses it.
        engine.generate(prefix, {"max_new_tokens": 0})
        outs = engine.generate(prompts, {"temperature": 0, "max_new_tokens": args.max_new_tokens})
        elapsed = time.perf_counter() - start
        for review, out in zip(reviews, outs):
            meta = out["meta_info"]
            print(f"{review!r} -> {out['text']!r} ({meta['completion_tokens']} tokens, "
                  f"{meta['cached_tokens']} cached, {meta['finish_reason']['type']})")
        tokens = sum(o["meta_info"]["completion_tokens"] for o in outs)
        print(f"{len(prompts)} prompts, {tokens} tokens in {elapsed:.2f} s; "
              f"cache hit rate {engine.get_stats()['cache_hit_rate']:.1%}")


if __name__ == "__main__":
    main()
