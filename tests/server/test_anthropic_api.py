"""Anthropic's ``/v1/messages`` against a live server, driven by the official ``anthropic`` client."""

from __future__ import annotations

import anthropic
import jsonschema
import pytest
import requests

WEATHER = {"type": "object", "properties": {"city": {"enum": ["Paris", "Tokyo"]}}, "required": ["city"],
           "additionalProperties": False}
TOOLS = [{"name": "get_weather", "description": "Weather in a city", "input_schema": WEATHER}]
ASK = [{"role": "user", "content": "Weather in Paris?"}]


@pytest.fixture(scope="module")
def client(server):
    return anthropic.Anthropic(base_url=server.url, api_key="unused", max_retries=0, timeout=60)


def test_system_and_text(client):
    out = client.messages.create(model="default", max_tokens=6, system="Be terse.", messages=ASK)
    assert out.type == "message" and out.role == "assistant" and out.id.startswith("msg_")
    assert [b.type for b in out.content] == ["text"]
    assert out.stop_reason in ("end_turn", "max_tokens")
    assert (out.stop_reason == "max_tokens") == (out.usage.output_tokens == 6)
    assert out.usage.input_tokens > 0


def test_system_blocks_render_like_a_string(client, server):
    one = requests.post(server.url + "/v1/messages", timeout=60, json={
        "model": "default", "max_tokens": 1, "temperature": 0, "system": "Be terse.", "messages": ASK}).json()
    two = requests.post(server.url + "/v1/messages", timeout=60, json={
        "model": "default", "max_tokens": 1, "temperature": 0,
        "system": [{"type": "text", "text": "Be "}, {"type": "text", "text": "terse."}], "messages": ASK}).json()
    total = [m["usage"]["input_tokens"] + m["usage"]["cache_read_input_tokens"] for m in (one, two)]
    assert total[0] == total[1] and one["content"] == two["content"]


def test_cache_read_counts_the_repeated_prompt(client):
    messages = [{"role": "user", "content": "A long enough prompt about caching " * 8}]
    client.messages.create(model="default", max_tokens=2, messages=messages)
    again = client.messages.create(model="default", max_tokens=2, messages=messages)
    assert again.usage.cache_read_input_tokens > 0


def test_stop_sequence_is_reported(client):
    out = client.messages.create(model="default", max_tokens=40, messages=ASK, stop_sequences=[" "])
    text = out.content[0].text
    if out.stop_reason == "stop_sequence":
        assert out.stop_sequence == " " and " " not in text
    else:
        assert out.stop_sequence is None and " " not in text


def test_tool_use_then_tool_result(client):
    out = client.messages.create(model="default", max_tokens=60, messages=ASK, tools=TOOLS,
                                 tool_choice={"type": "any", "disable_parallel_tool_use": True})
    assert out.stop_reason == "tool_use"
    (use,) = [b for b in out.content if b.type == "tool_use"]
    assert use.name == "get_weather" and use.id
    jsonschema.validate(use.input, WEATHER)
    history = ASK + [{"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in out.content]},
                     {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id,
                                                   "content": "Sunny, 21 C"}]}]
    second = client.messages.create(model="default", max_tokens=5, messages=history, tools=TOOLS,
                                    tool_choice={"type": "none"})
    assert [b.type for b in second.content] == ["text"] and second.stop_reason in ("end_turn", "max_tokens")


def test_named_tool(client):
    out = client.messages.create(model="default", max_tokens=60, messages=ASK, tools=TOOLS,
                                 tool_choice={"type": "tool", "name": "get_weather"})
    assert [b.name for b in out.content if b.type == "tool_use"] == ["get_weather"]


def test_stream_text_events(client):
    kinds, text = [], ""
    with client.messages.stream(model="default", max_tokens=6, messages=ASK) as stream:
        for ev in stream:
            kinds.append(ev.type)
            if ev.type == "content_block_delta":
                text += ev.delta.text
        final = stream.get_final_message()
    raw = [k for k in kinds if k not in ("text",)]  # the helper adds its own text events
    assert raw[0] == "message_start" and raw[-2:] == ["message_delta", "message_stop"]
    assert raw[1] == "content_block_start" and raw[-3] == "content_block_stop"
    assert final.content[0].text == text and final.usage.output_tokens > 0


def test_stream_tool_use(client):
    with client.messages.stream(model="default", max_tokens=60, messages=ASK, tools=TOOLS,
                                tool_choice={"type": "any", "disable_parallel_tool_use": True}) as stream:
        final = stream.get_final_message()
    assert final.stop_reason == "tool_use"
    jsonschema.validate(final.content[-1].input, WEATHER)


@pytest.mark.parametrize(("body", "named"), [
    ({"max_tokens": 5}, "'messages'"),
    ({"max_tokens": 5, "messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}]},
     "messages[0].content[0]"),
    ({"max_tokens": 5, "messages": ASK, "temperature": 1.5}, "'temperature'"),
    ({"max_tokens": 5, "messages": ASK, "tools": [{"type": "web_search_20250305", "name": "w"}]}, "tools[0].type"),
    ({"max_tokens": 5, "messages": ASK, "tools": TOOLS, "tool_choice": {"type": "tool", "name": "nope"}},
     "tool_choice"),
])
def test_errors_have_anthropic_shape(server, body, named):
    resp = requests.post(server.url + "/v1/messages", json={"model": "default", **body}, timeout=60)
    assert resp.status_code == 400, resp.text
    out = resp.json()
    assert out["type"] == "error" and out["error"]["type"] == "invalid_request_error"
    assert named in out["error"]["message"]


def test_unknown_model_is_not_found(client):
    with pytest.raises(anthropic.NotFoundError) as e:
        client.messages.create(model="claude-nope", max_tokens=5, messages=ASK)
    assert e.value.body["error"]["type"] == "not_found_error"


def test_count_tokens_matches_usage(client):
    counted = client.messages.count_tokens(model="default", system="Be terse.", messages=ASK, tools=TOOLS)
    out = client.messages.create(model="default", max_tokens=1, system="Be terse.", messages=ASK, tools=TOOLS)
    assert counted.input_tokens == out.usage.input_tokens + out.usage.cache_read_input_tokens > 0
