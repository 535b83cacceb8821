"""Masks inside a bounded plain string: counted by the matcher (the default) against counted by
llguidance's lexer (the counted lexeme kept in the grammar), side by side in one run.

For ``{"c": {"type": "string", "maxLength": N}, "d": {"type": "integer"}}`` it times ``fill_mask``
at every position of a ``c`` value N characters long, for a fresh compile's first matcher and for
a second matcher of the same grammar (a later request), the two forms alternating; medians over
``--reps`` of the per-position mean, and of the whole document's masks.

    python benchmarks/bench_counted_strings.py --tokenizer qwen2 --reps 5
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from unittest import mock

import torch
from radixlm.constrained import compile_grammar

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_grammar import load_tokenizer  # noqa: E402

LEXER = "radixlm.constrained.json_schema.unique.counted_lexemes"


def _masks(grammar, vocab, text: bytes, inside: range) -> tuple[list[float], list[float]]:
    """µs of every mask along ``text`` (single-byte tokens), and of those inside the string."""
    m, row, every = grammar.matcher(), torch.zeros(vocab.mask_words, dtype=torch.int32), []
    for b in text:
        start = time.perf_counter_ns()
        m.fill_mask(row)
        every.append((time.perf_counter_ns() - start) / 1000)
        assert m.accept_token(vocab.byte_tokens[b])
    return every, [every[i] for i in inside]


def run(vocab, n: int, counted: bool) -> dict[str, float]:
    schema = {"type": "object", "properties": {"c": {"type": "string", "maxLength": n}, "d": {"type": "integer"}},
              "required": ["c", "d"]}
    text = b'{"c":"' + b"abcdefghij" * (n // 10) + b"abcdefghij"[: n % 10] + b'","d":1}'
    inside = range(6, 6 + n)
    if counted:
        grammar = compile_grammar(vocab, "json_schema", schema)
    else:  # the counted lexeme stays in the grammar: llguidance's lexer counts
        with mock.patch(LEXER, return_value=frozenset()):
            grammar = compile_grammar(vocab, "json_schema", schema)
    assert bool(grammar.unique and grammar.unique.strings) == counted
    first_all, first = _masks(grammar, vocab, text, inside)
    second_all, second = _masks(grammar, vocab, text, inside)
    return {"first": statistics.fmean(first), "second": statistics.fmean(second),
            "doc_first": statistics.fmean(first_all), "doc_second": statistics.fmean(second_all)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tokenizer", default="qwen2", choices=["qwen2", "llama3", "small", "tiny"])
    p.add_argument("--lengths", default="8,32,255")
    p.add_argument("--reps", type=int, default=5)
    args = p.parse_args()
    _, vocab = load_tokenizer(args.tokenizer)
    compile_grammar(vocab, "json_schema", {"type": "string"}).matcher()  # llguidance's tokenizer built
    print(f"{'maxLength':>9s} {'form':>8s} {'in string, 1st':>15s} {'in string, 2nd':>15s} {'document, 1st':>14s} {'document, 2nd':>14s}  (µs per mask)")
    for n in (int(x) for x in args.lengths.split(",")):
        rows: dict[bool, list[dict]] = {True: [], False: []}
        for _ in range(args.reps):
            for counted in (True, False):  # alternating, so both meet the same machine
                rows[counted].append(run(vocab, n, counted))
        for counted in (True, False):
            med = {k: statistics.median(r[k] for r in rows[counted]) for k in rows[counted][0]}
            print(f"{n:>9d} {'matcher' if counted else 'lexer':>8s} {med['first']:>15.1f} {med['second']:>15.1f}"
                  f" {med['doc_first']:>14.1f} {med['doc_second']:>14.1f}")


if __name__ == "__main__":
    main()
