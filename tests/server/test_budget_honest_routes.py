"""Honest budgets through the server: an output that budget-aware completion closed finishes as
``length`` with ``budget_closed`` (``meta_info`` on ``/generate``, the choice on the OpenAI routes),
its text still parses; ``budget_aware_completion: false`` works on every route; a forced tool call
cut by the budget is never a complete ``tool_calls`` entry and leaks no raw markup into ``content``.

Random tiny weights at temperature 1 ramble inside strings, so small budgets make the close happen."""

from __future__ import annotations

import json

import jsonschema
import openai
import pytest
import requests
from openai_reads import chat_answer

SCHEMA = {"type": "object", "properties": {
    "name": {"type": "string"}, "tags": {"type": "array", "items": {"type": "string"}}},
    "required": ["name", "tags"]}
WEATHER = {"type": "object", "properties": {"city": {"type": "string"}, "metric": {"type": "boolean"}},
           "required": ["city", "metric"], "additionalProperties": False}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather", "parameters": WEATHER}}]
ASK = [{"role": "user", "content": "Weather in Paris?"}]
SEEDS = range(4)
MARKUP = ("<tool_call>", "</tool_call>", '{"name"')


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=120)


def _check(text: str, reason: str, closed: bool, budget_aware: bool) -> None:
    """The contract of one output: closed -> length and valid; stop -> valid; length unclosed ->
    only without budget-aware completion (or when no valid end fit)."""
    if closed:
        assert budget_aware and reason == "length", (reason, text)
    if closed or reason == "stop":
        jsonschema.validate(json.loads(text), SCHEMA)


def _generate(server, seed: int, budget_aware: bool, stream: bool) -> tuple[str, str, bool]:
    body = {"text": "Answer:", "stream": stream, "sampling_params": {
        "temperature": 1.0, "seed": seed, "max_new_tokens": 24, "json_schema": SCHEMA,
        "budget_aware_completion": budget_aware}}
    r = requests.post(server.url + "/generate", json=body, timeout=120, stream=stream)
    assert r.status_code == 200, r.text
    if not stream:
        meta = r.json()["meta_info"]
        return r.json()["text"], meta["finish_reason"]["type"], "budget_closed" in meta
    text, meta = "", {}
    for line in r.iter_lines():
        if line.startswith(b"data: ") and line != b"data: [DONE]":
            chunk = json.loads(line[6:])
            text, meta = chunk["text"], chunk["meta_info"]  # cumulative, as in SGLang
    closed = meta.get("budget_closed")
    assert closed is None or (closed["closed"] is True and closed["tokens"] >= 1), closed
    return text, meta["finish_reason"]["type"], closed is not None


def _completion(client, seed: int, budget_aware: bool, stream: bool) -> tuple[str, str, bool]:
    extra = {"json_schema": SCHEMA, "budget_aware_completion": budget_aware}
    kwargs = {"model": "default", "prompt": "Answer:", "max_tokens": 24, "temperature": 1.0, "seed": seed}
    if not stream:
        choice = client.completions.create(**kwargs, extra_body=extra).choices[0]
        return choice.text, choice.finish_reason, bool(getattr(choice, "budget_closed", False))
    text, reason, closed = "", None, False
    for chunk in client.completions.create(**kwargs, extra_body=extra, stream=True):
        for c in chunk.choices:
            text += c.text
            reason = c.finish_reason or reason
            closed = closed or bool(getattr(c, "budget_closed", False))
    return text, reason, closed


def _chat(client, seed: int, budget_aware: bool, stream: bool) -> tuple[str, str, bool]:
    kwargs = {"model": "default", "messages": ASK, "max_tokens": 24, "temperature": 1.0, "seed": seed,
              "response_format": {"type": "json_schema", "json_schema": {"name": "a", "schema": SCHEMA}},
              "extra_body": {"budget_aware_completion": budget_aware}}
    return chat_answer(client, kwargs, stream)


ROUTES = {"generate": lambda server, client, *a: _generate(server, *a),
          "completions": lambda server, client, *a: _completion(client, *a),
          "chat": lambda server, client, *a: _chat(client, *a)}


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("route", sorted(ROUTES))
def test_a_budget_closed_output_is_length_and_says_so(server, client, route, stream):
    results = [ROUTES[route](server, client, s, True, stream) for s in SEEDS]
    for text, reason, closed in results:
        _check(text, reason, closed, True)
    assert any(closed for _, _, closed in results), results  # the budget was meant to close some


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("route", sorted(ROUTES))
def test_budget_aware_completion_false_is_honoured(server, client, route, stream):
    results = [ROUTES[route](server, client, s, False, stream) for s in SEEDS]
    for text, reason, closed in results:
        _check(text, reason, closed, False)
    cut = [text for text, reason, _ in results if reason == "length"]
    assert cut, results  # without the close, random weights run out inside a string
    for text in cut:
        with pytest.raises(json.JSONDecodeError):
            json.loads(text)


