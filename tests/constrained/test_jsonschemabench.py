"""JSONSchemaBench sample (``tests/data/jsonschemabench``): the front end
over every schema, then for a fixed subset of compiled grammars: shipped instances walked through
the matcher (no invalid instance accepted) and random token walks (uniform among allowed tokens,
fixed seed: an untrained model at temperature 1) whose outputs must validate with ``jsonschema``.
The full set is measured by ``benchmarks/bench_grammar.py``."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from radixlm.constrained import ConstraintError, TokenizerVocab, compile_grammar, schema_to_grammar
from radixlm.constrained.testing.walks import accepts_text, compact_json, random_walk

DATA = Path(__file__).resolve().parents[1] / "data" / "jsonschemabench"
PER_SUBSET = 2  # compiled schemas per subset in the default run
MAX_REGEX = 4000  # keep the default run's compile time small: larger ones are in the benchmark


@pytest.fixture(scope="module")
def docs() -> dict[str, dict]:
    if not DATA.is_dir():
        pytest.fail(f"JSONSchemaBench sample not found at {DATA}: it ships beside the checkout "
                    "(tests/data/jsonschemabench)")
    return {f"{p.parent.name}/{p.name}": json.loads(p.read_text()) for p in sorted(DATA.glob("*/*.json"))}


@pytest.fixture(scope="module")
def compiled(docs, tokenizer) -> dict:
    """The subset: per subset, the first PER_SUBSET schemas with a small regex, compiled once."""
    vocab = TokenizerVocab.from_tokenizer(tokenizer)
    out, per_subset = {}, {}
    for name, doc in docs.items():
        subset = name.split("/")[0]
        if per_subset.get(subset, 0) >= PER_SUBSET:
            continue
        try:
            if len(schema_to_grammar(doc["schema"]).lark) > MAX_REGEX:
                continue
        except ConstraintError:
            continue
        out[name] = compile_grammar(vocab, "json_schema", doc["schema"])
        per_subset[subset] = per_subset.get(subset, 0) + 1
    return out


def test_front_end_covers_the_sample(docs):
    covered, errors = 0, []
    for name, doc in docs.items():
        try:
            schema_to_grammar(doc["schema"])
            covered += 1
        except ConstraintError as e:
            errors.append((name, e))
    assert covered / len(docs) >= 0.98, f"only {covered}/{len(docs)} schemas compile to a grammar"
    for name, e in errors:  # every refusal says where
        assert e.pointer is not None and e.pointer.startswith("#"), f"{name}: {e}"


def test_subset_spans_the_sample(compiled):
    assert len({n.split("/")[0] for n in compiled}) >= 15 and len(compiled) >= 30


def test_no_invalid_instance_accepted(docs, compiled, tokenizer):
    valid_ok = valid_n = 0
    for name, grammar in compiled.items():
        for test in docs[name]["tests"]:
            accepted = accepts_text(grammar, tokenizer, compact_json(test["data"]))
            if test["valid"]:
                valid_n, valid_ok = valid_n + 1, valid_ok + accepted
            else:
                assert not accepted, f"{name}: invalid instance accepted: {compact_json(test['data'])[:200]}"
    assert valid_ok / valid_n >= 0.5, f"only {valid_ok}/{valid_n} valid instances accepted"


def test_random_walk_outputs_validate(compiled, tokenizer):
    for name, grammar in compiled.items():
        walk = random_walk(grammar, random.Random(0), max_tokens=60)
        assert walk is not None, f"{name}: the walk could not reach an accepting state"
        text = tokenizer.decode(walk[0])
        assert grammar.validate_output(text) == [], f"{name}: {text[:300]}"
