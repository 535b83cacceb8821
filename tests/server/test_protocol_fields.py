"""Protocol details: SGLang's streamed meta fields, reasoning_effort in the template, dropped fields named,
CORS with --allowed-origins, ``GET /`` and ``/version``, and ``--metrics-prefix``."""

from __future__ import annotations

import json

import pytest
import requests
from radixlm.runtime.engine import Engine
from radixlm.runtime.server.app import BackgroundServer
from radixlm.runtime.server.native.api import with_stream_meta
from radixlm.runtime.server.transport.body import IGNORED_HEADER
from radixlm.runtime.server.transport.state import ServerConfig
from radixlm.runtime.server_args import ServerArgs

from radixlm import __version__

# prints the template variable gpt-oss's template reads
TEMPLATE = ("{% for m in messages %}<|{{ m.role }}|>{{ m.content }}\n{% endfor %}"
            "{% if reasoning_effort is defined %}Reasoning: {{ reasoning_effort }}\n{% endif %}"
            "{% if add_generation_prompt %}<|assistant|>{% endif %}")
APP = "https://app.example"
KEY = "sk-test-key-0123456789"
MSGS = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def custom():
    engine = Engine(max_total_tokens=8192, random_seed=0, chat_template=TEMPLATE, allowed_origins=APP,
                    metrics_prefix="sglang")
    srv = BackgroundServer(engine, ServerConfig(port=0, api_key=KEY)).start()
    yield srv
    srv.stop()
    engine.shutdown()


