"""The OpenAI-compatible API against a live server, driven by the official ``openai`` client."""

from __future__ import annotations

import json

import jsonschema
import openai
import pytest
from radixlm.runtime.server.chat.tools import MAX_CALLS_PER_TURN

MODEL = "default"
WEATHER = {"type": "object", "properties": {"city": {"enum": ["Paris", "Tokyo", "Lima"]},
                                            "metric": {"type": "boolean"}},
           "required": ["city", "metric"], "additionalProperties": False}
TIME = {"type": "object", "properties": {"zone": {"enum": ["UTC", "CET"]}}, "required": ["zone"],
        "additionalProperties": False}
TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "Weather in a city",
                                      "parameters": WEATHER}},
    {"type": "function", "function": {"name": "get_time", "description": "Time in a zone", "parameters": TIME}},
]
SCHEMAS = {"get_weather": WEATHER, "get_time": TIME}
ASK = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Weather in Paris?"}]


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=60)


def _check_calls(calls, allowed: set[str]) -> None:
    assert calls
    for call in calls:
        assert call.type == "function" and call.id.startswith("call_")
        assert call.function.name in allowed
        jsonschema.validate(json.loads(call.function.arguments), SCHEMAS[call.function.name])


def _collect_stream(chunks) -> tuple[str, dict[int, dict], str | None, object]:
    """Concatenate a chat stream: (content, tool calls by index, finish_reason, usage)."""
    content, calls, reason, usage = "", {}, None, None
    for chunk in chunks:
        usage = chunk.usage or usage
        for choice in chunk.choices:
            delta = choice.delta
            content += delta.content or ""
            for tc in delta.tool_calls or []:
                entry = calls.setdefault(tc.index, {"id": None, "name": None, "arguments": ""})
                entry["id"] = tc.id or entry["id"]
                if tc.function is not None:
                    entry["name"] = tc.function.name or entry["name"]
                    entry["arguments"] += tc.function.arguments or ""
            reason = choice.finish_reason or reason
    return content, calls, reason, usage


def test_models(client, server):
    models = client.models.list().data
    assert [m.id for m in models] == [server.engine.model_path.rstrip("/").split("/")[-1]]
    assert client.models.retrieve(models[0].id).id == models[0].id
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("no-such-model")