def test_the_sdk_parse_helper_raises_its_length_error(client):
    """``client.beta.chat.completions.parse`` sees ``length`` on a closed output, as OpenAI documents."""
    kwargs = {"model": "default", "messages": ASK, "max_tokens": 24, "temperature": 1.0,
              "response_format": {"type": "json_schema", "json_schema": {"name": "a", "schema": SCHEMA}}}
    raised = 0
    for seed in SEEDS:
        out = client.chat.completions.create(**kwargs, seed=seed).choices[0]
        if getattr(out, "budget_closed", False):
            with pytest.raises(openai.LengthFinishReasonError):
                client.beta.chat.completions.parse(**kwargs, seed=seed)
            raised += 1
    assert raised


FORCED = [("required", "required"),
          ("named", {"type": "function", "function": {"name": "get_weather"}})]


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("budget", [1, 3, 6, 7, 9, 12, 16, 24, 40])
@pytest.mark.parametrize("mode", [m for m, _ in FORCED])
def test_a_forced_call_cut_by_the_budget_is_never_a_complete_call(client, mode, budget, stream):
    choice_arg = dict(FORCED)[mode]
    kwargs = {"model": "default", "messages": ASK, "tools": TOOLS, "tool_choice": choice_arg,
              "max_tokens": budget, "temperature": 1.0, "seed": budget}
    if stream:
        content, calls, reason, closed = "", {}, None, False
        for chunk in client.chat.completions.create(**kwargs, stream=True):
            for c in chunk.choices:
                content += c.delta.content or ""
                for tc in c.delta.tool_calls or []:
                    entry = calls.setdefault(tc.index, {"name": None, "arguments": ""})
                    entry["name"] = (tc.function.name if tc.function else None) or entry["name"]
                    entry["arguments"] += (tc.function.arguments if tc.function else None) or ""
                reason = c.finish_reason or reason
                closed = closed or bool(getattr(c, "budget_closed", False))
        done = [(e["name"], e["arguments"]) for e in calls.values()]
    else:
        c = client.chat.completions.create(**kwargs).choices[0]
        content, reason, closed = c.message.content or "", c.finish_reason, bool(getattr(c, "budget_closed", False))
        done = [(t.function.name, t.function.arguments) for t in c.message.tool_calls or []]
        if reason != "tool_calls":
            assert not done, (reason, done)  # a cut call is left out of tool_calls
    assert not any(m in content for m in MARKUP), (budget, content)
    if closed:
        assert reason == "length", (budget, reason)
    if reason == "tool_calls":
        assert not closed and done
        for name, args in done:
            assert name == "get_weather"
            jsonschema.validate(json.loads(args), WEATHER)
    else:
        assert reason == "length", (budget, reason)


def test_a_call_closed_by_the_budget_is_reported_apart_from_tool_calls(client):
    """The close that once came back as a complete call (``finish_reason: tool_calls``) is ``length``,
    ``budget_closed``, and the closed call is in ``truncated_tool_call`` (its arguments parse)."""
    closed = []
    for budget in (24, 40):
        c = client.chat.completions.create(model="default", messages=ASK, tools=TOOLS, tool_choice="required",
                                           max_tokens=budget, temperature=1.0, seed=budget).choices[0]
        if getattr(c, "budget_closed", False):
            assert c.finish_reason == "length" and not c.message.tool_calls
            call = c.truncated_tool_call
            assert call["function"]["name"] == "get_weather"
            jsonschema.validate(json.loads(call["function"]["arguments"]), WEATHER)
            closed.append(budget)
    assert closed  # these budgets end inside the arguments, where the close fits


def test_openai_routes_carry_the_constraint_notes(client):
    """A budget too small for any valid document: the choice says why (``constraint_notes``), as
    ``/generate``'s ``meta_info`` does."""
    kwargs = {"model": "default", "max_tokens": 3, "temperature": 0.0,
              "response_format": {"type": "json_schema", "json_schema": {"name": "a", "schema": SCHEMA}}}
    chat = client.chat.completions.create(messages=ASK, **kwargs).choices[0]
    assert chat.finish_reason == "length"
    assert any("max_new_tokens ran out" in n for n in chat.constraint_notes), chat
    done = client.completions.create(model="default", prompt="Answer:", max_tokens=3, temperature=0.0,
                                     extra_body={"json_schema": SCHEMA}).choices[0]
    assert any("max_new_tokens ran out" in n for n in done.constraint_notes), done
