"""Constrained generation through ``Engine`` (tiny Llama): schemas, regexes, per-request compile
errors and lenient (``strict=False``) validation. Forced text as verified drafts:
``test_speculative.py``."""

from __future__ import annotations

import json
import re
import threading
from pathlib import Path

import jsonschema
import pytest
from radixlm.constrained import ConstraintError, schema_to_grammar

from radixlm import Engine

SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string", "maxLength": 8}, "age": {"type": "integer", "minimum": 0,
                                                                        "maximum": 99}},
    "required": ["name", "age"],
    "additionalProperties": False,
}


@pytest.fixture(scope="module")
def engine(tiny_llama):
    with Engine(tiny_llama, max_total_tokens=8192) as e:
        yield e


@pytest.fixture(autouse=True)
def leak_check(engine):
    yield
    engine.check_no_leak()


def sample(**extra):
    return {"temperature": 1.0, "max_new_tokens": 64, **extra}


def test_json_schema_outputs_validate(engine):
    outs = engine.generate(["Person:"] * 4, [sample(json_schema=SCHEMA, seed=s) for s in range(4)])
    for out in outs:
        assert out["meta_info"]["finish_reason"]["type"] == "stop"
        jsonschema.validate(json.loads(out["text"]), SCHEMA)


def test_regex_and_choices(engine):
    out = engine.generate("Date:", sample(regex=r"20[0-9]{2}-(0[1-9]|1[0-2])", seed=2))
    assert re.fullmatch(r"20[0-9]{2}-(0[1-9]|1[0-2])", out["text"])
    pick = engine.generate("Color:", {"temperature": 0.0, "choices": ["red", "green", "blue"]})
    assert pick["text"] in ("red", "green", "blue")


def test_bad_schema_fails_only_that_request(engine):
    results = {}

    def good():
        results["good"] = engine.generate("Hello", {"temperature": 0.0, "max_new_tokens": 8})

    t = threading.Thread(target=good)
    t.start()
    with pytest.raises(ConstraintError, match="not"):
        engine.generate("Number:", sample(json_schema={"type": "integer", "not": {"multipleOf": 3}}))
    t.join(timeout=60)
    assert results["good"]["meta_info"]["completion_tokens"] == 8


def test_lenient_schema_reports_violations(engine):
    # unbounded above: no finite set of values to check, so lenient mode relaxes the `not`
    schema = {"type": "integer", "minimum": 0, "not": {"multipleOf": 2}}
    outs = engine.generate(["Number:"] * 12, [sample(json_schema=schema, strict=False, seed=s) for s in range(12)])
    for out in outs:
        violations = out["meta_info"]["constraint_violations"]
        assert (json.loads(out["text"]) % 2 != 0) == (violations == []), (out["text"], violations)
    assert any(out["meta_info"]["constraint_violations"] for out in outs)


def test_grammar_request_reports_cached_prefix(engine):
    system = "You are a careful assistant that answers in JSON. " * 12
    first = engine.generate(system + "Alice:", sample(json_schema=SCHEMA, seed=3))
    second = engine.generate(system + "Bob:", sample(json_schema=SCHEMA, seed=4))
    for out in (first, second):
        jsonschema.validate(json.loads(out["text"]), SCHEMA)
    assert second["meta_info"]["cached_tokens"] > 0, second["meta_info"]


BENCH = Path(__file__).resolve().parents[1] / "data" / "jsonschemabench"
BENCH_MAX_REGEX = 3000  # small grammars only: each compiles in well under a second


def _bench_sample() -> list[tuple[str, dict]]:
    """One schema per JSONSchemaBench subset: the first that compiles strictly to a small regex."""
    if not BENCH.is_dir():
        pytest.fail(f"JSONSchemaBench sample not found at {BENCH} (tests/data/jsonschemabench)")
    picked: dict[str, tuple[str, dict]] = {}
    for path in sorted(BENCH.glob("*/*.json")):
        if path.parent.name in picked:
            continue
        schema = json.loads(path.read_text())["schema"]
        try:
            if len(schema_to_grammar(schema).lark) <= BENCH_MAX_REGEX:
                picked[path.parent.name] = (path.name, schema)
        except ConstraintError:
            continue
    return list(picked.values())


def test_bench_schemas_generate_valid_outputs(engine):
    cases = _bench_sample()
    assert len(cases) >= 10
    params = [sample(json_schema=schema, seed=7, max_new_tokens=256) for _, schema in cases]
    outs = engine.generate(["Answer in JSON:"] * len(cases), params)
    for (name, schema), out in zip(cases, outs):
        if out["meta_info"]["finish_reason"]["type"] == "length":
            continue  # cut short by max_new_tokens: a prefix, not a complete instance
        assert not list(jsonschema.validators.validator_for(schema)(schema).iter_errors(json.loads(out["text"]))), name
    assert sum(o["meta_info"]["finish_reason"]["type"] == "stop" for o in outs) >= len(cases) // 3  # random weights ramble inside free strings
