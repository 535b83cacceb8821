"""Streamed tool-call arguments: announced first (index, id, name), then the arguments as they are
generated, and the fragments of every chunking concatenate to the non-streamed arguments exactly.

Unit level: ``CallStream`` over each family's golden call text at several chunk sizes. Live: the
same request streamed and not, through the server in several families' syntax."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from radixlm.runtime.chat_formats.tool_formats.registry import FORMATS, get_format
from radixlm.runtime.chat_formats.tool_formats.scanner import CallStream, accumulate

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tool_call_cases import API_TOOLS, ASK, GOLDEN, TOOLS, family_client  # noqa: E402

GPT_OSS = '<|channel|>commentary to=functions.get_time <|constrain|>json<|message|>{"zone": "UTC"}<|call|>'
CALL_TEXTS = {family: cases[0][0] for family, cases in GOLDEN.items()} | {"gpt_oss": GPT_OSS}
JSON_FAMILIES = sorted(f for f in CALL_TEXTS if FORMATS[f].call_head is not None)
STEPS = (1, 2, 3, 5, 11)


def _feed(family: str, text: str, step: int):
    stream = CallStream(get_format(family), TOOLS, 0)
    per_chunk = [stream.feed(text[i:i + step]) for i in range(0, len(text), step)]
    return stream, per_chunk, stream.finish()


def test_every_json_family_streams_its_arguments():
    assert set(JSON_FAMILIES) == {"hermes", "llama3", "mistral", "deepseekv3", "deepseekv31", "kimi_k2", "granite",
                                  "gpt_oss", "cohere", "command_r", "functionary_v31",
                                  "functionary_v32"}


@pytest.mark.parametrize("family", JSON_FAMILIES)
def test_arguments_stream_as_generated_and_add_up_exactly(family):
    text = CALL_TEXTS[family]
    whole = get_format(family).parse(text, TOOLS).calls
    assert len(whole) == 1
    stream, chunks, tail = _feed(family, text, len(text))
    one_piece = accumulate([e for c in chunks for e in c] + tail).calls
    args = one_piece[0].arguments
    assert json.loads(args) == json.loads(whole[0].arguments) and one_piece[0].name == whole[0].name
    assert text[stream.args_from:stream.args_end] == args  # the arguments exactly as written
    for step in STEPS:
        stream, chunks, tail = _feed(family, text, step)
        events = [e for c in chunks for e in c] + tail
        assert events[0].kind == "call_start" and events[0].name == whole[0].name and events[0].index == 0
        assert all(e.kind == "call_args" for e in events[1:])
        assert "".join(e.text for e in events[1:]) == args, step
        # fragments leave as soon as they are generated: the first one before the arguments close
        first = next(i for i, c in enumerate(chunks) if any(e.kind == "call_args" for e in c))
        assert (first + 1) * step < stream.args_end, step
        if step == 1:
            assert len(events) - 1 == len(args)  # one fragment per generated character


@pytest.mark.parametrize("family", sorted(set(CALL_TEXTS) - set(JSON_FAMILIES)))
def test_other_layouts_send_the_call_whole_at_its_end(family):
    text = CALL_TEXTS[family]
    whole = get_format(family).parse(text, TOOLS).calls
    for step in STEPS:
        _, chunks, tail = _feed(family, text, step)
        assert not any(chunks) and [e.kind for e in tail] == ["call_start", "call_args"]
        assert accumulate(tail).calls[0].arguments == whole[0].arguments


def test_a_cut_off_call_keeps_what_was_streamed():
    text = CALL_TEXTS["hermes"]
    cut = text[:text.index('"metric"')]
    stream, chunks, tail = _feed("hermes", cut, 3)
    assert not stream.complete and tail == []
    assert accumulate([e for c in chunks for e in c]).calls[0].arguments == '{"city": "Paris", '


def test_the_server_sends_a_call_once_it_is_complete_and_never_the_cut_one():
    """The call phase's hold (``pipeline._HeldCalls``) over a turn of parallel calls cut in its third:
    each of the first two is released as the next one starts, the cut one never (it is the
    truncated call, as far as it was written)."""
    from radixlm.runtime.server.chat.pipeline import ChoiceEvent, _HeldCalls

    text = CALL_TEXTS["hermes"]
    turn = "\n".join([text, text, text[:text.index('"metric"')]])
    stream, held, sent = CallStream(get_format("hermes"), TOOLS, 0), _HeldCalls(), []
    for i in range(0, len(turn), 4):
        for e in stream.feed(turn[i:i + 4]):
            ev = ChoiceEvent(e.kind, text=e.text, call_index=e.index, call_id=e.id, name=e.name)
            released = held.add(ev)
            assert all(r.call_index < ev.call_index for r in released)
            sent += released
    assert {e.call_index for e in sent} == {0, 1}  # each released as the next one started
    stream.finish(cut=True)
    assert stream.cut_index == 2 and held.release(stream.cut_index) == []
    whole = get_format("hermes").parse(text, TOOLS).calls[0]
    got = [(s.name, "".join(e.text for e in sent if e.kind == "call_args" and e.call_index == s.call_index))
           for s in sent if s.kind == "call_start"]
    assert got == [(whole.name, whole.arguments)] * 2
    truncated = held.call(2)
    assert truncated.name == "get_weather" and truncated.arguments == '{"city": "Paris", '


LIVE = ("hermes", "llama3", "mistral", "deepseekv31", "kimi_k2", "qwen3_coder")


@pytest.fixture(scope="module")
def engine():
    from radixlm.runtime.engine.engine import Engine

    eng = Engine(max_total_tokens=8192, random_seed=0)
    yield eng
    eng.shutdown()


def _streamed(chunks) -> tuple[dict[int, dict], list[str], str | None]:
    calls, order, reason = {}, [], None
    for chunk in chunks:
        for choice in chunk.choices:
            for tc in choice.delta.tool_calls or []:
                entry = calls.setdefault(tc.index, {"id": None, "name": None, "arguments": "", "fragments": 0})
                if tc.id:
                    entry["id"], entry["name"] = tc.id, tc.function.name
                    order.append("start")
                if tc.function is not None and tc.function.arguments:
                    entry["arguments"] += tc.function.arguments
                    entry["fragments"] += 1
                    order.append("args")
            reason = choice.finish_reason or reason
    return calls, order, reason


@pytest.mark.parametrize("family", LIVE)
def test_streamed_calls_equal_the_non_streamed_ones(engine, family):
    with family_client(engine, family) as client:
        for seed, choice in enumerate(["required", {"type": "function", "function": {"name": "get_time"}}]):
            kwargs = dict(model="default", messages=ASK, tools=API_TOOLS, tool_choice=choice, max_tokens=80,
                          temperature=1.0, seed=seed, parallel_tool_calls=False)
            full = client.chat.completions.create(**kwargs).choices[0]
            calls, order, reason = _streamed(client.chat.completions.create(**kwargs, stream=True))
            assert reason == full.finish_reason == "tool_calls" and len(calls) == len(full.message.tool_calls) == 1
            want = full.message.tool_calls[0].function
            assert calls[0]["name"] == want.name and calls[0]["arguments"] == want.arguments
            assert order[0] == "start"
            if FORMATS[family].call_head is not None:
                assert calls[0]["fragments"] > 1, "the arguments came whole"
