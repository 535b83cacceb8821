"""The per-family table: every llama.cpp corpus template that renders tool calls, served in process
with the tiny random-weight model, through the OpenAI SDK.

One row per template, five checks: a forced call (``tool_choice: required``, one call) comes back
as a valid call; ``auto`` answers (whatever the random weights write) parse into a well-formed
message; forced parallel calls (``parallel_tool_calls``) each validate and fit the budget, or the
budget's cut is reported in ``truncated_tool_call``; the OpenAI SDK's accumulation of the stream
equals the non-streamed message (content, reasoning, calls, finish reason, the truncated call);
and the second turn (the assistant's ``tool_calls`` and the tool's result) renders through the
template and answers. In reasoning templates the forced call follows the thinking (closed by the
model, or by the server at the thinking's share of the budget).

Each row's server is the one engine behind an HTTP server that sees the template's chat template
(the parsers are detected from it, as ``radixlm serve`` would). Templates that are themselves
broken are ``xfail(strict=True)`` with the reason. The default run serves one template per (tool
format, reasoning format) group; ``-m slow`` serves them all (64 rows: 60 pass, 4 broken).
"""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path
from typing import Any

import jsonschema
import openai
import pytest
from openai.lib.streaming.chat import ChatCompletionStreamState
from radixlm.runtime.chat_formats.reasoning.registry import detect_name as detect_reasoning
from radixlm.runtime.chat_formats.tool_formats.registry import REGISTRY, renders_calls

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from llamacpp_assets import fetch_or_reason  # noqa: E402

# every property described (Command R+'s template requires it)
WEATHER = {"type": "object", "properties": {"city": {"enum": ["Paris", "Lima"], "description": "the city"},
                                            "metric": {"type": "boolean", "description": "in Celsius"}},
           "required": ["city", "metric"], "additionalProperties": False}
TIME = {"type": "object", "properties": {"zone": {"enum": ["UTC", "CET"], "description": "the zone"}},
        "required": ["zone"], "additionalProperties": False}
SCHEMAS = {"get_weather": WEATHER, "get_time": TIME}
TOOLS = [{"type": "function", "function": {"name": n, "description": f"the {n[4:]}", "parameters": s}}
         for n, s in SCHEMAS.items()]
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]
BUDGET = 240
CALL_ID = "call00042"  # alphanumeric, 9 characters: Mistral's templates refuse other ids

# template -> why it cannot pass (the template itself is broken: transformers fails on it too)
BROKEN = {
    "fireworks-ai-llama-3-firefunction-v2": "the template reads a `functions` variable that "
                                            "apply_chat_template never passes ('functions' is undefined)",
    "llama-cpp-deepseek-r1": "the template pipes a generator into `tojson(indent=2)` "
                             "(`tools | map(attribute='function')`), which is not JSON: a TypeError with any tools",
    "Kimi-K2-Instruct": "a second turn with tool calls calls `list.append`, which transformers' immutable "
                        "Jinja sandbox refuses",
    "Kimi-K2-Thinking": "a second turn with tool calls calls `list.append`, which transformers' immutable "
                        "Jinja sandbox refuses",
}


def _rows() -> list:
    """Every template that renders calls; the first of each (tool format, reasoning format) group runs
    in the default run, the others in ``-m slow``."""
    got = fetch_or_reason()
    if isinstance(got, str):
        return []
    sources = {p.stem: p.read_text(encoding="utf-8") for p in got.templates()}
    groups: dict[tuple, str] = {}  # group -> its first template that is not broken
    for stem, source in sources.items():
        if renders_calls(source) and stem not in BROKEN:
            groups.setdefault((REGISTRY.detected(source), detect_reasoning(source)), stem)
    rows = []
    for stem, source in sources.items():
        if not renders_calls(source):
            continue
        marks = [] if stem in groups.values() else [pytest.mark.slow]
        if stem in BROKEN:
            marks.append(pytest.mark.xfail(strict=True, reason=BROKEN[stem]))
        rows.append(pytest.param(stem, marks=marks))
    return rows


class TemplateEngine:
    """The shared engine as a server sees it with another chat template (same vocabulary and weights)."""

    def __init__(self, engine: Any, template: str):
        self._engine = engine
        self.tokenizer = copy.copy(engine.tokenizer)
        self.tokenizer._chat_template_override = template

    def __getattr__(self, name: str) -> Any:
        return getattr(self._engine, name)


