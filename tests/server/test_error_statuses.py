"""Every error status of the HTTP server, OpenAI-shaped, and that bad requests never hurt good ones."""

from __future__ import annotations

import asyncio
import json

import aiohttp
import pytest
from radixlm.runtime.engine.engine import Engine
from radixlm.runtime.server.app import BackgroundServer
from radixlm.runtime.server.transport.state import ServerConfig

KEY = "sekrit-key"
AUTH = {"Authorization": f"Bearer {KEY}"}
CONTEXT = 512
MSG = [{"role": "user", "content": "hello"}]


@pytest.fixture(scope="module")
def server():
    engine = Engine(max_total_tokens=8192, random_seed=0, context_length=CONTEXT, max_running_requests=2,
                    max_queued_requests=4)
    srv = BackgroundServer(engine, ServerConfig(port=0, api_key=KEY, max_body_bytes=16 * 1024)).start()
    yield srv
    srv.stop()
    engine.shutdown()


async def _request(url, method, body=None, data=None, headers=None):
    async with aiohttp.ClientSession() as session:
        async with session.request(method, url, json=body, data=data, headers=headers) as resp:
            text = await resp.text()
            return resp.status, (json.loads(text) if "json" in resp.headers.get("Content-Type", "") else text)


def call(srv, path, body=None, *, method=None, data=None, headers=AUTH):
    method = method or ("GET" if body is None and data is None else "POST")
    return asyncio.run(_request(srv.url + path, method, body, data, headers))


def assert_error(result, status: int, param: str | None = None, contains: str | None = None) -> dict:
    got_status, body = result
    assert got_status == status, body
    err = body["error"]
    assert set(err) == {"message", "type", "param", "code"} and isinstance(err["message"], str)
    if param is not None:
        assert err["param"] == param, err
    if contains is not None:
        assert contains in err["message"], err
    return err


def test_401_without_or_with_a_wrong_key(server):
    for headers in (None, {"Authorization": "Bearer wrong"}, {"Authorization": f"Basic {KEY}"}):
        err = assert_error(call(server, "/v1/models", headers=headers), 401)
        assert err["type"] == "authentication_error"
        assert_error(call(server, "/generate", {"text": "hi"}, headers=headers), 401)
    assert call(server, "/health", headers=None)[0] == 200
    assert call(server, "/v1/models")[0] == 200


def test_400_invalid_json_and_wrong_types(server):
    assert_error(call(server, "/generate", data=b"{not json", headers={**AUTH, "Content-Type": "application/json"}),
                 400, contains="not valid JSON")
    assert_error(call(server, "/v1/chat/completions", data=b"[1, 2]",
                      headers={**AUTH, "Content-Type": "application/json"}), 400, contains="object")
    assert_error(call(server, "/v1/chat/completions", {"messages": MSG, "temperature": "hot"}), 400,
                 param="temperature")
    assert_error(call(server, "/v1/chat/completions", {"messages": "hello"}), 400, param="messages")
    assert_error(call(server, "/v1/chat/completions", {"messages": [{"role": "wizard", "content": "x"}]}),
                 400, param="messages[0].role")
    assert_error(call(server, "/v1/completions", {"prompt": 42}), 400, param="prompt")
    # an unknown field is ignored (tests/server/test_lenient_protocol.py; a 400 with strict_api)
    assert call(server, "/v1/completions", {"prompt": "hi", "bogus": 1, "max_tokens": 1})[0] == 200
    assert_error(call(server, "/generate", {"text": "hi", "sampling_params": {"temperature": "x"}}), 400,
                 param="sampling_params.temperature", contains="temperature")
    assert_error(call(server, "/generate", {"text": "hi", "input_ids": [1]}), 400)
    assert_error(call(server, "/v1/chat/completions", {"messages": MSG, "tools": [
        {"type": "function", "function": {"name": "f"}}], "tool_choice": {
        "type": "function", "function": {"name": "g"}}}), 400, param="tool_choice.function.name")


