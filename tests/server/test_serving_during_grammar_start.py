"""The server answers at once while the grammar backend starts in the background: ``/health`` and
unconstrained requests go through, ``/get_server_info`` says ``starting`` then ``ready``, and a
schema request sent during the start waits for it and gets a valid answer."""

from __future__ import annotations

import json
import urllib.request

import jsonschema
from grammar_gate import Gate, in_thread
from polling import wait_for
from radixlm.runtime.engine import Engine
from radixlm.runtime.server.app import BackgroundServer
from radixlm.runtime.server.transport.state import ServerConfig

SCHEMA = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 10}, "year": {"type": "integer"}},
          "required": ["city", "year"], "additionalProperties": False}


def call(srv: BackgroundServer, path: str, body: dict | None = None) -> tuple[int, dict]:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(srv.url + path, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as resp:
        return resp.status, json.loads(resp.read())


def chat(srv: BackgroundServer, schema: dict | None) -> tuple[int, dict]:
    model = call(srv, "/v1/models")[1]["data"][0]["id"]
    body = {"model": model, "messages": [{"role": "user", "content": "A city?"}], "max_tokens": 32, "temperature": 0}
    if schema is not None:
        body["response_format"] = {"type": "json_schema", "json_schema": {"name": "city", "schema": schema}}
    return call(srv, "/v1/chat/completions", body)


def backend_state(srv: BackgroundServer) -> str:
    return call(srv, "/get_server_info")[1]["stats"]["grammar_backend"]["state"]


def test_server_serves_while_the_grammar_backend_starts(tiny_llama, monkeypatch):
    gate = Gate(monkeypatch)
    engine = Engine(tiny_llama, max_total_tokens=4096)
    srv = BackgroundServer(engine, ServerConfig(port=0)).start()
    try:
        assert gate.entered.wait(60)
        assert call(srv, "/health") == (200, {"status": "ok"})
        assert backend_state(srv) == "starting"
        status, plain = chat(srv, None)
        assert status == 200 and plain["choices"][0]["message"]["content"]
        thread, box = in_thread(chat, srv, SCHEMA)
        wait_for(lambda: engine.get_stats()["num_queued_reqs"] == 1)  # waiting for the backend
        assert backend_state(srv) == "starting" and "result" not in box

        gate.open()
        thread.join(120)
        assert "error" not in box, box.get("error")
        status, out = box["result"]
        assert status == 200
        jsonschema.validate(json.loads(out["choices"][0]["message"]["content"]), SCHEMA)
        wait_for(lambda: backend_state(srv) == "ready", timeout=120)
        assert len(gate.built) == 1
    finally:
        gate.open()
        srv.stop()
        engine.shutdown()
