"""Where a JSON Schema compile goes: our front end (schema -> Lark text) against the core's build
(llguidance turning the Lark into a matcher template over the vocabulary), per schema.

    python benchmarks/bench_compile_split.py --tokenizer qwen2 [--every 1] [--top 30]

Prints p50 / p90 / max of the whole compile and of each half, the slowest schemas with their Lark
size, and how many schemas the core alone takes longer than ``--threshold`` ms to build: when that
count exceeds a tenth of the sample, no front-end work alone can bring the compile p90 under it.
Schemas the front end rejects are left out (``bench_grammar.py`` counts them).

``--any-order-rules N`` sets the front end's any-order rule budget for this run
(``json_schema.objects.MAX_ANY_ORDER_RULES``, 1,024 by default): 0 sends every object the
runtime member check can follow to that check instead of subset rules (smaller Lark, a faster
compile, a dearer mask: ``benchmarks/history/constrained-notes-2026.md`` as of commit c96c48f). ``--runtime-check-above N`` sets the member
count past which an object is checked at runtime (``json_schema.objects.RUNTIME_CHECK_ABOVE``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_grammar  # noqa: E402
from radixlm.constrained.backend import build_grammar as CompiledGrammar  # noqa: E402
from radixlm.constrained.backend import constraint_grammar  # noqa: E402
from radixlm.constrained.compile.worker import CompileRequest  # noqa: E402
from radixlm.constrained.errors import ConstraintError  # noqa: E402
from radixlm.constrained.json_schema import objects  # noqa: E402


def split_one(vocab, schema: dict) -> tuple[float, float, int] | None:
    """(front-end ms, core ms, Lark characters) of one schema; None when the front end rejects it."""
    start = time.perf_counter()
    try:
        parts = constraint_grammar(CompileRequest("json_schema", schema, None, True, "any"))  # as measured before
    except ConstraintError:
        return None
    mid = time.perf_counter()
    CompiledGrammar(vocab, parts.lark, "json_schema", schema, parts.relaxed, parts.notes, parts.unique)
    return (mid - start) * 1e3, (time.perf_counter() - mid) * 1e3, len(parts.lark)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", default=str(bench_grammar.REPO / "tests" / "data" / "jsonschemabench"))
    p.add_argument("--tokenizer", default="qwen2", choices=["qwen2", "llama3", "small", "tiny"])
    p.add_argument("--every", type=int, default=1, help="every K-th schema")
    p.add_argument("--top", type=int, default=30, help="slowest schemas listed")
    p.add_argument("--threshold", type=float, default=50.0, help="ms: the compile p90 target")
    p.add_argument("--any-order-rules", type=int, default=None,
                   help="the front end's any-order rule budget for this run (default: objects.MAX_ANY_ORDER_RULES)")
    p.add_argument("--runtime-check-above", type=int, default=None,
                   help="objects of more named members are checked at runtime (default: objects.RUNTIME_CHECK_ABOVE)")
    args = p.parse_args()
    if args.any_order_rules is not None:  # in-process: this benchmark runs the front end here
        objects.MAX_ANY_ORDER_RULES = args.any_order_rules
    if args.runtime_check_above is not None:
        objects.RUNTIME_CHECK_ABOVE = args.runtime_check_above
    _, vocab = bench_grammar.load_tokenizer(args.tokenizer)
    split_one(vocab, {"type": "object", "properties": {"a": {}}})  # warm-up: the core's one-time set-up
    rows = []
    for path in sorted(Path(args.data).glob("*/*.json"))[::args.every]:
        got = split_one(vocab, json.loads(path.read_text(encoding="utf-8"))["schema"])
        if got is not None:
            rows.append((got[0] + got[1], *got, f"{path.parent.name}/{path.name}"))
    if not rows:
        sys.exit(f"no schema compiled under {args.data}")
    for i, name in ((0, "compile"), (1, "front end"), (2, "core build")):
        values = [r[i] for r in rows]
        print(f"{name:>10} ms p50 {bench_grammar._pct(values, 50):7.1f}  p90 {bench_grammar._pct(values, 90):7.1f}  "
              f"max {max(values):7.1f}")
    slow_core = sum(r[2] > args.threshold for r in rows)
    print(f"{len(rows)} schemas compiled; the core alone takes > {args.threshold:g} ms on {slow_core} "
          f"({slow_core / len(rows):.1%}; a p90 under it needs at most 10%)")
    print(f"\n{'total ms':>9} {'front end':>9} {'core':>8} {'Lark chars':>10}  schema")
    for total, fe, core, size, name in sorted(rows, reverse=True)[:args.top]:
        print(f"{total:9.1f} {fe:9.1f} {core:8.1f} {size:10d}  {name}")


if __name__ == "__main__":
    main()
