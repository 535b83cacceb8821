"""Ollama's API (``/api/chat``, ``/api/generate``, ``/api/tags``, ``/api/show``) driven by the ``ollama`` client."""

from __future__ import annotations

import json

import jsonschema
import ollama
import pytest
import requests
from radixlm.runtime.server.transport.body import IGNORED_HEADER

PERSON = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 6},
                                           "age": {"type": "integer", "minimum": 0, "maximum": 99}},
          "required": ["name", "age"], "additionalProperties": False}
WEATHER = {"type": "object", "properties": {"city": {"enum": ["Paris", "Tokyo"]}}, "required": ["city"],
           "additionalProperties": False}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather", "parameters": WEATHER}}]
HI = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def client(server):
    return ollama.Client(host=server.url, timeout=60)


def test_chat_not_streamed(client):
    out = client.chat(model="default", messages=HI, options={"num_predict": 5, "temperature": 0}, stream=False)
    assert out.done and out.message.role == "assistant"
    assert out.done_reason in ("stop", "length")
    assert (out.done_reason == "length") == (out.eval_count == 5)
    assert out.prompt_eval_count > 0 and out.total_duration > 0


def test_chat_stream_concatenates(client):
    lines = list(client.chat(model="default", messages=HI, options={"num_predict": 6, "temperature": 0},
                             stream=True))
    assert all(not line.done for line in lines[:-1]) and lines[-1].done
    text = "".join(line.message.content for line in lines)
    again = client.chat(model="default", messages=HI, options={"num_predict": 6, "temperature": 0}, stream=False)
    assert text == again.message.content and lines[-1].eval_count == again.eval_count


def test_chat_format_schema(client):
    out = client.chat(model="default", messages=HI, format=PERSON, options={"num_predict": 60, "temperature": 0})
    assert out.done_reason == "stop"
    jsonschema.validate(json.loads(out.message.content), PERSON)


def test_chat_tool_calls_as_objects(client):
    history = [{"role": "user", "content": "Weather in Paris?"}]
    out = client.chat(model="default", messages=history, tools=TOOLS, options={"num_predict": 60}, stream=False)
    for call in out.message.tool_calls or []:  # tool_choice is auto: the noise model may or may not call
        assert call.function.name == "get_weather"
        jsonschema.validate(dict(call.function.arguments), WEATHER)
    history += [{"role": "assistant", "content": "", "tool_calls": [
        {"function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
        {"role": "tool", "content": "sunny", "tool_name": "get_weather"}]
    second = client.chat(model="default", messages=history, options={"num_predict": 3})
    assert second.done


def test_generate_with_format_and_stream(client):
    out = client.generate(model="default", prompt="A person:", format=PERSON,
                          options={"num_predict": 60, "temperature": 0})
    jsonschema.validate(json.loads(out.response), PERSON)
    options = {"num_predict": 4, "temperature": 0}
    parts = list(client.generate(model="default", prompt="Once", stream=True, options=options))
    whole = client.generate(model="default", prompt="Once", options=options)
    assert parts[-1].done and all(not p.done for p in parts[:-1])
    assert "".join(p.response for p in parts) == whole.response and parts[-1].eval_count == whole.eval_count


def test_generate_raw_skips_the_template(client):
    templated = client.generate(model="default", prompt="Once", options={"num_predict": 1})
    raw = client.generate(model="default", prompt="Once", raw=True, options={"num_predict": 1})
    assert raw.prompt_eval_count < templated.prompt_eval_count


def test_generate_empty_prompt_loads(client):
    out = client.generate(model="default", prompt="")
    assert out.done and out.done_reason == "load"


def test_list_and_show_describe_the_model(client, server):
    (model,) = client.list().models
    assert model.model == server.engine.model_path.rstrip("/").split("/")[-1]
    assert model.details.family == "llama" and model.size > 0
    shown = client.show(model.model + ":latest")
    count = sum(p.numel() for p in server.engine.runner.model.parameters())
    assert shown.modelinfo["general.parameter_count"] == count
    assert shown.modelinfo["llama.context_length"] == server.engine.model_config.context_len
    assert shown.template == server.engine.tokenizer.chat_template
    assert "completion" in shown.capabilities


def test_errors_have_ollama_shape(server, client):
    with pytest.raises(ollama.ResponseError) as e:
        client.chat(model="nope", messages=HI)
    assert e.value.status_code == 404
    resp = requests.post(server.url + "/api/chat", json={"model": "default", "messages": HI, "stream": False,
                                                         "options": {"temperature": 9}}, timeout=30)
    assert resp.status_code == 400 and "options.temperature" in resp.json()["error"]
    resp = requests.post(server.url + "/api/chat", json={"model": "default", "stream": False, "messages": [
        {"role": "user", "content": "x", "images": ["aGk="]}]}, timeout=30)
    assert resp.status_code == 400 and "messages[0].images" in resp.json()["error"]
    for raw in (False, True):  # past the context: a 400 naming the option, templated or raw
        resp = requests.post(server.url + "/api/generate", timeout=30, json={
            "model": "default", "prompt": "x", "raw": raw, "stream": False, "options": {"num_predict": 99999}})
        assert resp.status_code == 400 and "options.num_predict" in resp.json()["error"], resp.text


def test_runner_options_are_named(server):
    resp = requests.post(server.url + "/api/chat", timeout=30, json={
        "model": "default", "messages": HI, "stream": False, "keep_alive": "5m",
        "options": {"num_ctx": 2048, "num_predict": 2}})
    assert resp.status_code == 200
    assert set(resp.headers[IGNORED_HEADER].split(",")) == {"keep_alive", "options.num_ctx"}
