"""The runtime member check's mask (``constrained/member_mask.py``) with and without its per-state
memo, side by side on the same masks in one run, and what every mask costs under the front end's
settings for where that check applies.

    python benchmarks/bench_member_mask.py --tokenizer qwen2 [--every 4] [--walks 4]
        [--any-order-rules N] [--runtime-check-above N]

Each schema is compiled in-process (so the two settings reach the front end; ``bench_grammar.py``
compiles in worker processes). Its masks are taken along ``--walks`` random walks of up to 256
tokens and along every shipped valid instance's own tokens. At each mask where the check runs,
``forbid_members`` runs twice on the same core mask: once from a fresh memo (what every mask
cost before the memo) and once with the memo as the run left it. The results must be equal, and
both are timed. Prints both timings, the whole ``fill_mask`` (memo on) and the valid and
invalid instances accepted.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_grammar  # noqa: E402
from radixlm.constrained import grammar as grammar_module  # noqa: E402
from radixlm.constrained.json_schema import objects  # noqa: E402
from radixlm.constrained.masks import member_memo  # noqa: E402
from radixlm.constrained.masks import members as member_mask  # noqa: E402
from radixlm.constrained.testing.walks import accepts_text, allowed_ids, compact_json  # noqa: E402


class PairedCheck:
    """Stands in for ``grammar.forbid_members``: the check from a fresh memo on a copy of the
    mask, then with the run's memo on the mask itself; equal results asserted, each timed (µs)."""

    def __init__(self) -> None:
        self.fresh: list[float] = []
        self.memo: list[float] = []
        self.pending = 0.0  # fresh-check µs inside the mask being timed (taken out of its time)

    def __call__(self, tracker, vocab, state: tuple, words: np.ndarray) -> None:
        copy = words.copy()
        kept = member_memo.memos.get(tracker)
        member_memo.memos.pop(tracker, None)
        start = time.perf_counter_ns()
        member_mask.forbid_members(tracker, vocab, state, copy)
        self.fresh.append((time.perf_counter_ns() - start) / 1000)
        self.pending += self.fresh[-1]
        if kept is not None:
            member_memo.memos[tracker] = kept
        start = time.perf_counter_ns()
        member_mask.forbid_members(tracker, vocab, state, words)
        self.memo.append((time.perf_counter_ns() - start) / 1000)
        if not np.array_equal(copy, words):
            raise AssertionError(f"the memo's mask differs from a fresh one in state {state!r}")


def timed_fill(matcher, row: torch.Tensor, check: PairedCheck, mask_us: list[float]) -> None:
    """``fill_mask``, timed without the fresh check's share."""
    check.pending = 0.0
    start = time.perf_counter_ns()
    matcher.fill_mask(row)
    mask_us.append((time.perf_counter_ns() - start) / 1000 - check.pending)


def masks_of(grammar, tokenizer, doc: dict, walks: int, check: PairedCheck,
             mask_us: list[float]) -> tuple[int, int, int, int]:
    """Time every mask along the walks and the valid instances; ``(valid ok, valid n, invalid
    accepted, invalid n)``."""
    row = torch.zeros(grammar.vocab.mask_words, dtype=torch.int32)
    paths = []
    for seed in range(walks):
        rng, m = random.Random(seed), grammar.matcher()
        for _ in range(256):
            if m.is_terminated():
                break
            timed_fill(m, row, check, mask_us)
            allowed = allowed_ids(row)  # the mask just timed: a second fill would hit the memo
            if not len(allowed):
                break
            assert m.accept_token(int(allowed[rng.randrange(len(allowed))]))  # = rng.choice(list)
    counts = [0, 0, 0, 0]
    for test in doc.get("tests", []):
        text = compact_json(test["data"])
        ok = accepts_text(grammar, tokenizer, text)
        counts[0 if test["valid"] else 2] += ok
        counts[1 if test["valid"] else 3] += 1
        if ok and test["valid"]:
            paths.append(tokenizer.encode(text))
    for ids in paths:
        m = grammar.matcher()
        for t in ids:
            timed_fill(m, row, check, mask_us)
            assert m.accept_token(t)
    return tuple(counts)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", default=str(bench_grammar.REPO / "tests" / "data" / "jsonschemabench"))
    p.add_argument("--tokenizer", default="qwen2", choices=["qwen2", "llama3", "small", "tiny"])
    p.add_argument("--every", type=int, default=4, help="every K-th schema")
    p.add_argument("--walks", type=int, default=4, help="random walks per schema")
    p.add_argument("--any-order-rules", type=int, default=objects.MAX_ANY_ORDER_RULES,
                   help="the front end's any-order rule budget per schema")
    p.add_argument("--runtime-check-above", type=int, default=objects.RUNTIME_CHECK_ABOVE,
                   help="objects of more named members are checked at runtime (-1: every one the check follows)")
    args = p.parse_args()
    objects.MAX_ANY_ORDER_RULES, objects.RUNTIME_CHECK_ABOVE = args.any_order_rules, args.runtime_check_above
    tokenizer, vocab = bench_grammar.load_tokenizer(args.tokenizer)
    check = PairedCheck()
    grammar_module.forbid_members = check
    mask_us, counts, compiled = [], [0, 0, 0, 0], 0
    for _, doc, grammar in bench_grammar.in_process_grammars(vocab, args.data, args.every):
        compiled += 1
        counts = [a + b for a, b in zip(counts, masks_of(grammar, tokenizer, doc, args.walks, check, mask_us), strict=True)]
    pct = bench_grammar._pct
    print(f"{compiled} schemas compiled (any-order rules {args.any_order_rules}, runtime check above "
          f"{args.runtime_check_above}); valid accepted {counts[0]}/{counts[1]}, invalid {counts[2]}/{counts[3]}")
    print(f"fill_mask      {len(mask_us):7d} masks  p50 / p90 / p99 {pct(mask_us, 50):7.1f} / {pct(mask_us, 90):7.1f}"
          f" / {pct(mask_us, 99):7.1f} us  total {sum(mask_us) / 1e6:6.2f} s (memo on; the fresh check taken out)")
    for name, xs in (("check, fresh", check.fresh), ("check, memo", check.memo)):
        print(f"{name:14s} {len(xs):7d} calls  p50 / p90 / p99 {pct(xs, 50):7.1f} / {pct(xs, 90):7.1f} / "
              f"{pct(xs, 99):7.1f} us  total {sum(xs) / 1e6:6.2f} s")
    if check.memo:
        print(f"fresh / memo total: {sum(check.fresh) / max(sum(check.memo), 1e-9):.2f}x")


if __name__ == "__main__":
    main()