def _auth(**headers: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {KEY}", **headers}


def _sse(resp: requests.Response) -> list[dict]:
    return [json.loads(line[6:]) for line in resp.text.splitlines()
            if line.startswith("data: ") and line != "data: [DONE]"]


def test_generate_stream_chunks_carry_sglang_meta(server):
    resp = requests.post(server.url + "/generate", timeout=60, json={
        "text": "Hello", "stream": True, "return_logprob": True,
        "sampling_params": {"max_new_tokens": 6, "temperature": 0}})
    chunks = _sse(resp)
    assert chunks
    for chunk in chunks:
        meta = chunk["meta_info"]
        assert meta["output_token_logprobs_length"] == len(meta["output_token_logprobs"])  # cumulative chunks
        assert meta["weight_version"] == "default" and meta["total_retractions"] == 0
    assert chunks[-1]["meta_info"]["output_token_logprobs_length"] == chunks[-1]["meta_info"]["completion_tokens"]
    plain = requests.post(server.url + "/generate", timeout=60, json={
        "text": "Hello", "return_logprob": True, "sampling_params": {"max_new_tokens": 3}}).json()
    assert plain["meta_info"]["output_token_logprobs_length"] == 3
    without = _sse(requests.post(server.url + "/generate", timeout=60, json={
        "text": "Hello", "stream": True, "sampling_params": {"max_new_tokens": 2}}))
    assert all("output_token_logprobs_length" not in c["meta_info"] for c in without)


@pytest.mark.unit
def test_logprobs_length_counts_incremental_chunks():
    counts, sent = [], 0
    for delta in ([[-0.1, 5, None]], [], [[-0.2, 6, None], [-0.3, 7, None]]):
        meta = {"output_token_logprobs": delta}
        sent = with_stream_meta(meta, sent, True)
        counts.append(meta["output_token_logprobs_length"])
    assert counts == [1, 1, 3]


@pytest.mark.parametrize("route", ["chat", "responses", "ollama"])
def test_reasoning_effort_reaches_the_template(custom, route):
    tok = custom.engine.tokenizer
    expected = len(tok.encode(tok.apply_chat_template(MSGS, reasoning_effort="high"), add_special_tokens=False))
    plain = len(tok.encode(tok.apply_chat_template(MSGS), add_special_tokens=False))
    assert expected > plain
    if route == "chat":
        out = requests.post(custom.url + "/v1/chat/completions", headers=_auth(), timeout=60, json={
            "messages": MSGS, "max_tokens": 1, "reasoning_effort": "high"})
        assert out.status_code == 200 and IGNORED_HEADER not in out.headers
        assert out.json()["usage"]["prompt_tokens"] == expected
    elif route == "responses":
        out = requests.post(custom.url + "/v1/responses", headers=_auth(), timeout=60, json={
            "input": MSGS, "max_output_tokens": 1, "reasoning": {"effort": "high"}})
        assert out.status_code == 200 and out.json()["usage"]["input_tokens"] == expected
    else:  # Ollama's think level
        out = requests.post(custom.url + "/api/chat", headers=_auth(), timeout=60, json={
            "model": "default", "messages": MSGS, "stream": False, "think": "high", "options": {"num_predict": 1}})
        assert out.status_code == 200 and out.json()["prompt_eval_count"] == expected


def test_reasoning_effort_is_checked(server):
    out = requests.post(server.url + "/v1/chat/completions", timeout=60, json={
        "messages": MSGS, "max_tokens": 1, "reasoning_effort": "extreme"})
    assert out.status_code == 400 and out.json()["error"]["param"] == "reasoning_effort"


def test_dropped_fields_are_named(server):
    out = requests.post(server.url + "/v1/chat/completions", timeout=60, json={
        "messages": MSGS, "max_tokens": 1, "user": "u-1", "metadata": {"k": "v"}, "store": False})
    assert out.status_code == 200
    assert set(out.headers[IGNORED_HEADER].split(",")) == {"user", "metadata", "store"}


def test_cors_preflight_and_headers(custom):
    pre = requests.options(custom.url + "/v1/chat/completions", timeout=30, headers={
        "Origin": APP, "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization, content-type"})
    assert pre.status_code == 204  # no key needed: browsers send none with a preflight
    assert pre.headers["Access-Control-Allow-Origin"] == APP
    assert "POST" in pre.headers["Access-Control-Allow-Methods"]
    assert pre.headers["Access-Control-Allow-Headers"] == "authorization, content-type"
    out = requests.post(custom.url + "/v1/chat/completions", headers=_auth(Origin=APP), timeout=60,
                        json={"messages": MSGS, "max_tokens": 1, "user": "u"})
    assert out.status_code == 200 and out.headers["Access-Control-Allow-Origin"] == APP
    assert IGNORED_HEADER in out.headers["Access-Control-Expose-Headers"]
    stream = requests.post(custom.url + "/v1/chat/completions", headers=_auth(Origin=APP), timeout=60,
                           json={"messages": MSGS, "max_tokens": 1, "stream": True})
    assert stream.headers["Access-Control-Allow-Origin"] == APP
    denied = requests.post(custom.url + "/v1/chat/completions", headers=_auth(Origin=APP), timeout=60,
                           json={"messages": []})
    assert denied.status_code == 400 and denied.headers["Access-Control-Allow-Origin"] == APP


def test_cors_other_origins_refused(custom):
    evil = "https://evil.example"
    pre = requests.options(custom.url + "/v1/models", timeout=30, headers={
        "Origin": evil, "Access-Control-Request-Method": "GET"})
    assert pre.status_code == 403 and "Access-Control-Allow-Origin" not in pre.headers
    out = requests.get(custom.url + "/v1/models", headers=_auth(Origin=evil), timeout=30)
    assert out.status_code == 403 and "Access-Control-Allow-Origin" not in out.headers


def test_no_cors_by_default(server):
    pre = requests.options(server.url + "/v1/models", timeout=30, headers={
        "Origin": APP, "Access-Control-Request-Method": "GET"})
    assert pre.status_code == 403 and "Access-Control-Allow-Origin" not in pre.headers
    same = requests.get(server.url + "/v1/models", timeout=30)
    assert same.status_code == 200 and "Access-Control-Allow-Origin" not in same.headers


def test_root_and_version(server):
    root = requests.get(server.url + "/", timeout=30).json()
    assert root["name"] == "radixlm" and root["version"] == __version__ and root["status"] == "ok"
    assert root["apis"]["anthropic"] == "/v1/messages"
    assert requests.get(server.url + "/version", timeout=30).json() == {"version": __version__}


def test_metrics_prefix(custom):
    requests.post(custom.url + "/v1/chat/completions", headers=_auth(), timeout=60,
                  json={"messages": MSGS, "max_tokens": 1})
    text = requests.get(custom.url + "/metrics", headers=_auth(), timeout=30).text
    names = {line.split("{")[0].split(" ")[0] for line in text.splitlines() if line and not line.startswith("#")}
    assert "sglang:requests_total" in names and "sglang:time_to_first_token_seconds_count" in names
    assert all(n.startswith("sglang:") for n in names), names


@pytest.mark.unit
@pytest.mark.parametrize(("field", "value"), [("allowed_origins", "app.example"), ("allowed_origins", " , "),
                                               ("allowed_origins", "https://a.example/path"),
                                               ("metrics_prefix", "sg-lang"), ("metrics_prefix", "")])
def test_bad_flags_name_the_field(field, value):
    with pytest.raises(ValueError, match=field):
        ServerArgs(**{field: value})


@pytest.mark.unit
def test_flags_on_the_command_line():
    import argparse

    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    args = ServerArgs.from_cli_args(parser.parse_args(["--allowed-origins", "https://a.example,http://localhost:5173",
                                                       "--metrics-prefix", "sglang"]))
    assert (args.allowed_origins, args.metrics_prefix) == ("https://a.example,http://localhost:5173", "sglang")
    assert ServerArgs().metrics_prefix == "radixlm" and ServerArgs().allowed_origins is None