@pytest.fixture(scope="module")
def engine():
    from radixlm.runtime.engine import Engine

    if isinstance(reason := fetch_or_reason(), str):
        pytest.skip(reason)
    eng = Engine(max_total_tokens=16384, random_seed=0)
    yield eng
    eng.shutdown()


def _serve(engine, stem: str):
    from radixlm.runtime.server.app import BackgroundServer
    from radixlm.runtime.server.transport.state import ServerConfig

    source = (fetch_or_reason().templates_dir / f"{stem}.jinja").read_text(encoding="utf-8")
    return BackgroundServer(TemplateEngine(engine, source), ServerConfig(port=0)).start()


def _message(choice: Any) -> dict[str, Any]:
    """What a client reads of a choice: content, reasoning, calls, finish reason, the truncated call."""
    msg = choice.message
    extra = msg.model_extra or {}
    calls = [(c.function.name, c.function.arguments) for c in msg.tool_calls or []]
    truncated = (choice.model_extra or {}).get("truncated_tool_call")
    return {"content": msg.content or "", "reasoning": extra.get("reasoning_content") or "", "calls": calls,
            "finish": choice.finish_reason, "truncated": truncated and truncated["function"]["name"]}


def _streamed(client: openai.OpenAI, kwargs: dict) -> dict[str, Any]:
    """The stream as the OpenAI SDK accumulates it."""
    state, truncated = ChatCompletionStreamState(), None
    for chunk in client.chat.completions.create(**kwargs, stream=True):
        state.handle_chunk(chunk)
        for c in chunk.choices:
            truncated = (c.model_extra or {}).get("truncated_tool_call") or truncated
    got = _message(state.current_completion_snapshot.choices[0])  # (get_final_completion raises on length)
    got["truncated"] = truncated and truncated["function"]["name"]
    return got


def _valid_calls(got: dict, problems: list[str], what: str) -> None:
    for name, args in got["calls"]:
        try:
            jsonschema.validate(json.loads(args), SCHEMAS[name])
        except (ValueError, KeyError, jsonschema.ValidationError) as e:
            problems.append(f"{what}: call {name}({args}) invalid: {e}")


def _check(client: openai.OpenAI) -> list[str]:
    """The row's five checks; the problems found (empty: the row passes)."""
    problems: list[str] = []
    base = dict(model="default", messages=ASK, tools=TOOLS, max_tokens=BUDGET, temperature=1.0)
    forced = _message(client.chat.completions.create(**base, tool_choice="required", parallel_tool_calls=False,
                                                     seed=1).choices[0])
    _valid_calls(forced, problems, "forced")
    if forced["finish"] != "tool_calls" or len(forced["calls"]) != 1:
        problems.append(f"forced: {forced}")
    auto = _message(client.chat.completions.create(**base, tool_choice="auto", seed=2).choices[0])
    _valid_calls(auto, problems, "auto")
    parallel_args = dict(base, tool_choice="required", seed=3)
    parallel = _message(client.chat.completions.create(**parallel_args).choices[0])
    _valid_calls(parallel, problems, "parallel")
    fits = parallel["finish"] == "tool_calls" and parallel["calls"]
    if not fits and not (parallel["finish"] == "length" and (parallel["truncated"] or parallel["calls"])):
        problems.append(f"parallel: {parallel}")
    streamed = _streamed(client, parallel_args)
    if streamed != parallel:
        problems.append(f"stream != whole: {streamed} != {parallel}")
    if forced["calls"]:
        (name, args), = forced["calls"]
        history = ASK + [{"role": "assistant", "content": None, "tool_calls": [
            {"id": CALL_ID, "type": "function", "function": {"name": name, "arguments": args}}]},
            {"role": "tool", "tool_call_id": CALL_ID, "content": "sunny, 21 C"}]
        try:
            second = client.chat.completions.create(**dict(base, messages=history, max_tokens=8, seed=4))
            if second.usage.prompt_tokens <= 0:
                problems.append("second turn: no prompt")
        except openai.APIError as e:
            problems.append(f"second turn: {e}")
    return problems


@pytest.mark.parametrize("stem", _rows())
def test_the_template_row(engine, stem):
    server = _serve(engine, stem)
    try:
        client = openai.OpenAI(base_url=server.url + "/v1", api_key="x", max_retries=0, timeout=300)
        problems = _check(client)
    finally:
        server.stop()
    assert not problems, "\n".join(problems)