@pytest.mark.parametrize("extra", [{}, {"echo": True, "logprobs": 2}])
def test_completions_stream_matches_non_stream(client, extra):
    kwargs = {"model": MODEL, "prompt": "The keeper climbed", "max_tokens": 10, "temperature": 0, **extra}
    full = client.completions.create(**kwargs)
    assert full.object == "text_completion" and full.usage.completion_tokens <= 10
    assert full.choices[0].finish_reason in ("stop", "length")
    chunks = list(client.completions.create(**kwargs, stream=True, stream_options={"include_usage": True}))
    assert "".join(c.choices[0].text for c in chunks if c.choices) == full.choices[0].text
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == full.usage.completion_tokens
    if extra:
        merged = {"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []}
        for c in chunks:
            for key in merged:
                merged[key] += getattr(c.choices[0].logprobs, key) if c.choices and c.choices[0].logprobs else []
        assert merged == full.choices[0].logprobs.model_dump()


def test_completions_n_echo_logprobs_and_batch(client):
    out = client.completions.create(model=MODEL, prompt="Salt and brass", max_tokens=4, n=2,
                                    temperature=1.0, seed=7, echo=True, logprobs=2)
    assert [c.index for c in out.choices] == [0, 1]
    for choice in out.choices:
        assert choice.text.startswith("Salt and brass")
        lp = choice.logprobs
        assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == len(lp.text_offset)
        assert lp.token_logprobs[0] is None and all(x <= 0 for x in lp.token_logprobs[1:])
        assert all(len(t) <= 2 for t in lp.top_logprobs[1:])
    again = client.completions.create(model=MODEL, prompt="Salt and brass", max_tokens=4, n=2,
                                      temperature=1.0, seed=7)
    assert [c.text for c in again.choices] == [c.text[len("Salt and brass"):] for c in out.choices]
    batch = client.completions.create(model=MODEL, prompt=["one", "two", "three"], max_tokens=3, temperature=0)
    assert len(batch.choices) == 3
    assert batch.choices[1].text == client.completions.create(model=MODEL, prompt="two", max_tokens=3,
                                                              temperature=0).choices[0].text


def test_chat_stream_matches_non_stream(client):
    kwargs = {"model": MODEL, "messages": ASK, "max_tokens": 12, "temperature": 0}
    full = client.chat.completions.create(**kwargs)
    msg = full.choices[0].message
    assert full.object == "chat.completion" and msg.role == "assistant" and isinstance(msg.content, str)
    chunks = list(client.chat.completions.create(**kwargs, stream=True, stream_options={"include_usage": True}))
    assert chunks[0].choices[0].delta.role == "assistant"
    content, calls, reason, usage = _collect_stream(chunks)
    assert content == msg.content and not calls
    assert reason == full.choices[0].finish_reason
    assert usage.completion_tokens == full.usage.completion_tokens


def test_chat_usage_reports_cached_tokens_on_repeat(client):
    messages = [{"role": "user", "content": "Tell me about the hundred and twelve steps of the tower."}]
    first = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=2, temperature=0)
    second = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=2, temperature=0)
    assert second.usage.prompt_tokens == first.usage.prompt_tokens
    assert second.usage.prompt_tokens_details.cached_tokens >= first.usage.prompt_tokens - 1
    assert first.usage.prompt_tokens_details.cached_tokens < second.usage.prompt_tokens_details.cached_tokens


def test_chat_json_schema_response_format(client):
    schema = {"type": "object", "additionalProperties": False, "required": ["name", "age", "ok"],
              "properties": {"name": {"type": "string", "maxLength": 8},
                             "age": {"type": "integer", "minimum": 0, "maximum": 120},
                             "ok": {"type": "boolean"}}}
    fmt = {"type": "json_schema", "json_schema": {"name": "person", "schema": schema, "strict": True}}
    out = client.chat.completions.create(model=MODEL, messages=ASK, max_tokens=80, temperature=0,
                                         response_format=fmt)
    assert out.choices[0].finish_reason == "stop"
    jsonschema.validate(json.loads(out.choices[0].message.content), schema)
    obj = client.chat.completions.create(model=MODEL, messages=ASK, max_tokens=60, temperature=0,
                                         response_format={"type": "json_object"}, seed=1)
    assert obj.choices[0].finish_reason == "length" or isinstance(json.loads(obj.choices[0].message.content), dict)


def test_tools_required_and_named(client):
    out = client.chat.completions.create(model=MODEL, messages=ASK, tools=TOOLS, tool_choice="required",
                                         max_tokens=60, temperature=0, parallel_tool_calls=False)
    choice = out.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    _check_calls(choice.message.tool_calls, {"get_weather", "get_time"})
    assert len(choice.message.tool_calls) == 1
    one = client.chat.completions.create(  # a named function is one call, parallel_tool_calls or not
        model=MODEL, messages=ASK, tools=TOOLS, max_tokens=200, temperature=0,
        tool_choice={"type": "function", "function": {"name": "get_time"}})
    assert one.choices[0].finish_reason == "tool_calls" and len(one.choices[0].message.tool_calls) == 1
    named = client.chat.completions.create(
        model=MODEL, messages=ASK, tools=TOOLS, max_tokens=60, temperature=0.8, seed=3, parallel_tool_calls=False,
        tool_choice={"type": "function", "function": {"name": "get_time"}})
    assert named.choices[0].finish_reason == "tool_calls"
    _check_calls(named.choices[0].message.tool_calls, {"get_time"})


