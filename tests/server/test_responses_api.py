"""``/v1/responses`` against a live server, driven by the official ``openai`` client's ``responses``."""

from __future__ import annotations

import json

import jsonschema
import openai
import pytest
import requests
from radixlm.runtime.server.transport.body import IGNORED_HEADER

WEATHER = {"type": "object", "properties": {"city": {"enum": ["Paris", "Tokyo"]}}, "required": ["city"],
           "additionalProperties": False}
TOOLS = [{"type": "function", "name": "get_weather", "description": "Weather in a city", "parameters": WEATHER}]
PERSON = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 8},
                                           "age": {"type": "integer", "minimum": 0, "maximum": 120}},
          "required": ["name", "age"], "additionalProperties": False}


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=60)


def test_text_input_with_instructions(client):
    out = client.responses.create(model="default", input="Say hi", instructions="Be terse.",
                                  max_output_tokens=6, temperature=0)
    assert out.object == "response" and out.id.startswith("resp_")
    assert out.instructions == "Be terse."
    (msg,) = out.output
    assert msg.type == "message" and msg.role == "assistant"
    assert out.output_text == msg.content[0].text
    usage = out.usage
    assert usage.input_tokens > 0 and usage.total_tokens == usage.input_tokens + usage.output_tokens
    # 6 tokens of noise from random weights: either the budget ended it (honestly incomplete) or EOS did
    if usage.output_tokens == 6 and out.status == "incomplete":
        assert out.incomplete_details.reason == "max_output_tokens" and msg.status == "incomplete"
    else:
        assert out.status == "completed" and out.incomplete_details is None


def test_budget_is_incomplete(client):
    out = client.responses.create(model="default", input=[{"role": "user", "content": "Count"}],
                                  max_output_tokens=1, temperature=0)
    if out.usage.output_tokens == 1 and out.output[0].content[0].text:  # not an EOS
        assert out.status == "incomplete" and out.incomplete_details.reason == "max_output_tokens"


def test_cached_tokens_count_the_second_identical_prompt(client):
    body = {"model": "default", "input": "A long enough prompt about caching " * 8, "max_output_tokens": 2}
    client.responses.create(**body)
    again = client.responses.create(**body)
    assert again.usage.input_tokens_details.cached_tokens > 0


def test_function_tools_required_then_output_item(client):
    out = client.responses.create(model="default", input="Weather in Paris?", tools=TOOLS, tool_choice="required",
                                  max_output_tokens=60, parallel_tool_calls=False)
    calls = [item for item in out.output if item.type == "function_call"]
    assert calls and out.status == "completed"
    call = calls[0]
    assert call.name == "get_weather" and call.call_id
    jsonschema.validate(json.loads(call.arguments), WEATHER)
    follow = [{"role": "user", "content": "Weather in Paris?"},
              {"type": "function_call", "call_id": call.call_id, "name": call.name, "arguments": call.arguments},
              {"type": "function_call_output", "call_id": call.call_id, "output": "sunny"}]
    second = client.responses.create(model="default", input=follow, tools=TOOLS, tool_choice="none",
                                     max_output_tokens=4)
    assert all(item.type != "function_call" for item in second.output)


def test_named_tool_choice(client):
    out = client.responses.create(model="default", input="Weather?", tools=TOOLS, max_output_tokens=60,
                                  tool_choice={"type": "function", "name": "get_weather"})
    assert [i.name for i in out.output if i.type == "function_call"] == ["get_weather"]


def test_text_format_json_schema(client):
    out = client.responses.create(model="default", input="A person", max_output_tokens=80, temperature=0,
                                  text={"format": {"type": "json_schema", "name": "person", "schema": PERSON,
                                                   "strict": True}})
    assert out.status == "completed"
    jsonschema.validate(json.loads(out.output_text), PERSON)
    assert out.text.format.type == "json_schema"


