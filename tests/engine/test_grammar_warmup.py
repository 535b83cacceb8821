"""The grammar backend starts with the engine, in the background (``--grammar-warmup``): built once,
its per-vocabulary tables built once, requests served while it starts, a clean shutdown mid-start.

A gate holds the backend's build where a test needs the engine caught mid-start; nothing is timed."""

from __future__ import annotations

import json

import jsonschema
from grammar_gate import Gate, in_thread
from polling import wait_for

from radixlm import Engine

SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string", "maxLength": 8}, "age": {"type": "integer"},
                   "kind": {"enum": ["cat", "dog"]}, "tags": {"type": "array", "items": {"type": "string"}}},
    "required": ["name", "age", "kind", "tags"],
    "additionalProperties": False,
}
GREEDY = {"temperature": 0, "max_new_tokens": 48, "json_schema": json.dumps(SCHEMA)}


def check_answer(out: dict) -> None:
    jsonschema.validate(json.loads(out["text"]), SCHEMA)  # at the token budget too: the grammar closes it


def test_backend_and_tables_are_built_once_at_start(tiny_llama):
    with Engine(tiny_llama, max_total_tokens=4096) as engine:
        start = engine._grammar._start
        assert start is not None, "the engine starts the backend with itself"
        assert start.join(120)
        state = engine.get_stats()["grammar_backend"]
        assert state["state"] == "ready" and state["error"] is None
        assert state["warm_up"]["compile"] == "ok" and state["warm_up"]["masks"] > 10  # the walk went deep
        backend = engine._grammar.backend()
        tables_built = backend.vocab.tables.builds
        assert tables_built > 0 and backend.stats["misses"] == 0  # the warm-up compile bypasses the cache

        check_answer(engine.generate("A pet:", GREEDY))

        assert start.builds == 1 and engine._grammar._start is start and engine._grammar.backend() is backend
        assert backend.vocab.tables.builds == tables_built, "the first request built a vocabulary table"
        assert backend.stats["misses"] == 1 and backend.stats["builds"] == 1
        engine.check_no_leak()


def test_requests_are_served_while_the_backend_starts(tiny_llama, monkeypatch):
    gate = Gate(monkeypatch)
    with Engine(tiny_llama, max_total_tokens=4096) as engine:
        assert gate.entered.wait(60)
        thread, box = in_thread(engine.generate, "A pet:", GREEDY)
        wait_for(lambda: engine.get_stats()["num_queued_reqs"] == 1)  # waiting for its backend
        plain = engine.generate("Hello", {"temperature": 0, "max_new_tokens": 8})  # served meanwhile
        assert len(plain["output_ids"]) == 8
        assert engine.get_stats()["grammar_backend"]["state"] == "starting" and "result" not in box

        gate.open()
        thread.join(120)
        assert "error" not in box, box.get("error")
        check_answer(box["result"])
        warm = engine.generate("A pet:", GREEDY)  # the same request once everything is warm
        assert box["result"]["output_ids"] == warm["output_ids"]
        assert len(gate.built) == 1 and engine._grammar._start.builds == 1
        assert gate.built[0].stats["misses"] == 1 and gate.built[0].stats["hits"] == 1
        engine.check_no_leak()


def test_shutdown_while_the_backend_starts_is_clean(tiny_llama, monkeypatch):
    gate = Gate(monkeypatch)
    engine = Engine(tiny_llama, max_total_tokens=4096)
    start = engine._grammar._start
    assert gate.entered.wait(60)
    thread, box = in_thread(engine.generate, "A pet:", GREEDY)
    wait_for(lambda: engine.get_stats()["num_queued_reqs"] == 1)
    engine.shutdown()  # returns with the build still held at the gate
    thread.join(60)
    assert isinstance(box.get("error"), RuntimeError)
    assert not gate.built

    gate.open()  # the build ends after the shutdown: its backend is shut down at once
    assert start.join(120)
    assert len(gate.built) == 1 and start.state()["state"] == "failed"
    pool = gate.built[0].pool
    wait_for(lambda: not pool.worker_pids() and not pool._workers)  # every worker killed and reaped


def test_no_grammar_warmup_starts_the_backend_on_the_first_constrained_request(tiny_llama):
    with Engine(tiny_llama, max_total_tokens=4096, grammar_warmup=False) as engine:
        assert engine.get_stats()["grammar_backend"]["state"] == "not started"
        engine.generate("Hello", {"temperature": 0, "max_new_tokens": 4})
        assert engine._grammar._start is None
        check_answer(engine.generate("A pet:", GREEDY))
        start = engine._grammar._start
        assert start.join(120) and start.builds == 1
        state = engine.get_stats()["grammar_backend"]
        assert state["state"] == "ready" and state["warm_up"] is None
        engine.check_no_leak()