@pytest.mark.parametrize("mode", ["required", "auto"])
def test_tools_streamed_like_openai(client, server, mode):
    kwargs = {"model": MODEL, "messages": ASK, "tools": TOOLS, "tool_choice": mode, "max_tokens": 60,
              "temperature": 0}
    if mode == "required":  # one call fits in 60 tokens (parallel calls: the test below)
        kwargs["parallel_tool_calls"] = False
    if mode == "auto":  # force the model to open calls (see the auto test); two fit in 60 tokens
        kwargs["logit_bias"] = {str(server.engine.tokenizer.encode("<tool_call>")[0]): 100}
    full = client.chat.completions.create(**kwargs).choices[0]
    content, calls, reason, _ = _collect_stream(client.chat.completions.create(**kwargs, stream=True))
    assert reason == full.finish_reason and content == (full.message.content or "")
    assert list(calls) == list(range(len(full.message.tool_calls)))
    for i, want in enumerate(full.message.tool_calls):
        assert calls[i]["name"] == want.function.name and calls[i]["arguments"] == want.function.arguments
        assert calls[i]["id"].startswith("call_")


def test_tools_required_with_parallel_calls_makes_one_or_more(client):
    """``required`` with ``parallel_tool_calls`` (the default): the grammar admits one to eight
    calls in one turn; every call is complete and valid, streamed as the whole response says."""
    kwargs = {"model": MODEL, "messages": ASK, "tools": TOOLS, "tool_choice": "required", "max_tokens": 400,
              "temperature": 0}
    full = client.chat.completions.create(**kwargs).choices[0]
    assert full.finish_reason == "tool_calls" and 1 <= len(full.message.tool_calls) <= 8
    _check_calls(full.message.tool_calls, {"get_weather", "get_time"})
    content, calls, reason, _ = _collect_stream(client.chat.completions.create(**kwargs, stream=True))
    assert reason == "tool_calls" and list(calls) == list(range(len(full.message.tool_calls)))
    for i, want in enumerate(full.message.tool_calls):
        assert calls[i]["name"] == want.function.name and calls[i]["arguments"] == want.function.arguments


def test_tools_required_parallel_cut_by_the_budget_is_honest(client):
    """Several forced calls cut by ``max_tokens``: the complete ones stand in ``tool_calls``, the cut
    one is kept apart in ``truncated_tool_call``, and the reason is ``length``; streamed alike (the cut
    call is never sent, so the stream's calls are the non-streamed ones; its last chunk carries the
    same ``truncated_tool_call``). A
    forced turn may also end after a call, as the model ends it (``stop``: ``tool_calls``). The budgets
    run from inside the first call to past it; a cut after complete calls in every family's layout
    is ``tests/chat_formats/test_cut_turns.py``'s (the tiny random model rarely goes on to a second call)."""
    cut = 0
    for seed in range(8):  # budgets from inside the first call to past it (the model may go on to more)
        kwargs = {"model": MODEL, "messages": ASK, "tools": TOOLS, "tool_choice": "required",
                  "max_tokens": 20 + 6 * seed, "temperature": 1.0, "seed": seed}
        choice = client.chat.completions.create(**kwargs).choices[0]
        assert not choice.message.content  # no call markup leaks into the content
        truncated = getattr(choice, "truncated_tool_call", None)
        if choice.finish_reason == "tool_calls":
            _check_calls(choice.message.tool_calls, {"get_weather", "get_time"})
            assert truncated is None
            continue
        assert choice.finish_reason == "length"
        if choice.message.tool_calls:
            _check_calls(choice.message.tool_calls, {"get_weather", "get_time"})
        assert truncated is not None and truncated["function"]["name"] in ("get_weather", "get_time")
        chunks = list(client.chat.completions.create(**kwargs, stream=True))
        _, calls, reason, _ = _collect_stream(chunks)
        whole = [(t.function.name, t.function.arguments) for t in choice.message.tool_calls or []]
        assert reason == "length" and [(c["name"], c["arguments"]) for c in calls.values()] == whole
        last = chunks[-1].choices[0].model_extra or {}
        assert last.get("truncated_tool_call", {}).get("function") == truncated["function"]
        cut += 1
    assert cut, "no seed went on to a call the budget cut"


