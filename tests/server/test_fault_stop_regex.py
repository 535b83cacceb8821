"""Fault: a stop regex cannot stall the server. ``(a*)*b`` over up to 4,000 forced ``a`` tokens leaves
``/health`` and other requests answered while it runs, and the pattern count and size limits are
400s naming ``stop_regex`` on ``/generate`` and ``/v1/completions``. Nothing depends on the
machine's speed: the long request runs until ``PROBES`` probes have been answered, then it is
aborted (a probe costs a few decode steps, far fewer than the request's 4,000, whatever the speed)."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request

import pytest
from radixlm.runtime.engine.engine import Engine
from radixlm.runtime.server.app import BackgroundServer
from radixlm.runtime.server.transport.state import ServerConfig

GUARD_S = 120  # a hang guard only: nothing is asserted on time
PROBES = 5
LONG_TOKENS = 4000


@pytest.fixture(scope="module")
def server(tiny_llama):
    with Engine(tiny_llama, max_total_tokens=8192) as engine, \
            BackgroundServer(engine, ServerConfig(port=0)) as srv:
        srv.a_token = next(i for i in range(engine.tokenizer.vocab_size) if engine.tokenizer.decode([i]) == "a")
        yield srv


def call(srv, path: str, body: dict | None = None) -> tuple[int, dict]:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(srv.url + path, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=GUARD_S) as resp:
            return resp.status, json.loads(resp.read() or b"{}")
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_a_pathological_stop_regex_leaves_the_server_live(server):
    forced = {"temperature": 0.0, "logit_bias": {str(server.a_token): 100.0}, "ignore_eos": True}
    long_body = {"text": "x", "rid": "pathological", "sampling_params": {
        **forced, "max_new_tokens": LONG_TOKENS, "stop_regex": "(a*)*b"}}
    result: list = []
    worker = threading.Thread(target=lambda: result.append(call(server, "/generate", long_body)), daemon=True)
    worker.start()
    answered = others = 0
    for _ in range(PROBES):  # each answered while the long request runs (a stall trips the guard)
        status, _ = call(server, "/health")
        answered += status == 200
        status, out = call(server, "/generate", {"text": "hi", "sampling_params": {"max_new_tokens": 2}})
        others += status == 200
    still_running = worker.is_alive()
    call(server, "/abort_request", {"rid": "pathological"})
    worker.join(GUARD_S)
    assert answered == others == PROBES and still_running, (answered, others, still_running)
    status, out = result[0]
    text, finish = out["text"], out["meta_info"]["finish_reason"]["type"]
    assert status == 200 and finish == "abort" and text == "a" * len(text), out  # never stopped by the regex
    stopped = call(server, "/generate", {"text": "x", "sampling_params": {
        **forced, "max_new_tokens": 40, "stop_regex": ["(a*)*b", "a{30}"]}})[1]
    assert stopped["text"] == "" and stopped["meta_info"]["finish_reason"]["matched"] == "a" * 30


LIMIT_CASES = {
    "too many patterns": [f"x{i}" for i in range(17)],
    "far too many patterns": [f"x{i}" for i in range(100_000)],
    "too many states": "a{5000}",
    "exponential DFA": "(ab|cd){300}",
    "backreference": r"(a)\1",
    "lookahead": "a(?=b)",
}


@pytest.mark.parametrize("case", sorted(LIMIT_CASES))
@pytest.mark.parametrize("route", ["/generate", "/v1/completions"])
def test_stop_regex_limits_are_400s_naming_the_field(server, route, case):
    patterns = LIMIT_CASES[case]
    if route == "/generate":
        body = {"text": "hi", "sampling_params": {"max_new_tokens": 2, "stop_regex": patterns}}
    else:
        body = {"prompt": "hi", "max_tokens": 2, "stop_regex": patterns}
    status, out = call(server, route, body)
    assert status == 400, out
    assert "stop_regex" in out["error"]["param"] and "stop_regex" in out["error"]["message"]
