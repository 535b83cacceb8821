"""Functionary v3.2 served through its real chat template (llama.cpp's corpus) on the tiny model.

The prompt ends with ``>>>``, so the answer's first line names its recipient: ``all`` (text for the
user, the header dropped), a tool (a call follows, its arguments under the tool's schema) or
neither (plain text). Later parts follow ``>>>``. Forced calls run on the model itself; the
``auto`` turns replay a scripted output through every phase the server runs (the tiny model's
random weights would not write the header on their own), streamed and not.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import jsonschema
import openai
import pytest
from radixlm.runtime.sampling_params import SamplingParams

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from llamacpp_assets import fetch_or_reason  # noqa: E402
from tool_call_cases import API_TOOLS, ASK, SCHEMAS  # noqa: E402

TEMPLATE = "meetkai-functionary-medium-v3.2"


@pytest.fixture(scope="module")
def engine():
    from radixlm.runtime.engine.engine import Engine

    assets = fetch_or_reason()
    if isinstance(assets, str):
        pytest.skip(assets)
    eng = Engine(max_total_tokens=8192, random_seed=0,
                 chat_template=str(assets.templates_dir / f"{TEMPLATE}.jinja"))
    yield eng
    eng.shutdown()


class ScriptedEngine:
    """The tiny engine's tokenizer and config; every phase continues one scripted output.

    A request whose input is the prompt plus a prefix of the script gets the script's next text: up
    to the first stop string (trimmed from the text, its tokens kept, as the engine does), to the
    end of the first JSON value under a call constraint, within ``max_new_tokens``; else to the end."""

    def __init__(self, engine, script: str):
        self.inner, self.script, self.prompt_len = engine, script, None
        self.server_args, self.model_path, self.model_name = engine.server_args, engine.model_path, engine.model_name
        self.tokenizer, self.model_config = engine.tokenizer, engine.model_config

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def _answer(self, input_ids: list[int], sp: SamplingParams) -> tuple[list[int], str, dict]:
        if self.prompt_len is None:
            self.prompt_len = len(input_ids)
        done = self.tokenizer.decode(input_ids[self.prompt_len:], skip_special_tokens=False)
        assert self.script.startswith(done), (done, self.script)
        rest, matched = self.script[len(done):], None
        if sp.ebnf or sp.regex:
            rest = rest[:json.JSONDecoder().raw_decode(rest)[1]]
        hits = [(rest.find(s), s) for s in sp.stop if s in rest]
        if hits:
            at, matched = min(hits)
            rest = rest[:at]
        ids = self.tokenizer.encode(rest)
        kind = "stop"
        if len(ids) > sp.max_new_tokens:
            ids, kind, matched = ids[:sp.max_new_tokens], "length", None
        text = self.tokenizer.decode(ids, skip_special_tokens=False)
        ids += self.tokenizer.encode(matched) if matched else []
        return ids, text, {"finish_reason": {"type": kind, "matched": matched}, "completion_tokens": len(ids),
                           "prompt_tokens": len(input_ids)}

    async def async_generate(self, input_ids: list[int], sampling_params: SamplingParams, stream: bool = False,
                             **_: Any) -> Any:
        ids, text, meta = self._answer(input_ids, sampling_params)
        if not stream:
            return {"text": text, "output_ids": ids, "meta_info": meta}

        async def chunks():
            sent = ""
            for k in range(len(ids)):
                piece = self.tokenizer.decode(ids[:k + 1], skip_special_tokens=False)[:len(text)]
                last = k == len(ids) - 1
                yield {"text": piece[len(sent):] if not last else text[len(sent):], "output_ids": [ids[k]],
                       "meta_info": meta if last else {"completion_tokens": k + 1}}
                sent = piece if not last else text
            if not ids:
                yield {"text": "", "output_ids": [], "meta_info": meta}
        return chunks()


def _client(engine) -> tuple[Any, openai.OpenAI]:
    from radixlm.runtime.server.app import BackgroundServer
    from radixlm.runtime.server.transport.state import ServerConfig

    srv = BackgroundServer(engine, ServerConfig(port=0)).start()
    return srv, openai.OpenAI(base_url=srv.url + "/v1", api_key="x", max_retries=0, timeout=60)


def _turn(engine, script: str, stream: bool, **kwargs: Any) -> tuple[str, list[tuple[str, dict]], str]:
    """(content, calls, finish_reason) of one choice answering with ``script``."""
    srv, client = _client(ScriptedEngine(engine, script))
    try:
        args = {"model": "default", "messages": ASK, "tools": API_TOOLS, "max_tokens": 200, **kwargs}
        if not stream:
            choice = client.chat.completions.create(**args).choices[0]
            calls = [(c.function.name, json.loads(c.function.arguments)) for c in choice.message.tool_calls or []]
            return choice.message.content or "", calls, choice.finish_reason
        content, calls, reason = "", {}, None
        for chunk in client.chat.completions.create(**args, stream=True):
            for choice in chunk.choices:
                content += choice.delta.content or ""
                for tc in choice.delta.tool_calls or []:
                    got = calls.setdefault(tc.index, [tc.function.name, ""])
                    got[1] += tc.function.arguments or ""
                reason = choice.finish_reason or reason
        return content, [(n, json.loads(a)) for _, (n, a) in sorted(calls.items())], reason
    finally:
        srv.stop()


GW = ("get_weather", {"city": "Paris", "metric": True})
GT = ("get_time", {"zone": "UTC"})
# scripted output -> (content, calls, finish_reason) under tool_choice auto
TURNS = {
    "all\nHello there.\nBye.": ("Hello there.\nBye.", [], "stop"),
    'all\nLet me check.>>>get_time\n{"zone": "UTC"}': ("Let me check.", [GT], "tool_calls"),
    'get_weather\n{"city": "Paris", "metric": true}>>>get_time\n{"zone": "UTC"}': ("", [GW, GT], "tool_calls"),
    'get_time\n{"zone": "UTC"}>>>all\nDone.': ("Done.", [GT], "tool_calls"),  # a turn that called
    "Hi\nthere": ("Hi\nthere", [], "stop"),
}


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("script", sorted(TURNS))
def test_auto_turns_drop_the_headers_and_call_the_named_tools(engine, script, stream):
    content, calls, reason = _turn(engine, script, stream)
    assert (content, calls, reason) == TURNS[script]
    assert ">>>" not in content and not content.startswith("all\n")


def test_a_tool_line_is_content_when_calls_are_off(engine):
    script = 'get_time\n{"zone": "UTC"}'
    assert _turn(engine, script, False, tool_choice="none") == (script, [], "stop")


def test_min_tokens_applies_to_the_answer_not_the_header(engine):
    assert _turn(engine, "all\nHello there, friend.", False, extra_body={"min_tokens": 40}) == (
        "Hello there, friend.", [], "stop")  # more than the header line may take


def test_the_content_header_alone_is_no_content(engine):
    assert _turn(engine, "all", False) == ("", [], "stop")


@pytest.fixture(scope="module")
def live(engine):
    srv, client = _client(engine)
    yield client
    srv.stop()


@pytest.mark.parametrize("choice", ["required", {"type": "function", "function": {"name": "get_time"}}])
def test_forced_calls_on_the_model_stream_as_they_answer_whole(live, choice):
    for seed in range(2):
        kwargs = {"model": "default", "messages": ASK, "tools": API_TOOLS, "tool_choice": choice,
                  "max_tokens": 120, "temperature": 1.0, "seed": seed}
        whole = live.chat.completions.create(**kwargs).choices[0]
        assert whole.finish_reason == "tool_calls" and whole.message.tool_calls, whole
        for call in whole.message.tool_calls:
            jsonschema.validate(json.loads(call.function.arguments), SCHEMAS[call.function.name])
        if isinstance(choice, dict):
            assert [c.function.name for c in whole.message.tool_calls] == ["get_time"]
        streamed: dict[int, list[str]] = {}
        for chunk in live.chat.completions.create(**kwargs, stream=True):
            for tc in (chunk.choices[0].delta.tool_calls or []) if chunk.choices else []:
                got = streamed.setdefault(tc.index, [tc.function.name or "", ""])
                got[1] += tc.function.arguments or ""
        assert [tuple(v) for _, v in sorted(streamed.items())] == [
            (c.function.name, c.function.arguments) for c in whole.message.tool_calls]
        assert ">>>" not in (whole.message.content or "")
