"""``fill_mask`` cost of the runtime ``uniqueItems`` check: inside a unique array of strings (or
numbers) against outside one (a plain array of the same items), on a real vocabulary.

The document is the compact serialisation of an array of ``--items`` distinct items, fed token by
token (the model's own tokenisation); ``fill_mask`` is timed at every step, after a warm-up pass
that builds the per-vocabulary token tables (their one-time cost is reported apart).

    python benchmarks/bench_unique_items.py --tokenizer qwen2 [--items 50] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
from bench_grammar import load_tokenizer
from radixlm.constrained import compile_grammar
from radixlm.constrained.masks.duplicate_items import forget_tables

WORDS = ["alpha", "beta", "gamma", "delta", "épsilon", "中文", "zeta", "eta", "theta", "iota"]


def _items(kind: str, n: int) -> list:
    if kind == "number":
        return [i * 7 - 100 + (0.5 if i % 3 else 0) for i in range(n)]
    return [f"{WORDS[i % len(WORDS)]} {i}" for i in range(n)]


def _time_masks(grammar, ids: list[int], repeat: int) -> tuple[list[float], list[float]]:
    """(fill_mask us, accept_token us) at every step, ``repeat`` passes."""
    row = torch.zeros(grammar.vocab.mask_words, dtype=torch.int32)
    masks, accepts = [], []
    for _ in range(repeat):
        m = grammar.matcher()
        for t in ids:
            start = time.perf_counter()
            m.fill_mask(row)
            mid = time.perf_counter()
            assert m.accept_token(t)
            masks.append((mid - start) * 1e6)
            accepts.append((time.perf_counter() - mid) * 1e6)
    return masks, accepts


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokenizer", default="qwen2")
    ap.add_argument("--items", type=int, default=50)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    tokenizer, vocab = load_tokenizer(args.tokenizer)
    print(f"vocabulary: {args.tokenizer}, {vocab.vocab_size} tokens; {args.items} items, {args.repeat} passes")
    for kind in ("string", "number"):
        ids = tokenizer.encode(json.dumps(_items(kind, args.items), separators=(",", ":"), ensure_ascii=False))
        for unique in (False, True):
            schema = {"type": "array", "items": {"type": kind}, "uniqueItems": unique}
            grammar = compile_grammar(vocab, "json_schema", schema)
            assert (grammar.unique is not None) == unique
            forget_tables(vocab)
            start = time.perf_counter()
            _time_masks(grammar, ids, 1)  # warm-up: builds the token tables the steps need
            warm = (time.perf_counter() - start) * 1e3
            times, accepts = _time_masks(grammar, ids, args.repeat)
            label = "uniqueItems" if unique else "plain"
            print(f"{kind:6s} {label:11s} steps {len(times):5d}  mask us p50 {statistics.median(times):7.1f}  "
                  f"p99 {_pct(times, 0.99):7.1f}  accept us p50 {statistics.median(accepts):5.1f}  "
                  f"first pass (tables built) {warm:7.1f} ms")


if __name__ == "__main__":
    main()
