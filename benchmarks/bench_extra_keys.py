"""The key lexeme of extra members (``constrained/json_schema/names.py``) in its two forms,
side by side in one run: the lexeme algebra (``plain string & ~names``, what the front end writes)
and a trie regex of the names' complement (what it wrote before, kept as ``LexOp.as_regex``).

    python benchmarks/bench_extra_keys.py --tokenizer qwen2 [--reps 15]

For objects of 1, 3, 8 and 20 named members that take extra members, each form is compiled
afresh ``--reps`` times (in this process, the two forms alternating). Each compile's matcher is
fed ``{"`` and its next mask is timed: the first mask inside an open key, which walks the
vocabulary's token trie against a lexer state nobody has met; then the mask after one more
character, and the first mask inside the key of a second matcher of the same grammar (a later
request). Prints the medians (compile ms, then the three masks in µs) per form.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_grammar  # noqa: E402
from radixlm.constrained import compile_grammar  # noqa: E402
from radixlm.constrained.ir import builder as ir  # noqa: E402
from radixlm.constrained.json_schema import objects
from radixlm.constrained.json_schema.names import complement_string

MEMBERS = (1, 3, 8, 20)


def trie_key(words: set, nonempty: bool, pointer: str = "#") -> ir.Node:
    """The previous form: one regex, a trie of the names' complement."""
    return ir.Lex(complement_string(words, nonempty))


def schema(n: int) -> dict:
    """An object of ``n`` named integer members of realistic names; extras take strings."""
    names = ["id", "name", "type", "description", "enabled", "count", "created_at", "tags"]
    props = {(names[i] if i < len(names) else f"field_{i}"): {"type": "integer"} for i in range(n)}
    return {"type": "object", "properties": props, "additionalProperties": {"type": "string"}}


def measure(vocab, tokenizer, spec: dict) -> tuple[float, ...]:
    """``(compile ms, first mask inside the key µs, the next mask µs, the first mask inside the
    key of a second matcher µs)`` of one fresh compile."""
    start = time.perf_counter()
    grammar = compile_grammar(vocab, "json_schema", spec)
    compile_ms = (time.perf_counter() - start) * 1000
    row = torch.zeros(vocab.mask_words, dtype=torch.int32)
    times = []
    for texts in (('{"', "x"), ('{"',)):  # the mask right inside the key, one after a character;
        matcher = grammar.matcher()  # then a second request's first mask inside the key
        for text in texts:
            for t in tokenizer.encode(text):
                assert matcher.accept_token(t)
            start = time.perf_counter_ns()
            matcher.fill_mask(row)
            times.append((time.perf_counter_ns() - start) / 1000)
    return (compile_ms, *times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokenizer", default="qwen2", choices=["qwen2", "llama3", "small", "tiny"])
    parser.add_argument("--reps", type=int, default=15)
    args = parser.parse_args()
    tokenizer, vocab = bench_grammar.load_tokenizer(args.tokenizer)
    algebra = objects.complement_key
    print(f"{args.tokenizer} vocabulary ({vocab.vocab_size} tokens), {args.reps} fresh compiles per form")
    print(f"{'members':>7} {'form':>8} {'compile ms':>11} {'first mask in key us':>21} {'next mask us':>13}"
          f" {'2nd matcher us':>15}")
    for n in MEMBERS:
        runs: dict[str, list] = {"algebra": [], "trie": []}
        for _ in range(args.reps):
            for form, fn in (("algebra", algebra), ("trie", trie_key)):
                objects.complement_key = fn
                try:
                    runs[form].append(measure(vocab, tokenizer, schema(n)))
                finally:
                    objects.complement_key = algebra
        for form, rows in runs.items():
            med = [statistics.median(col) for col in zip(*rows)]
            print(f"{n:>7} {form:>8} {med[0]:>11.2f} {med[1]:>21.1f} {med[2]:>13.1f} {med[3]:>15.1f}")


if __name__ == "__main__":
    main()
