"""Bad fields are 400s naming the field as the client wrote it (issue 47, item 10): a lone surrogate
anywhere in a body, ``chat_template_kwargs`` overriding the server's template variables on
``/tokenize``, ``json_schema: false``, and the OpenAI routes' own names for the engine's fields."""

from __future__ import annotations

import asyncio
import json

import aiohttp
import pytest
from radixlm.runtime.engine.engine import Engine
from radixlm.runtime.server.app import BackgroundServer
from radixlm.runtime.server.transport.state import ServerConfig

MSG = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def server():
    engine = Engine(max_total_tokens=4096, random_seed=0, context_length=512)
    with BackgroundServer(engine, ServerConfig(port=0)) as srv:
        yield srv
    engine.shutdown()


def post(srv, path: str, raw: str) -> tuple[int, dict]:
    """POST ``raw`` JSON text as it is (escapes such as ``\\ud800`` kept)."""
    async def go():
        async with aiohttp.ClientSession() as session:
            async with session.post(srv.url + path, data=raw.encode(),
                                    headers={"Content-Type": "application/json"}) as resp:
                return resp.status, json.loads(await resp.text())

    return asyncio.run(go())


def assert_400(result, param: str, code: str | None = None) -> dict:
    status, body = result
    assert status == 400, body
    err = body["error"]
    assert err["param"] == param, err
    if code is not None:
        assert err["code"] == code, err
    return err


LONE = "a\\ud800b"  # JSON text: the escape of a lone high surrogate
SURROGATE_CASES = [
    ("/generate", f'{{"text": "{LONE}", "sampling_params": {{"max_new_tokens": 1}}}}', "text"),
    ("/generate", f'{{"text": "ok", "sampling_params": {{"max_new_tokens": 1, "stop": ["x", "{LONE}"]}}}}',
     "sampling_params.stop[1]"),
    ("/v1/completions", f'{{"prompt": "{LONE}", "max_tokens": 1}}', "prompt"),
    ("/v1/chat/completions", f'{{"messages": [{{"role": "user", "content": "{LONE}"}}], "max_tokens": 1}}',
     "messages[0].content"),
    ("/v1/chat/completions", '{"messages": [{"role": "user", "content": "\\udc00"}], "max_tokens": 1}',
     "messages[0].content"),
    ("/tokenize", f'{{"prompt": "{LONE}"}}', "prompt"),
]


@pytest.mark.parametrize("path,raw,param", SURROGATE_CASES)
def test_a_lone_surrogate_is_a_400_naming_its_field(server, path, raw, param):
    err = assert_400(post(server, path, raw), param, code="invalid_unicode")
    assert "surrogate" in err["message"]


def test_a_surrogate_pair_is_text(server):
    status, out = post(server, "/tokenize", '{"prompt": "emoji \\ud83d\\ude00"}')
    assert status == 200 and out["count"] > 0, out


@pytest.mark.parametrize("key", ["messages", "tools", "add_generation_prompt"])
def test_tokenize_refuses_template_variables_the_server_sets(server, key):
    raw = json.dumps({"messages": MSG, "chat_template_kwargs": {key: []}})
    assert_400(post(server, "/tokenize", raw), f"chat_template_kwargs.{key}")
    status, out = post(server, "/tokenize", json.dumps({"messages": MSG, "chat_template_kwargs": {"x": 1}}))
    assert status == 200 and out["count"] > 0, out


@pytest.mark.parametrize("value", ["false", '"false"'])
def test_json_schema_false_is_refused(server, value):
    raw = f'{{"text": "hi", "sampling_params": {{"max_new_tokens": 1, "json_schema": {value}}}}}'
    assert_400(post(server, "/generate", raw), "sampling_params.json_schema")


def test_json_schema_true_means_any_json(server):
    raw = '{"text": "hi", "sampling_params": {"max_new_tokens": 4, "json_schema": true}}'
    status, out = post(server, "/generate", raw)
    assert status == 200, out


OPENAI_NAME_CASES = [  # (route, body, the param, a name the message must use, one it must not)
    ("/v1/completions", {"prompt": "hi", "max_tokens": 100000}, "max_tokens", "max_tokens", "max_new_tokens"),
    ("/v1/completions", {"prompt": "hi", "max_tokens": 2, "min_tokens": 5}, "min_tokens", "max_tokens",
     "min_new_tokens"),
    ("/v1/chat/completions", {"messages": MSG, "max_completion_tokens": 2, "min_tokens": 5}, "min_tokens",
     "max_completion_tokens", "max_new_tokens"),
    ("/v1/completions", {"prompt": [[1, 2], [99999999]], "max_tokens": 2}, "prompt", "prompt", "input_ids"),
    ("/v1/completions", {"prompt": "hi", "max_tokens": 2, "guided_choice": []}, "guided_choice", "", "\0"),
]


@pytest.mark.parametrize("path,body,param,used,unused", OPENAI_NAME_CASES)
def test_openai_routes_name_fields_as_the_client_wrote_them(server, path, body, param, used, unused):
    err = assert_400(post(server, path, json.dumps(body)), param)
    assert used in err["message"] and unused not in err["message"], err


@pytest.mark.parametrize("path,body,param", [
    ("/generate", {"text": "hi", "sampling_params": {"max_new_tokens": 2, "regex": "("}}, "sampling_params.regex"),
    ("/generate", {"text": "hi", "sampling_params": {"max_new_tokens": 2, "ebnf": "x"}}, "sampling_params.ebnf"),
    ("/v1/chat/completions", {"messages": MSG, "max_tokens": 2, "regex": "("}, "regex"),
    ("/v1/completions", {"prompt": "hi", "max_tokens": 2, "guided_regex": "("}, "guided_regex"),
])
def test_constraint_errors_name_their_field(server, path, body, param):
    assert_400(post(server, path, json.dumps(body)), param)


@pytest.mark.parametrize("path,raw,param", [
    ("/generate", '{"text": "hi", "sampling_params": {"seed": %s}}', "sampling_params.seed"),
    ("/v1/chat/completions", '{"messages": [{"role": "user", "content": "hi"}], "logit_bias": {"5": -%s}}',
     "logit_bias.5"),
    ("/v1/completions", '{"prompt": [1, 2, %s]}', "prompt[2]"),
])
def test_an_integer_too_long_to_convert_is_named(server, path, raw, param):
    err = assert_400(post(server, path, raw % ("9" * 5000)), param)
    assert "5000 digits" in err["message"], err


def test_a_grammar_with_no_finite_string_is_a_400(server):
    err = assert_400(post(server, "/generate", '{"text": "hi", "sampling_params": {"max_new_tokens": 2, '
                                               '"ebnf": "root ::= root"}}'), "sampling_params.ebnf")
    assert "rule(s) root never end" in err["message"], err
