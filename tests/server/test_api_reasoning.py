"""The thinking through the other APIs: Responses ``reasoning`` items, Anthropic ``thinking`` blocks,
Ollama's ``thinking``. The template opens the thinking at the end of the prompt, so the tiny model's
output (which never closes it) is all thinking."""

from __future__ import annotations

import anthropic
import ollama
import openai
import pytest
from radixlm.runtime.engine import Engine
from radixlm.runtime.server.app import BackgroundServer
from radixlm.runtime.server.transport.state import ServerConfig

TEMPLATE = ("{% for m in messages %}<|{{ m.role }}|>{{ m.content }}\n{% endfor %}"
            "{% if add_generation_prompt %}<|assistant|><think>\n{% endif %}")
HI = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def thinking():
    engine = Engine(max_total_tokens=8192, random_seed=0, chat_template=TEMPLATE, reasoning_parser="deepseek-r1")
    srv = BackgroundServer(engine, ServerConfig(port=0)).start()
    yield srv
    srv.stop()
    engine.shutdown()


def test_responses_reasoning_item(thinking):
    client = openai.OpenAI(base_url=thinking.url + "/v1", api_key="unused", max_retries=0, timeout=60)
    out = client.responses.create(model="default", input=HI, max_output_tokens=6)
    assert [i.type for i in out.output] == ["reasoning"]
    assert out.output[0].content[0].text and out.output_text == ""
    assert 0 < out.usage.output_tokens_details.reasoning_tokens
    assert out.status == "incomplete" and out.output[0].status == "incomplete"
    events = list(client.responses.create(model="default", input=HI, max_output_tokens=6, stream=True))
    deltas = "".join(e.delta for e in events if e.type == "response.reasoning_text.delta")
    done = next(e for e in events if e.type == "response.reasoning_text.done")
    assert deltas and done.text == deltas == events[-1].response.output[0].content[0].text
    # the thinking goes back as an input item: it reaches the template as the assistant's reasoning
    follow = HI + [{"type": "reasoning", "id": "rs_1", "summary": [], "content": [{"type": "reasoning_text",
                                                                                   "text": "earlier"}]},
                   {"role": "assistant", "content": "ok"}, {"role": "user", "content": "again"}]
    assert client.responses.create(model="default", input=follow, max_output_tokens=2).status == "incomplete"


def test_anthropic_thinking_block(thinking):
    client = anthropic.Anthropic(base_url=thinking.url, api_key="unused", max_retries=0, timeout=60)
    out = client.messages.create(model="default", max_tokens=6, messages=HI)
    assert out.content[0].type == "thinking" and out.content[0].thinking
    assert out.stop_reason == "max_tokens"
    with client.messages.stream(model="default", max_tokens=6, messages=HI) as stream:
        final = stream.get_final_message()
    assert final.content[0].type == "thinking" and final.content[0].thinking


def test_ollama_thinking(thinking):
    client = ollama.Client(host=thinking.url, timeout=60)
    out = client.chat(model="default", messages=HI, options={"num_predict": 6})
    assert out.message.thinking and out.message.content == "" and out.done_reason == "length"
    lines = list(client.chat(model="default", messages=HI, options={"num_predict": 6}, stream=True))
    assert "".join(line.message.thinking or "" for line in lines)


WEATHER = {"type": "object", "properties": {"city": {"enum": ["Paris", "Lima"]}}, "required": ["city"],
           "additionalProperties": False}


def test_a_forced_call_after_the_thinking_on_every_api(thinking):
    """The tiny model never closes the thinking the prompt opened: the server closes it at its share
    of the budget and the forced call follows: a thinking block then a ``tool_use`` (Anthropic), a
    reasoning item then a ``function_call`` (Responses). (Ollama's API has no forced call.)"""
    claude = anthropic.Anthropic(base_url=thinking.url, api_key="unused", max_retries=0, timeout=60)
    kinds = dict(model="default", max_tokens=200, messages=HI, tool_choice={"type": "any"},
                 extra_body={"temperature": 0},
                 tools=[{"name": "get_weather", "description": "weather", "input_schema": WEATHER}])
    out = claude.messages.create(**kinds)
    assert out.content[0].type == "thinking" and out.content[0].thinking and out.stop_reason == "tool_use"
    assert len(out.content) > 1 and all(b.type == "tool_use" for b in out.content[1:])  # parallel calls allowed
    assert all(b.input["city"] in ("Paris", "Lima") for b in out.content[1:])
    with claude.messages.stream(**kinds) as stream:
        final = stream.get_final_message()
    assert [b.type for b in final.content] == [b.type for b in out.content]
    client = openai.OpenAI(base_url=thinking.url + "/v1", api_key="unused", max_retries=0, timeout=60)
    resp = client.responses.create(model="default", input=HI, max_output_tokens=200, tool_choice="required",
                                   tools=[{"type": "function", "name": "get_weather", "parameters": WEATHER}])
    kinds_out = [i.type for i in resp.output]
    assert kinds_out[0] == "reasoning" and set(kinds_out[1:]) == {"function_call"} and resp.status == "completed"
