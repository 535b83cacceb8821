"""``json_key_order`` through ``Engine.generate`` (a sampling-params dict or a ``SamplingParams``)
and the DSL (``gen(..., json_key_order=...)``): schema order by default on every seed, other
layouts on some seed with ``"any"``, and a bad value refused before anything runs."""

from __future__ import annotations

import json

import jsonschema
import pytest
from radixlm.runtime.sampling_params import SamplingParams

import radixlm as sgl
from radixlm import Engine

SCHEMA = {"type": "object", "properties": {"b": {"type": "boolean"}, "a": {"type": "boolean"}},
          "required": ["b", "a"]}
SEEDS = range(8)


@pytest.fixture(scope="module")
def engine(tiny_llama):
    with Engine(tiny_llama, max_total_tokens=8192, random_seed=0) as e:
        yield e


def _params(seed: int, order: str | None) -> dict:
    params = {"temperature": 1.0, "seed": seed, "max_new_tokens": 40, "json_schema": SCHEMA}
    return params if order is None else {**params, "json_key_order": order}


@sgl.function
def _extract(s, order):
    s += "JSON:" + sgl.gen("doc", max_tokens=40, temperature=1.0, json_schema=SCHEMA, json_key_order=order)


def _engine_values(engine, order: str | None) -> list[dict]:
    return [json.loads(engine.generate("JSON:", _params(seed, order))["text"]) for seed in SEEDS]


@pytest.mark.parametrize("order", [None, "schema"], ids=["default", "schema"])
def test_engine_writes_schema_order(engine, order):
    assert all(list(v) == ["b", "a"] for v in _engine_values(engine, order))


def test_engine_any_order(engine):
    values = _engine_values(engine, "any")
    for value in values:
        jsonschema.validate(value, SCHEMA)
    assert any(list(v) != ["b", "a"] for v in values), values
    params = SamplingParams(**_params(0, "any"))  # a SamplingParams object carries it too
    assert json.loads(engine.generate("JSON:", params)["text"]) == values[0]


def test_dsl_gen_passes_the_order_through(engine):
    schema_order = [json.loads(_extract.run(order="schema", backend=engine)["doc"]) for _ in range(4)]
    assert all(list(v) == ["b", "a"] for v in schema_order)
    any_order = [json.loads(_extract.run(order="any", backend=engine)["doc"]) for _ in range(8)]
    for value in any_order:
        jsonschema.validate(value, SCHEMA)
    assert any(list(v) != ["b", "a"] for v in any_order), any_order


def test_bad_values_are_refused_up_front(engine):
    with pytest.raises(ValueError, match="json_key_order"):
        engine.generate("JSON:", _params(0, "sorted"))
    with pytest.raises(ValueError, match="json_key_order"):
        sgl.gen("doc", json_schema=SCHEMA, json_key_order="sorted")
