"""A compile worker's llguidance tokenizer with and without token slices: the compile time of
``compile_parts`` (front end and matcher probe, what a worker runs per job) and the memory each
tokenizer takes, on one real vocabulary and JSONSchemaBench-layout schemas.

    python benchmarks/bench_worker_probe.py --tokenizer qwen2 --every 40

Both tokenizers are built in this process and the schemas compiled round by round on each, so a
busy machine slows both alike; the worker builds its own with ``slices=[]`` (``compile/job.py``).
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import json
import statistics
import sys
import time
from pathlib import Path

from radixlm.constrained.compile.job import compile_parts
from radixlm.constrained.compile.worker import CompileRequest
from radixlm.constrained.errors import ConstraintError
from radixlm.constrained.vocab import TokenizerVocab

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_grammar import load_tokenizer  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
MODES = {"default slices": None, "no slices": []}


def resident_mb() -> float:
    """This process's resident memory after a collection and a ``malloc_trim``."""
    gc.collect()
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 2**20


def schemas(data: Path, every: int) -> list[tuple[str, object]]:
    """Every ``every``-th schema of the data set, as (name, schema)."""
    files = sorted(data.glob("*/*.json"))[::every]
    return [(f.stem, json.loads(f.read_text())["schema"]) for f in files]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tokenizer", default="qwen2", choices=["qwen2", "llama3", "small", "tiny"])
    p.add_argument("--data", default=str(REPO / "tests" / "data" / "jsonschemabench"))
    p.add_argument("--every", type=int, default=40, help="every K-th schema")
    p.add_argument("--rounds", type=int, default=3, help="compiles of each schema per tokenizer")
    args = p.parse_args()
    _, base = load_tokenizer(args.tokenizer)
    vocabs, memory = {}, {}
    for mode, slices in MODES.items():
        vocab = TokenizerVocab.from_token_bytes(base.token_bytes, base.eos_token_ids, base.vocab_size)
        before = resident_mb()
        vocab.prepare_llg(slices)
        memory[mode] = resident_mb() - before
        vocabs[mode] = vocab
    times: dict[str, list[float]] = {mode: [] for mode in MODES}
    work = schemas(Path(args.data), args.every)
    for _ in range(args.rounds):
        for _name, schema in work:
            for mode, vocab in vocabs.items():
                start = time.perf_counter()
                try:
                    compile_parts(vocab, CompileRequest("json_schema", schema))
                except ConstraintError:
                    pass
                times[mode].append((time.perf_counter() - start) * 1e3)
    print(f"{len(work)} schemas x {args.rounds} rounds, tokenizer {args.tokenizer} ({base.vocab_size:,} tokens)\n")
    print("| worker tokenizer | its memory MB | compile p50 ms | p90 ms | max ms | total s |")
    print("|---|---:|---:|---:|---:|---:|")
    for mode, xs in times.items():
        xs = sorted(xs)
        print(f"| {mode} | {memory[mode]:.0f} | {statistics.median(xs):.1f} | {xs[int(0.9 * (len(xs) - 1))]:.1f} "
              f"| {xs[-1]:.1f} | {sum(xs) / 1e3:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
