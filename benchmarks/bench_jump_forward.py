"""Jump-forward under each key order: the share of an output's forward passes that forced text saves.

Two sets of documents, each tokenised with a real vocabulary (``--tokenizer qwen2``, as
``bench_grammar.py``) and walked through the grammar of its schema; a token that lies inside the
forced continuation where it comes costs no forward pass (jump-forward splices forced text in one
extend step), and EOS costs one only where the grammar does not terminate by itself:

- **sample**: the valid instances of the JSONSchemaBench sample (``tests/data/jsonschemabench``),
  rewritten into schema order for the default key order (``constrained/testing/schema_order.py``:
  undeclared members dropped where the schema declares no extras; rewrites that turn invalid are
  dropped and counted), as they are for ``--orders any``; only instances the grammar accepts count;
- **extraction**: a real model's answers to twenty extraction tasks (``benchmarks/data/
  extraction_outputs.json``, recorded by ``record_extraction.py`` with Qwen2.5-Coder-0.5B-Instruct).

    python benchmarks/bench_jump_forward.py --tokenizer qwen2 [--orders schema,any] [--every 1]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from radixlm.constrained import ConstraintError, compile_grammar
from radixlm.constrained.testing.schema_order import schema_order_instances, to_schema_order
from radixlm.constrained.testing.walks import accepts_text, compact_json, eos_pass, forced_count

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_grammar import load_tokenizer  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
EXTRACTION = Path(__file__).resolve().parent / "data" / "extraction_outputs.json"


class Tally:
    """Documents, their passes without jump-forward (tokens + EOS where needed) and the saved ones."""

    def __init__(self) -> None:
        self.docs = self.passes = self.saved = self.refused = self.dropped = 0

    def add(self, grammar, tokenizer, value) -> None:
        text = compact_json(value)
        if not accepts_text(grammar, tokenizer, text):
            self.refused += 1
            return
        ids = tokenizer.encode(text)
        self.docs += 1
        self.passes += len(ids) + eos_pass(grammar, ids)
        self.saved += forced_count(grammar, ids)

    def row(self, name: str) -> str:
        share = self.saved / self.passes if self.passes else float("nan")
        return (f"{name:24s} {self.docs:5d} docs ({self.refused} refused, {self.dropped} dropped by the rewrite)  "
                f"{self.passes:7d} passes  {self.saved:6d} saved  {share:6.1%}")


def sample(vocab, tokenizer, order: str, data: Path, every: int) -> Tally:
    """The sample's valid instances, laid out as ``order`` writes them."""
    tally = Tally()
    for path in sorted(data.glob("*/*.json"))[::every]:
        doc = json.loads(path.read_text(encoding="utf-8"))
        try:
            grammar = compile_grammar(vocab, "json_schema", doc["schema"], key_order=order)
        except ConstraintError:
            continue
        valid = [t["data"] for t in doc["tests"] if t["valid"]]
        if order == "schema":
            valid, dropped = schema_order_instances(doc["schema"], valid)
            tally.dropped += dropped
        for value in valid:
            tally.add(grammar, tokenizer, value)
    return tally


def extraction(vocab, tokenizer, order: str, path: Path) -> Tally | None:
    """The recorded real-model answers (schema order already; rewritten to be sure)."""
    if not path.exists():
        return None
    recorded = json.loads(path.read_text(encoding="utf-8"))
    sys.path.insert(0, str(path.resolve().parents[1]))
    from extraction_set import SCHEMAS

    tally, grammars = Tally(), {}
    for out in recorded["outputs"]:
        schema = SCHEMAS[out["schema"]]
        if out["schema"] not in grammars:
            grammars[out["schema"]] = compile_grammar(vocab, "json_schema", schema, key_order=order)
        value = to_schema_order(schema, out["value"]) if order == "schema" else out["value"]
        tally.add(grammars[out["schema"]], tokenizer, value)
    return tally


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", default=str(REPO / "tests" / "data" / "jsonschemabench"))
    p.add_argument("--extraction", default=str(EXTRACTION))
    p.add_argument("--tokenizer", default="qwen2", choices=["qwen2", "llama3", "small", "tiny"])
    p.add_argument("--orders", default="schema,any", help="comma-separated json_key_order values")
    p.add_argument("--every", type=int, default=1, help="every K-th schema of the sample")
    p.add_argument("--sets", default="sample,extraction", help="comma-separated: sample, extraction")
    args = p.parse_args()
    sets = args.sets.split(",")
    tokenizer, vocab = load_tokenizer(args.tokenizer)
    print(f"{args.tokenizer} vocabulary ({vocab.vocab_size} tokens); share = saved / passes")
    for order in args.orders.split(","):
        if "sample" in sets:
            tally = sample(vocab, tokenizer, order, Path(args.data), max(args.every, 1))
            print(tally.row(f"sample, {order}"), flush=True)
        if "extraction" in sets:
            tally = extraction(vocab, tokenizer, order, Path(args.extraction))
            print(tally.row(f"extraction, {order}") if tally else f"extraction: no {args.extraction}", flush=True)


if __name__ == "__main__":
    main()
