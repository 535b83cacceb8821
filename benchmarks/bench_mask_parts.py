"""Where a mask's time goes: ``GrammarMatcher.fill_mask`` split into the core's mask (llguidance)
and each runtime check's (``forbid`` for unique arrays, ``forbid_members`` for checked objects,
``forbid_lengths`` for counted strings), along one random walk per schema, as ``bench_grammar.py``
walks them.

    python benchmarks/bench_mask_parts.py --tokenizer qwen2 [--every 4] [--slowest 20]

Prints the masks' p50 / p90 / p99, the same for the core's share alone, how many masks took over
100 µs (and how many a p99 of 100 µs allows), which parts took over 40 µs in those, and each
part's total. Schemas are compiled in-process with the front end's defaults; the vocabulary's
start-up tables are built first, as ``GrammarBackend`` builds them.
"""

from __future__ import annotations

import argparse
import collections
import random
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_grammar  # noqa: E402
from radixlm.constrained import grammar as grammar_module  # noqa: E402
from radixlm.constrained.masks.duplicate_items import warm_tables
from radixlm.constrained.masks.refusable_tokens import (
    member_tokens_for,  # noqa: E402
    quote_split_for,
)
from radixlm.constrained.masks.string_lengths import tables_for  # noqa: E402
from radixlm.constrained.testing.walks import allowed_ids  # noqa: E402

PARTS: dict[str, float] = collections.defaultdict(float)  # µs of the mask being taken, by part


def timed(name: str, fn):
    """``fn``, adding its time to ``PARTS[name]``."""
    def run(*args):
        start = time.perf_counter_ns()
        out = fn(*args)
        PARTS[name] += (time.perf_counter_ns() - start) / 1000
        return out
    return run


class TimedCore:
    """The matcher's llguidance core, its mask call timed as the ``core`` part."""

    def __init__(self, core) -> None:
        self.core = core

    def __getattr__(self, name: str):
        return getattr(self.core, name)

    def unsafe_compute_mask_ptr(self, ptr: int, size: int) -> None:
        start = time.perf_counter_ns()
        self.core.unsafe_compute_mask_ptr(ptr, size)
        PARTS["core"] += (time.perf_counter_ns() - start) / 1000


def walk_masks(grammar, seed: int, max_tokens: int) -> list[tuple[float, dict, bytes]]:
    """``(µs, parts, the last bytes before it)`` of every mask along one random walk."""
    row = torch.zeros(grammar.vocab.mask_words, dtype=torch.int32)
    rng, matcher, out = random.Random(seed), grammar.matcher(), []
    matcher._core = TimedCore(matcher._core)
    for _ in range(max_tokens):
        if matcher.is_terminated():
            break
        PARTS.clear()
        start = time.perf_counter_ns()
        matcher.fill_mask(row)
        out.append(((time.perf_counter_ns() - start) / 1000, dict(PARTS), matcher.accepted_bytes()[-32:]))
        allowed = allowed_ids(row)
        if not len(allowed):
            break
        assert matcher.accept_token(int(allowed[rng.randrange(len(allowed))]))
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", default=str(bench_grammar.REPO / "tests" / "data" / "jsonschemabench"))
    p.add_argument("--tokenizer", default="qwen2", choices=["qwen2", "llama3", "small", "tiny"])
    p.add_argument("--every", type=int, default=1, help="every K-th schema")
    p.add_argument("--max-tokens", type=int, default=256)
    p.add_argument("--slowest", type=int, default=0, help="also list the N slowest masks")
    args = p.parse_args()
    _, vocab = bench_grammar.load_tokenizer(args.tokenizer)
    member_tokens_for(vocab).warm(), quote_split_for(vocab), tables_for(vocab).warm(), warm_tables(vocab)
    for name in ("forbid", "forbid_members", "forbid_lengths"):
        setattr(grammar_module, name, timed(name, getattr(grammar_module, name)))
    masks = []
    for path, _, grammar in bench_grammar.in_process_grammars(vocab, args.data, args.every):
        masks += [(us, split, path.stem, tail) for us, split, tail in walk_masks(grammar, 0, args.max_tokens)]
    report(masks, args.slowest)


def report(masks: list, slowest: int) -> None:
    """Print the figures the module docstring names."""
    pct = bench_grammar._pct
    total, core = [m[0] for m in masks], [m[1].get("core", 0.0) for m in masks]
    print(f"{len(masks)} masks: p50 / p90 / p99 {pct(total, 50):.1f} / {pct(total, 90):.1f} / {pct(total, 99):.1f} µs;"
          f" the core's share alone {pct(core, 50):.1f} / {pct(core, 90):.1f} / {pct(core, 99):.1f}")
    print(f"over 100 µs: {sum(t > 100 for t in total)} masks ({sum(c > 100 for c in core)} by the core alone);"
          f" a p99 of 100 µs allows {len(masks) // 100}")
    over = collections.Counter("+".join(sorted(k for k, v in m[1].items() if v > 40)) or "none over 40 µs"
                               for m in masks if m[0] > 100)
    print("parts over 40 µs in those:", dict(over.most_common()))
    for name in ("core", "forbid", "forbid_members", "forbid_lengths"):
        print(f"  {name:15s} total {sum(m[1].get(name, 0.0) for m in masks) / 1000:8.1f} ms")
    for us, split, stem, tail in sorted(masks, key=lambda m: -m[0])[:slowest]:
        print(f"{us:8.0f} " + " ".join(f"{k}={v:.0f}" for k, v in split.items()) + f"  {stem[:32]}  {tail!r}")


if __name__ == "__main__":
    main()
