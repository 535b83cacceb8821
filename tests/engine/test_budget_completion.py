"""Budget-aware completion: constrained outputs parse whenever ``max_new_tokens`` allows a valid
document at all (random weights at temperature 1 ramble inside strings until the budget ends)."""

from __future__ import annotations

import json

import jsonschema
import pytest

from radixlm import Engine

SCHEMA = {"type": "object", "properties": {
    "name": {"type": "string"}, "tags": {"type": "array", "items": {"type": "string"}},
    "child": {"type": "object", "properties": {"note": {"type": "string"}}, "required": ["note"]}},
    "required": ["name", "tags", "child"]}


@pytest.fixture(scope="module")
def engine(tiny_llama):
    with Engine(tiny_llama, max_total_tokens=8192) as e:
        yield e


def _closed_or_stopped(meta: dict) -> bool:
    """A closed output finishes as ``length`` and says so; one the model completed, as ``stop``."""
    if "budget_closed" in meta:
        return meta["finish_reason"]["type"] == "length" and meta["budget_closed"]["tokens"] >= 1
    return meta["finish_reason"]["type"] == "stop"


def _run(engine, budget: int, seeds: range, **extra) -> list[dict]:
    params = [{"temperature": 1.0, "max_new_tokens": budget, "seed": s, "json_schema": SCHEMA, **extra}
              for s in seeds]
    return engine.generate(["Answer:"] * len(params), params)


@pytest.mark.parametrize("budget", [24, 40, 64])
def test_every_output_parses_within_small_budgets(engine, budget):
    outs = _run(engine, budget, range(6))
    for out in outs:
        meta = out["meta_info"]
        assert _closed_or_stopped(meta), (budget, out["text"], meta)
        assert meta["completion_tokens"] <= budget
        jsonschema.validate(json.loads(out["text"]), SCHEMA)


def test_without_it_outputs_are_cut_mid_value(engine):
    outs = _run(engine, 24, range(6), budget_aware_completion=False)
    cut = [o for o in outs if o["meta_info"]["finish_reason"]["type"] == "length"]
    assert cut, "random weights were expected to run out of budget inside a string"
    for out in cut:
        with pytest.raises(json.JSONDecodeError):
            json.loads(out["text"])


def test_a_budget_below_any_valid_document_ends_as_length_and_says_so(engine):
    # The shortest valid document is {"name":"","tags":[],"child":{"note":""}}: more than 4 tokens.
    (out,) = _run(engine, 4, range(1))
    meta = out["meta_info"]
    assert meta["finish_reason"]["type"] == "length"
    assert any("max_new_tokens ran out" in n for n in meta.get("constraint_notes", [])), meta


def test_regex_and_ebnf_close_too(engine):
    params = [{"temperature": 1.0, "max_new_tokens": 12, "seed": s, "regex": r"\[([a-z]+,)*[a-z]+\]"} for s in range(4)]
    params += [{"temperature": 1.0, "max_new_tokens": 16, "seed": s,
                "ebnf": 'root ::= "(" expr ")"\nexpr ::= [a-z]+ | "(" expr ")"'} for s in range(4)]
    outs = engine.generate(["x"] * len(params), params)
    for p, out in zip(params, outs):
        assert _closed_or_stopped(out["meta_info"]), (p, out["text"])
        assert not out["meta_info"].get("constraint_violations")


BOUNDED = {"type": "object", "properties": {  # plain bounded strings: counted by the matcher
    "code": {"type": "string", "minLength": 3, "maxLength": 4},
    "tags": {"type": "array", "items": {"type": "string", "minLength": 1, "maxLength": 6}, "minItems": 1}},
    "required": ["code", "tags"]}


@pytest.mark.parametrize("budget", [24, 48])
def test_counted_strings_hold_their_bounds_and_close_within_budget(engine, budget):
    params = [{"temperature": 1.0, "max_new_tokens": budget, "seed": s, "json_schema": BOUNDED} for s in range(6)]
    for out in engine.generate(["Answer:"] * len(params), params):
        assert _closed_or_stopped(out["meta_info"]), out["text"]
        assert out["meta_info"]["completion_tokens"] <= budget
        jsonschema.validate(json.loads(out["text"]), BOUNDED)
