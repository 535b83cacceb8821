"""Budget-aware completion reuses its last completion while it still ends the document: the same
outputs as a search at every step of the window, with fewer searches (counted, not timed)."""

from __future__ import annotations

import json

import jsonschema
import pytest
from radixlm.runtime.engine.constraints import BudgetClose

from radixlm import Engine

SCHEMA = {"type": "object", "properties": {
    "name": {"type": "string"}, "age": {"type": "integer"}, "tags": {"type": "array", "items": {"type": "string"}},
    "child": {"type": "object", "properties": {"note": {"type": "string"}}, "required": ["note"]}},
    "required": ["name", "age", "tags", "child"], "additionalProperties": False}


@pytest.fixture(scope="module")
def engine(tiny_llama):
    with Engine(tiny_llama, max_total_tokens=8192) as e:
        yield e


def run(engine, monkeypatch, reuse: bool) -> tuple[list[dict], int]:
    searches = [0]
    original = BudgetClose._completion_ids

    def counted(self, room):
        searches[0] += 1
        return original(self, room)

    monkeypatch.setattr(BudgetClose, "_completion_ids", counted)
    if not reuse:
        monkeypatch.setattr(BudgetClose, "_still_completes", lambda self, room: False)
    params = [{"temperature": 1.0, "max_new_tokens": budget, "seed": seed, "json_schema": SCHEMA}
              for budget in (24, 48, 64) for seed in range(4)]
    outs = engine.generate(["Answer:"] * len(params), params)
    monkeypatch.undo()
    return outs, searches[0]


def test_reuse_gives_the_same_outputs_with_fewer_searches(engine, monkeypatch):
    every_step, searched = run(engine, monkeypatch, reuse=False)
    reused, fewer = run(engine, monkeypatch, reuse=True)
    for a, b in zip(every_step, reused):
        assert a["output_ids"] == b["output_ids"]
        assert a["meta_info"]["finish_reason"] == b["meta_info"]["finish_reason"]
        assert a["meta_info"].get("budget_closed") == b["meta_info"].get("budget_closed")
        jsonschema.validate(json.loads(b["text"]), SCHEMA)
    assert fewer * 2 < searched, (fewer, searched)
    engine.check_no_leak()