def test_400_out_of_range(server):
    for field, value in (("top_p", 1.5), ("temperature", -1), ("n", 0), ("max_tokens", -1),
                         ("presence_penalty", 3), ("top_logprobs", 50)):
        body = {"messages": MSG, field: value, "logprobs": True}
        assert_error(call(server, "/v1/chat/completions", body), 400, param=field)
    assert_error(call(server, "/generate", {"text": "hi", "sampling_params": {"top_p": 0}}), 400,
                 contains="top_p")
    assert_error(call(server, "/v1/completions", {"prompt": "hi", "logit_bias": {"5": 500}}), 400,
                 param="logit_bias")


def test_400_prompt_longer_than_context(server):
    long_text = "word " * (CONTEXT * 2)
    err = assert_error(call(server, "/v1/chat/completions", {"messages": [{"role": "user", "content": long_text}]}),
                       400, param="messages")
    assert err["code"] == "context_length_exceeded"
    assert_error(call(server, "/v1/completions", {"prompt": long_text, "max_tokens": 4}), 400, contains="context")
    assert_error(call(server, "/generate", {"input_ids": [5] * (CONTEXT + 1)}), 400, contains="context")


def test_400_unsupported_schema_keyword_names_the_pointer(server):
    schema = {"type": "object", "properties": {"tags": {"type": "array", "items": {"type": "object"},
                                                        "uniqueItems": True, "minItems": 2}}}
    fmt = {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}
    err = assert_error(call(server, "/v1/chat/completions", {"messages": MSG, "response_format": fmt,
                                                             "max_tokens": 4}), 400)
    assert "#/properties/tags" in err["message"] and "uniqueItems" in err["message"]
    err = assert_error(call(server, "/generate", {"text": "hi", "sampling_params": {"json_schema": schema}}), 400,
                       param="sampling_params.json_schema")
    assert "#/properties/tags" in err["message"]
    tools = [{"type": "function", "function": {"name": "f", "parameters": schema}}]
    err = assert_error(call(server, "/v1/chat/completions", {"messages": MSG, "tools": tools,
                                                             "tool_choice": "required", "max_tokens": 4}), 400)
    assert err["param"] == "tools[0].function.parameters" and "#/properties/tags" in err["message"]


def test_404_unknown_route_and_model(server):
    assert_error(call(server, "/v2/everything"), 404)
    assert_error(call(server, "/v1/chat/completions", {"model": "gpt-17", "messages": MSG}), 404, param="model")
    assert_error(call(server, "/v1/completions", {"model": "gpt-17", "prompt": "hi"}), 404, param="model")
    assert_error(call(server, "/v1/models/gpt-17"), 404)


def test_413_body_over_the_limit(server):
    err = assert_error(call(server, "/generate", {"text": "x" * (32 * 1024)}), 413)
    assert err["type"] == "request_too_large"


def test_503_when_the_queue_is_full_and_bad_requests_hurt_no_one(server):
    good = {"text": "The keeper", "sampling_params": {"temperature": 0, "max_new_tokens": 24, "ignore_eos": True}}
    want = call(server, "/generate", good)[1]["text"]
    bad = {"text": "x", "sampling_params": {"top_p": 7}}

    async def run():
        async with aiohttp.ClientSession(headers=AUTH) as session:
            async def one(body):
                async with session.post(server.url + "/generate", json=body) as resp:
                    return resp.status, await resp.json()
            return await asyncio.gather(*[one(good if i % 3 else bad) for i in range(30)])

    results = asyncio.run(run())
    statuses = [s for s, _ in results]
    assert 503 in statuses and statuses.count(200) >= 2, statuses
    for i, (status, body) in enumerate(results):
        if i % 3 == 0:
            assert status == 400
        elif status == 200:
            assert body["text"] == want
        else:
            assert status == 503 and body["error"]["code"] == "queue_full"
    status, after = call(server, "/generate", good)
    assert status == 200 and after["text"] == want
