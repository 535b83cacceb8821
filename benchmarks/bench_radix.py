"""Radix tree throughput: insert/match of prefix-sharing sequences and the cost of a 32k-token hit.

    python3 benchmarks/bench_radix.py [--num-seqs 1000] [--long-len 32768] [--page-size 1]

Workload 1: ``--num-seqs`` random sequences built as (one of ``--num-prompts`` shared system
prompts) + (one of ``--num-fewshot`` shared few-shot blocks) + a random user suffix; all are
inserted, then all are matched again. Workload 2: one ``--long-len`` key is cached whole (a single
edge) and, separately, as a chain of ``--chain-nodes`` edges (nested inserts); the time to match it
fully is the median of ``--repeats`` calls. The target: under 2 ms for a 32k-token hit.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

from radixlm.radix_cache import RadixCache


def make_sequences(args: argparse.Namespace, rng: random.Random) -> list[list[int]]:
    def rand(n: int) -> list[int]:
        return [rng.randrange(args.vocab) for _ in range(n)]

    prompts = [rand(rng.randint(200, 800)) for _ in range(args.num_prompts)]
    fewshots = [rand(rng.randint(100, 400)) for _ in range(args.num_fewshot)]
    return [
        rng.choice(prompts) + rng.choice(fewshots) + rand(rng.randint(20, 200)) for _ in range(args.num_seqs)
    ]


def bench_shared(args: argparse.Namespace) -> list[tuple[str, str]]:
    rng = random.Random(args.seed)
    seqs = make_sequences(args, rng)
    tokens = sum(map(len, seqs))
    cache = RadixCache(page_size=args.page_size, eviction_policy=args.policy)
    next_slot = 1
    start = time.perf_counter()
    for seq in seqs:
        cache.insert(seq, range(next_slot, next_slot + len(seq)))
        next_slot += len(seq)
    insert_s = time.perf_counter() - start
    start = time.perf_counter()
    for seq in seqs:
        cache.match_prefix(seq)
    match_s = time.perf_counter() - start
    hit = cache.stats()["hit_rate"]
    cache.check_integrity()
    n = len(seqs)
    return [
        (
            f"insert {n} seqs ({tokens / n:.0f} tok avg)",
            f"{n / insert_s:,.0f} ops/s  ({insert_s * 1e3:.1f} ms)",
        ),
        (f"match {n} cached seqs", f"{n / match_s:,.0f} ops/s  ({match_s * 1e3:.1f} ms, hit {hit:.1%})"),
        ("cached tokens / inserted tokens", f"{cache.total_size():,} / {tokens:,}"),
    ]


def median_match_ms(cache: RadixCache, key: list[int] | tuple[int, ...], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        result = cache.match_prefix(key)
        times.append(time.perf_counter() - start)
    if len(result.value) != len(key) - len(key) % cache.page_size:
        raise RuntimeError(f"expected a full hit, matched {len(result.value)} of {len(key)} tokens")
    return statistics.median(times) * 1e3


def bench_long(args: argparse.Namespace) -> list[tuple[str, str]]:
    rng = random.Random(args.seed + 1)
    key = [rng.randrange(args.vocab) for _ in range(args.long_len)]
    value = list(range(1, len(key) + 1))
    single = RadixCache(page_size=args.page_size, eviction_policy=args.policy)
    single.insert(key, value)
    chain = RadixCache(page_size=args.page_size, eviction_policy=args.policy)
    step = max(args.page_size, len(key) // args.chain_nodes // args.page_size * args.page_size)
    for end in range(step, len(key) + 1, step):
        chain.insert(key[:end], value[:end])
    chain.insert(key, value)
    edges = sum(1 for line in chain.pretty().splitlines() if "[" in line and "lock_ref" in line)
    n = f"{len(key):,}"
    return [
        (f"match {n}-token key, 1 edge (list key)", f"{median_match_ms(single, key, args.repeats):.3f} ms"),
        (
            f"match {n}-token key, 1 edge (tuple key)",
            f"{median_match_ms(single, tuple(key), args.repeats):.3f} ms",
        ),
        (
            f"match {n}-token key, {edges} edges (list key)",
            f"{median_match_ms(chain, key, args.repeats):.3f} ms",
        ),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--num-seqs", type=int, default=1000)
    parser.add_argument("--num-prompts", type=int, default=8, help="shared system prompts")
    parser.add_argument("--num-fewshot", type=int, default=32, help="shared few-shot blocks")
    parser.add_argument("--long-len", type=int, default=32768)
    parser.add_argument("--chain-nodes", type=int, default=64, help="edges of the chained long key")
    parser.add_argument("--repeats", type=int, default=200)
    parser.add_argument("--page-size", type=int, default=1)
    parser.add_argument("--policy", choices=["lru", "lfu"], default="lru")
    parser.add_argument("--vocab", type=int, default=32000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    rows = bench_shared(args) + bench_long(args)
    width = max(len(name) for name, _ in rows)
    print(f"RadixCache page_size={args.page_size} policy={args.policy}")
    print(f"{'case':<{width}}  result")
    print(f"{'-' * width}  {'-' * 36}")
    for name, result in rows:
        print(f"{name:<{width}}  {result}")


if __name__ == "__main__":
    main()