def test_stream_events_in_order(client):
    events = list(client.responses.create(model="default", input="Hello", max_output_tokens=5, stream=True))
    kinds = [e.type for e in events]
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[-1] in ("response.completed", "response.incomplete")
    assert [e.sequence_number for e in events] == list(range(len(events)))
    body = kinds[2:-1]
    assert body[:2] == ["response.output_item.added", "response.content_part.added"]
    assert body[-3:] == ["response.output_text.done", "response.content_part.done", "response.output_item.done"]
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    final = events[-1].response
    assert final.output_text == text and final.usage.output_tokens > 0


def test_stream_function_call_events(client):
    events = list(client.responses.create(model="default", input="Weather?", tools=TOOLS, tool_choice="required",
                                          max_output_tokens=60, stream=True, parallel_tool_calls=False))
    kinds = [e.type for e in events]
    assert "response.function_call_arguments.delta" in kinds
    done = next(e for e in events if e.type == "response.function_call_arguments.done")
    deltas = "".join(e.delta for e in events if e.type == "response.function_call_arguments.delta")
    assert done.arguments == deltas
    jsonschema.validate(json.loads(deltas), WEATHER)
    assert events[-1].response.output[-1].arguments == deltas


def test_previous_response_id_is_a_clear_400(client):
    with pytest.raises(openai.BadRequestError) as e:
        client.responses.create(model="default", input="Hi", previous_response_id="resp_abc")
    assert e.value.body["param"] == "previous_response_id" and "stateless" in e.value.body["message"]


@pytest.mark.parametrize(("body", "param"), [
    ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]}, "input[0].content[0]"),
    ({"input": "hi", "max_output_tokens": 0}, "max_output_tokens"),
    ({"input": "hi", "text": {"format": {"type": "json_schema", "name": "x"}}}, "text.format.schema"),
    ({"input": "hi", "tools": [{"type": "web_search"}]}, "tools[0].type"),
    ({"input": "hi", "tools": TOOLS, "tool_choice": {"type": "function", "name": "nope"}}, "tool_choice"),
    ({"input": [{"type": "function_call", "call_id": "c", "name": "f", "arguments": "{"}]}, "input[0].arguments"),
])
def test_bad_fields_are_named(server, body, param):
    resp = requests.post(server.url + "/v1/responses", json=body, timeout=60)
    assert resp.status_code == 400, resp.text
    err = resp.json()["error"]
    assert err["param"].startswith(param) and err["type"] == "invalid_request_error"


def test_dropped_fields_are_named_and_metadata_echoed(server):
    resp = requests.post(server.url + "/v1/responses", timeout=60,
                         json={"input": "hi", "max_output_tokens": 2, "user": "u1", "metadata": {"k": "v"},
                               "reasoning": {"effort": "low", "summary": "auto"}})
    assert resp.status_code == 200
    assert set(resp.headers[IGNORED_HEADER].split(",")) == {"user", "reasoning.summary"}
    assert resp.json()["metadata"] == {"k": "v"} and resp.json()["reasoning"]["effort"] == "low"


def test_retrieve_is_404(server):
    resp = requests.get(server.url + "/v1/responses/resp_x", timeout=30)
    assert resp.status_code == 404 and "stateless" in resp.json()["error"]["message"]


def test_output_text_logprobs(client):
    out = client.responses.create(model="default", input="Hi", max_output_tokens=4, top_logprobs=2,
                                  include=["message.output_text.logprobs"])
    part = out.output[0].content[0]
    assert len(part.logprobs) == out.usage.output_tokens
    assert "".join(lp.token for lp in part.logprobs) == part.text
    assert all(len(lp.top_logprobs) == 2 and lp.logprob <= 0 for lp in part.logprobs)


def test_parse_into_a_pydantic_model(client):
    from pydantic import BaseModel, Field

    class Person(BaseModel):
        name: str = Field(max_length=8)
        age: int = Field(ge=0, le=120)

    out = client.responses.parse(model="default", input="A person", text_format=Person, max_output_tokens=80,
                                 temperature=0)
    assert out.status == "completed" and isinstance(out.output_parsed, Person)