def test_tools_auto_detects_and_constrains_a_call(client, server):
    marker = server.engine.tokenizer.encode("<tool_call>")
    assert len(marker) == 1
    # The tiny random model never chooses to call; a logit bias makes it open a call at every
    # free-text turn, and each constrained call phase must produce a valid call (parallel calls,
    # up to the cap of 8 per turn).
    out = client.chat.completions.create(model=MODEL, messages=ASK, tools=TOOLS, tool_choice="auto",
                                         max_tokens=400, temperature=0, logit_bias={str(marker[0]): 100})
    choice = out.choices[0]
    assert choice.finish_reason == "tool_calls" and not choice.message.content
    assert len(choice.message.tool_calls) == MAX_CALLS_PER_TURN
    _check_calls(choice.message.tool_calls, {"get_weather", "get_time"})
    # cut off by max_tokens inside the second call: the first call stands, the reason is "length"
    per_call = out.usage.completion_tokens // MAX_CALLS_PER_TURN
    short = client.chat.completions.create(model=MODEL, messages=ASK, tools=TOOLS, max_tokens=per_call + 10,
                                           temperature=0, logit_bias={str(marker[0]): 100})
    msg = short.choices[0].message
    assert short.choices[0].finish_reason == "length"
    _check_calls(msg.tool_calls[:1], {"get_weather", "get_time"})
    # the unfinished call is not a complete call: left out of tool_calls (kept apart in
    # truncated_tool_call once its name was complete), and no raw call markup reaches content
    assert len(msg.tool_calls) == 1 and "<tool_call>" not in (msg.content or "")
    truncated = getattr(short.choices[0], "truncated_tool_call", None)
    assert truncated is None or truncated["function"]["name"] in ("get_weather", "get_time")
    plain = client.chat.completions.create(model=MODEL, messages=ASK, tools=TOOLS, max_tokens=8, temperature=0)
    assert plain.choices[0].finish_reason in ("stop", "length", "tool_calls")
    if plain.choices[0].message.tool_calls:
        _check_calls(plain.choices[0].message.tool_calls, {"get_weather", "get_time"})


def test_chat_history_with_tool_results(client):
    messages = ASK + [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "get_weather", "arguments": '{"city": "Paris", "metric": true}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "18C and sunny"},
    ]
    out = client.chat.completions.create(model=MODEL, messages=messages, tools=TOOLS, tool_choice="none",
                                         max_tokens=5, temperature=0)
    assert out.choices[0].message.tool_calls is None and out.usage.prompt_tokens > 20


@pytest.mark.parametrize("text", [
    '{"name": "get_time", "arguments": {"zone": "UTC"}}',
    '{"name":"get_weather","arguments":{"city":"Lima","metric":true}}',
    '{ "name" : "f" , "arguments" : { "a" : { "b" : [1, {}] } } }',
])
def test_call_extractor_deltas_concatenate_to_the_arguments(text):
    """However the generated call text is split into deltas, the streamed argument pieces
    concatenate to the final ``arguments`` string, which is the generated JSON."""
    from radixlm.runtime.server.chat.tools import CallExtractor

    want_name, want_args = json.loads(text)["name"], json.loads(text)["arguments"]
    for step in (1, 2, 3, 7, len(text)):
        ex, names, pieces = CallExtractor(), [], []
        for i in range(0, len(text), step):
            name, args = ex.feed(text[i:i + step])
            names += [name] if name else []
            pieces.append(args)
        name, args = ex.finish()
        assert names == [want_name] and name == want_name
        assert args.startswith("".join(pieces)) and json.loads(args) == want_args
    assert CallExtractor().finish() is None
    truncated = CallExtractor()
    truncated.feed(text[:-3])
    assert truncated.finish() is None
