"""Honest budgets through ``Engine`` and the DSL: an output closed by budget-aware completion
finishes as ``length`` with ``meta_info["budget_closed"]`` (its text still parses, streamed or not);
``budget_aware_completion=False`` lets it run to the budget unclosed (``gen(...)`` passes it on)."""

from __future__ import annotations

import json

import jsonschema
import pytest

import radixlm as sgl
from radixlm import Engine

SCHEMA = {"type": "object", "properties": {
    "name": {"type": "string"}, "tags": {"type": "array", "items": {"type": "string"}}},
    "required": ["name", "tags"]}
SEEDS = range(4)


@pytest.fixture(scope="module")
def engine(tiny_llama):
    with Engine(tiny_llama, max_total_tokens=8192, random_seed=0) as e:
        yield e


def _params(seed: int, budget_aware: bool) -> dict:
    return {"temperature": 1.0, "seed": seed, "max_new_tokens": 24, "json_schema": SCHEMA,
            "budget_aware_completion": budget_aware}


def _whole(engine, seed: int, budget_aware: bool) -> tuple[str, dict]:
    out = engine.generate("Answer:", _params(seed, budget_aware))
    return out["text"], out["meta_info"]


def _streamed(engine, seed: int, budget_aware: bool) -> tuple[str, dict]:
    text, meta = "", {}
    for chunk in engine.generate("Answer:", _params(seed, budget_aware), stream=True):
        text, meta = text + chunk["text"], chunk["meta_info"]
    return text, meta


@sgl.function
def _extract(s, budget_aware):
    s += "Answer:" + sgl.gen("doc", max_tokens=24, temperature=1.0, json_schema=SCHEMA,
                             budget_aware_completion=budget_aware)


PATHS = {"whole": _whole, "stream": _streamed}


@pytest.mark.parametrize("path", sorted(PATHS))
def test_engine_reports_a_close_as_length(engine, path):
    results = [PATHS[path](engine, s, True) for s in SEEDS]
    for text, meta in results:
        closed = meta.get("budget_closed")
        if closed is not None:
            assert meta["finish_reason"]["type"] == "length" and closed == {"closed": True, "tokens": closed["tokens"]}
            assert 1 <= closed["tokens"] <= meta["completion_tokens"] <= 24
        else:
            assert meta["finish_reason"]["type"] == "stop", (text, meta)
        jsonschema.validate(json.loads(text), SCHEMA)
    assert any("budget_closed" in meta for _, meta in results)


@pytest.mark.parametrize("path", sorted(PATHS))
def test_engine_without_budget_awareness_never_closes(engine, path):
    results = [PATHS[path](engine, s, False) for s in SEEDS]
    assert all("budget_closed" not in meta for _, meta in results)
    assert any(meta["finish_reason"]["type"] == "length" for _, meta in results)


def test_dsl_gen_passes_budget_awareness_through(engine):
    on = [_extract.run(budget_aware=True, backend=engine) for _ in range(3)]
    off = [_extract.run(budget_aware=False, backend=engine) for _ in range(3)]
    for s in on:
        meta = s.get_meta_info("doc")
        assert ("budget_closed" in meta) == (meta["finish_reason"]["type"] == "length"), meta
        jsonschema.validate(json.loads(s["doc"]), SCHEMA)
    assert any("budget_closed" in s.get_meta_info("doc") for s in on)
    assert all("budget_closed" not in s.get_meta_info("doc") for s in off)
    assert any(s.get_meta_info("doc")["finish_reason"]["type"] == "length" for s in off)
