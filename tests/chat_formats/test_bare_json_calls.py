"""Bare JSON tool calls (Qwen2.5-Coder and Llama 3.x under ``tool_choice: "auto"`` write
``{"name": ..., "arguments": ...}`` without tags): golden outputs, parse == every streamed
chunking, the negatives that stay content, and one end-to-end call through the OpenAI route."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from radixlm.runtime.chat_formats.tool_formats.registry import get_format
from radixlm.runtime.chat_formats.tool_formats.scanner import accumulate

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tool_call_cases import API_TOOLS, TOOLS, family_client  # noqa: E402

W = ("get_weather", {"city": "Paris", "metric": True})
T = ("get_time", {"zone": "UTC"})
WEATHER_JSON = '{"name": "get_weather", "arguments": {"city": "Paris", "metric": true}}'
# (family, output, content, calls)
CASES = [
    ("hermes", WEATHER_JSON, "", [W]),
    ("hermes", "\n" + WEATHER_JSON + "\n", "", [W]),
    ("hermes", '{"name": "get_time", "parameters": {"zone": "UTC"}}', "", [T]),
    ("hermes", '[{"name": "get_weather", "arguments": {"city": "Paris", "metric": true}}, '
               '{"name": "get_time", "parameters": {"zone": "UTC"}}]', "", [W, T]),
    ("llama3", '[{"name": "get_weather", "parameters": {"city": "Paris", "metric": true}}]', "", [W]),
    ("llama3", '{"parameters": {"zone": "UTC"}, "name": "get_time"}', "", [T]),
]
NEGATIVES = [  # hermes: each stays content, whole
    '{"name": "get_stock", "arguments": {"symbol": "ACME"}}',  # an undeclared tool
    '{"name": "get_weather", "arguments": {"city": "Rome", "metric": true}}',  # invalid arguments
    '{"name": "get_time", "arguments": {"zone": "UTC"}} Done.',  # JSON followed by prose
    'Here: {"name": "get_time", "arguments": {"zone": "UTC"}}',  # prose then JSON
    '{"name": "get_time", "arguments": {"zone": "UTC"}',  # cut off
    '{"name": "get_time", "arguments": {"zone": "UTC"}, "extra": 1}',  # not a call object
    '[{"name": "get_time", "arguments": {"zone": "UTC"}}, {"name": "nope", "arguments": {}}]',
    '{"answer": 42}', "[]", "  ",
]


def _calls(result) -> list[tuple[str, dict]]:
    return [(c.name, json.loads(c.arguments)) for c in result.calls]


def _every_chunking(fmt, text: str, tools) -> list:
    results = []
    for step in (1, 2, 3, 5, 11, max(len(text), 1)):
        parser = fmt.stream(tools)
        events = [e for i in range(0, len(text), step) for e in parser.feed(text[i:i + step])] + parser.finish()
        starts = [e for e in events if e.kind == "call_start"]
        assert [e.index for e in starts] == list(range(len(starts))) and all(e.id and e.name for e in starts)
        results.append(accumulate(events))
    return results


@pytest.mark.parametrize(("family", "text", "content", "calls"), CASES)
def test_bare_calls_parse_and_every_chunking_agree(family, text, content, calls):
    fmt = get_format(family)
    full = fmt.parse(text, TOOLS)
    assert full.content == content and _calls(full) == calls
    for streamed in _every_chunking(fmt, text, TOOLS):
        assert streamed.content == content and _calls(streamed) == calls


@pytest.mark.parametrize("text", NEGATIVES)
def test_what_is_not_a_bare_call_stays_content(text):
    fmt = get_format("hermes")
    assert fmt.parse(text, TOOLS).content == text and not fmt.parse(text, TOOLS).calls
    for streamed in _every_chunking(fmt, text, TOOLS):
        assert streamed.content == text and not streamed.calls


def test_without_tools_or_in_other_families_json_is_content():
    assert get_format("hermes").parse(WEATHER_JSON, []).content == WEATHER_JSON
    assert get_format("mistral").parse(WEATHER_JSON, TOOLS).content == WEATHER_JSON


def test_content_that_cannot_be_a_call_is_not_held_back():
    parser = get_format("hermes").stream(TOOLS)
    assert accumulate(parser.feed('{"a": 1} and')).content == '{"a": 1} and'
    assert accumulate(parser.feed("Sure")).content == "Sure"


@pytest.mark.parametrize("stream", [False, True])
def test_auto_bare_call_through_the_openai_route(engine, stream):
    """The tiny model is forced (a regex constraint on every engine request) to write the bare call
    Qwen2.5-Coder writes; the route sees a plain ``tool_choice: auto`` request."""
    with family_client(_Forced(engine, WEATHER_REGEX), "hermes") as client:
        kwargs = dict(model="default", messages=[{"role": "user", "content": "Weather in Paris?"}],
                      tools=API_TOOLS, tool_choice="auto", max_tokens=80, temperature=0.0)
        if not stream:
            out = client.chat.completions.create(**kwargs)
            choice = out.choices[0]
            assert choice.finish_reason == "tool_calls", choice
            assert not choice.message.content
            calls = [(c.function.name, json.loads(c.function.arguments)) for c in choice.message.tool_calls]
        else:
            chunks = list(client.chat.completions.create(stream=True, **kwargs))
            content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
            finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
            names, args = {}, {}
            for c in chunks:
                for tc in (c.choices[0].delta.tool_calls or []) if c.choices else []:
                    names.setdefault(tc.index, tc.function.name)
                    args[tc.index] = args.get(tc.index, "") + (tc.function.arguments or "")
            assert finish == ["tool_calls"] and not content
            calls = [(names[i], json.loads(args[i])) for i in sorted(names)]
        assert calls == [W]


WEATHER_REGEX = r'\{"name": "get_weather", "arguments": \{"city": "Paris", "metric": true\}\}'


class _Forced:
    """``engine`` with every request's output forced to ``regex`` (what the real model writes)."""

    def __init__(self, engine, regex: str):
        self._engine, self._regex = engine, regex

    def __getattr__(self, name):
        return getattr(self._engine, name)

    async def async_generate(self, *args, sampling_params=None, **kwargs):
        forced = sampling_params.replace(regex=self._regex)
        return await self._engine.async_generate(*args, sampling_params=forced, **kwargs)


@pytest.fixture(scope="module")
def engine():
    from radixlm.runtime.engine.engine import Engine

    eng = Engine(max_total_tokens=8192, random_seed=0)
    yield eng
    eng.shutdown()
