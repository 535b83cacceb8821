"""Reasoning formats: the split into reasoning_content / content, streamed and not, the engine's
reasoning gate (constraints apply after the thinking), and the server's request fields."""

from __future__ import annotations

import json
import shutil

import openai
import pytest
import requests
from radixlm.runtime.chat_formats.reasoning.base import CLOSED, NONE, OPEN
from radixlm.runtime.chat_formats.reasoning.registry import FORMATS, detect_name, get_format, names
from radixlm.runtime.engine.constraints import NOT_CLOSED, ReasoningGate
from radixlm.runtime.server_args import REASONING_PARSERS, ServerArgs

HARMONY = ("<|channel|>analysis<|message|>Need the weather.<|end|>"
           "<|start|>assistant<|channel|>final<|message|>It is sunny.<|return|>")
# (format, prompt state, output, reasoning_content, content)
GOLDEN = [
    ("qwen3", NONE, "<think>\nLet me see.\n</think>\n\nHello!", "Let me see.", "Hello!"),
    ("qwen3", NONE, "  Hello, no thinking.", "", "  Hello, no thinking."),
    ("qwen3", NONE, "<think>cut off by the bud", "cut off by the bud", ""),
    ("qwen3", CLOSED, "Hello <think>x</think>", "", "Hello <think>x</think>"),
    ("qwen3", OPEN, "still thinking</think>answer", "still thinking", "answer"),
    ("deepseek-r1", NONE, "I should greet.\n</think>\n\nHi there", "I should greet.", "Hi there"),
    ("deepseek-r1", OPEN, "<think>\nopened twice</think>ok", "opened twice", "ok"),
    ("deepseek-r1", NONE, "never closed <", "never closed <", ""),
    ("deepseek-r1", CLOSED, "just the answer", "", "just the answer"),
    ("gpt-oss", NONE, HARMONY, "Need the weather.", "It is sunny."),
    ("gpt-oss", NONE, "<|channel|>analysis<|message|>hmm <|e", "hmm <|e", ""),
    ("gpt-oss", CLOSED, '{"a": 1}<|return|>', "", '{"a": 1}'),
    ("gpt-oss", NONE, "plain text", "", "plain text"),
]


def _chunked(fmt, state, text, k):
    parser, reasoning, content = FORMATS[fmt].parser(state), "", ""
    for i in range(0, len(text), k):
        out = parser.feed(text[i:i + k])
        reasoning, content = reasoning + out.reasoning, content + out.content
    out = parser.finish()
    return reasoning + out.reasoning, content + out.content


@pytest.mark.parametrize(("fmt", "state", "text", "reasoning", "content"), GOLDEN)
def test_golden_split_and_every_chunking_agree(fmt, state, text, reasoning, content):
    whole = FORMATS[fmt].parse(text, state)
    assert (whole.reasoning, whole.content) == (reasoning, content)
    for k in range(1, len(text) + 1):
        assert _chunked(fmt, state, text, k) == (reasoning, content), k


def test_parser_names_and_the_server_flag():
    assert tuple(names()) == REASONING_PARSERS
    assert ServerArgs(reasoning_parser="qwen3").reasoning_parser == "qwen3"
    with pytest.raises(ValueError, match="reasoning_parser must be one of .*gpt-oss"):
        ServerArgs(reasoning_parser="nope")
    with pytest.raises(ValueError, match="reasoning_parser must be one of"):
        get_format("nope")
    assert get_format("deepseek_r1").name == "deepseek-r1"


def test_prompt_states():
    assert FORMATS["deepseek-r1"].prompt_state("<｜Assistant｜><think>\n") == OPEN
    assert FORMATS["qwen3"].prompt_state("<|im_start|>assistant\n<think>\n\n</think>\n\n") == CLOSED
    assert FORMATS["qwen3"].prompt_state("<|im_start|>assistant\n") == NONE


DETECT = {"Qwen-Qwen3-0.6B": "qwen3", "Qwen-QwQ-32B": "qwen3", "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B": "deepseek-r1",
          "deepseek-ai-DeepSeek-R1-Distill-Llama-8B": "deepseek-r1", "openai-gpt-oss-120b": "gpt-oss",
          "meta-llama-Llama-3.1-8B-Instruct": None, "Qwen-Qwen2.5-7B-Instruct": None}


@pytest.mark.parametrize(("template", "fmt"), sorted(DETECT.items()))
def test_detection_from_real_templates(template, fmt):
    from llamacpp_assets import fetch_or_reason

    assets = fetch_or_reason()
    if isinstance(assets, str):
        pytest.skip(assets)
    assert detect_name((assets.templates_dir / f"{template}.jinja").read_text()) == fmt


# ---- the engine's reasoning gate, on token sequences ---------------------------------------------


class _ToyTokenizer:
    """Token i decodes to TEXT[i]."""

    TEXT = ["a", "b", "</think>", "</", "think>", "{", "}", "x</think>\n"]

    def decode(self, ids, skip_special_tokens=True):
        return "".join(self.TEXT[i] for i in ids)


class _ToyMatcher:
    """A RequestMatcher stand-in that records what it was asked."""

    def __init__(self):
        self.accepted, self.masks, self.notes = [], 0, []

    def fill_mask(self, row):
        self.masks += 1
        row.fill_(0)

    def accept(self, token):
        self.accepted.append(token)
        return "stop" if token == 6 else None

    def close(self, output_len, max_output_len):
        return (output_len, max_output_len)

    def draft(self, max_tokens):
        return [5][:max_tokens]

    def violations(self, text):
        return [] if text.strip() == "{}" else [f"bad {text!r}"]


class _Row:
    def __init__(self):
        self.value = None

    def fill_(self, v):
        self.value = v


@pytest.mark.parametrize("thinking", [[0, 1, 2], [0, 3, 4], [1, 7]])
def test_gate_watches_until_the_marker_then_a_fresh_matcher_decides(thinking):
    inner = _ToyMatcher()
    gate = ReasoningGate(inner, _ToyTokenizer(), "</think>", [2])
    for t in thinking:
        row = _Row()
        gate.fill_mask(row)
        assert row.value == -1 and gate.close(1, 10) is None and gate.draft(4) == []
        assert gate.accept(t) is None
    assert not gate.open and inner.accepted == [] and inner.masks == 0
    row = _Row()
    gate.fill_mask(row)
    assert row.value == 0 and inner.masks == 1
    assert gate.accept(5) is None and gate.accept(6) == "stop"
    assert inner.accepted == [5, 6]  # the thinking never reached the grammar
    assert gate.close(len(thinking) + 1, 20) == (1, 20 - len(thinking))  # counted after the marker
    assert gate.draft(4) == [5]
    assert gate.violations(_ToyTokenizer().decode(thinking + [5, 6])) == []


def test_gate_that_never_closes_reports_it():
    gate = ReasoningGate(_ToyMatcher(), _ToyTokenizer(), "</think>", [2])
    for t in (0, 1, 3, 0):  # "</" then "a": no marker
        assert gate.accept(t) is None
    assert gate.open and gate.violations("ab</a") == [NOT_CLOSED]


def test_gate_on_the_engine_applies_the_schema_after_the_marker():
    """The marker is what greedy decoding writes first, so the gate must close on it and the
    grammar must constrain only what follows."""
    from radixlm.runtime.engine.engine import Engine
    from radixlm.runtime.sampling_params import SamplingParams

    schema = {"type": "object", "properties": {"ok": {"enum": [True]}}, "required": ["ok"],
              "additionalProperties": False}
    with Engine(max_total_tokens=2048, random_seed=0) as eng:
        free = eng.generate("Tell me", {"temperature": 0, "max_new_tokens": 3})
        marker = eng.tokenizer.decode(free["output_ids"][:2])
        assert marker
        params = SamplingParams(temperature=0, max_new_tokens=40, json_schema=schema)
        params.reasoning_end = marker  # the field SamplingParams is to declare; the gate reads it
        out = eng.generate("Tell me", params)
        head, found, answer = out["text"].partition(marker)
        assert found and head == ""
        assert json.loads(answer) == {"ok": True}
        assert out["meta_info"]["finish_reason"]["type"] == "stop"


# ---- the server -------------------------------------------------------------------------------

QWEN3_TEMPLATE = (
    "{%- for m in messages -%}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor -%}"
    "{%- if add_generation_prompt -%}<|im_start|>assistant\n"
    "{%- if enable_thinking is defined and enable_thinking is false %}\n<think>\n\n</think>\n\n{% endif -%}"
    "{%- endif -%}")
ASK = [{"role": "user", "content": "Hello"}]
SCHEMA = {"type": "object", "properties": {"ok": {"enum": [True, False]}}, "required": ["ok"],
          "additionalProperties": False}


@pytest.fixture(scope="module")
def qwen3_engine(tmp_path_factory):
    from radixlm.runtime.checkpoints.synthetic import checkpoint_path
    from radixlm.runtime.engine.engine import Engine

    path = tmp_path_factory.mktemp("qwen3-thinking") / "ckpt"
    shutil.copytree(checkpoint_path("qwen3", "tiny"), path)
    (path / "chat_template.jinja").write_text(QWEN3_TEMPLATE)
    eng = Engine(model_path=str(path), max_total_tokens=4096, random_seed=0)
    yield eng
    eng.shutdown()


@pytest.fixture
def server(qwen3_engine):
    from radixlm.runtime.server.app import BackgroundServer
    from radixlm.runtime.server.transport.state import ServerConfig

    servers = []

    def start(parser=None):
        qwen3_engine.server_args.reasoning_parser = parser
        srv = BackgroundServer(qwen3_engine, ServerConfig(port=0)).start()
        servers.append(srv)
        return srv, openai.OpenAI(base_url=srv.url + "/v1", api_key="x", max_retries=0, timeout=60)

    yield start
    for srv in servers:
        srv.stop()
    qwen3_engine.server_args.reasoning_parser = None


def _streamed(client, **kw):
    reasoning, content, reason = [], [], None
    for chunk in client.chat.completions.create(stream=True, **kw):
        if not chunk.choices:
            continue
        delta = chunk.choices[0].delta
        reasoning.append(getattr(delta, "reasoning_content", None) or "")
        content.append(delta.content or "")
        reason = chunk.choices[0].finish_reason or reason
    return "".join(reasoning) or None, "".join(content) or None, reason


def test_template_is_detected_and_thinking_streams_like_the_whole(server):
    srv, client = server("deepseek-r1")  # forced: the tiny model's words are all thinking
    kw = dict(model="default", messages=ASK, max_tokens=12, temperature=0)
    out = client.chat.completions.create(**kw)
    msg = out.choices[0].message
    assert msg.reasoning_content and msg.content is None and out.choices[0].finish_reason == "length"
    assert _streamed(client, **kw) == (msg.reasoning_content, msg.content, "length")
    _, client = server(None)  # detected from the template's <think>: qwen3, which finds no <think> here
    plain = client.chat.completions.create(**kw).choices[0].message
    assert plain.reasoning_content is None and plain.content == msg.reasoning_content


def test_separate_reasoning_false_keeps_the_thinking_in_content(server):
    _, client = server("deepseek-r1")
    kw = dict(model="default", messages=ASK, max_tokens=12, temperature=0)
    split = client.chat.completions.create(**kw).choices[0].message
    whole = client.chat.completions.create(extra_body={"separate_reasoning": False}, **kw).choices[0].message
    assert whole.content and getattr(whole, "reasoning_content", None) is None
    assert whole.content.strip() == split.reasoning_content.strip()


def test_enable_thinking_false_gives_valid_json_content(server):
    _, client = server("qwen3")
    for stream in (False, True):
        kw = dict(model="default", messages=ASK, max_tokens=40, temperature=0,
                  response_format={"type": "json_schema", "json_schema": {"name": "r", "schema": SCHEMA}},
                  extra_body={"chat_template_kwargs": {"enable_thinking": False}})
        if stream:
            reasoning, content, reason = _streamed(client, **kw)
        else:
            out = client.chat.completions.create(**kw)
            reasoning, content, reason = (out.choices[0].message.reasoning_content,
                                          out.choices[0].message.content, out.choices[0].finish_reason)
        assert reasoning is None and reason == "stop"
        assert json.loads(content)["ok"] in (True, False)


def test_budget_spent_thinking_is_length_not_invalid_json(server):
    _, client = server("deepseek-r1")  # the prompt leaves the thinking open; the tiny model never closes it
    out = client.chat.completions.create(
        model="default", messages=ASK, max_tokens=10, temperature=0,
        response_format={"type": "json_schema", "json_schema": {"name": "r", "schema": SCHEMA}})
    choice = out.choices[0]
    assert choice.finish_reason == "length" and choice.message.content is None
    assert choice.message.reasoning_content  # free text: the grammar never applied


CALL_TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"enum": ["Paris", "Lima"]}}, "required": ["city"],
    "additionalProperties": False}}}]


def _accumulated(client, **kw):
    """(reasoning, content, calls, finish_reason) of a chat answer, as the OpenAI SDK accumulates a stream."""
    from openai.lib.streaming.chat import ChatCompletionStreamState

    state = ChatCompletionStreamState()
    for chunk in client.chat.completions.create(stream=True, **kw):
        state.handle_chunk(chunk)
    return _read(state.current_completion_snapshot.choices[0])


def _read(choice):
    msg = choice.message
    calls = [(c.function.name, c.function.arguments) for c in msg.tool_calls or []]
    return (msg.model_extra or {}).get("reasoning_content"), msg.content or None, calls, choice.finish_reason


@pytest.mark.parametrize("budget", [120, 240])
def test_a_forced_call_follows_a_thinking_the_model_never_closes(server, budget):
    """The prompt leaves the thinking open and the tiny model never writes ``</think>``: the thinking
    takes its share of the budget, the server closes it, and the call follows (streamed alike)."""
    from radixlm.runtime.server.chat.pipeline import thinking_share

    _, client = server("deepseek-r1")
    kw = dict(model="default", messages=ASK, tools=CALL_TOOLS, tool_choice="required", max_tokens=budget,
              temperature=1.0, seed=budget)
    out = client.chat.completions.create(**kw)
    reasoning, content, calls, reason = whole = _read(out.choices[0])
    assert reason == "tool_calls" and content is None and reasoning, whole
    assert [name for name, _ in calls] == ["get_weather"] and json.loads(calls[0][1])["city"] in ("Paris", "Lima")
    assert out.usage.completion_tokens <= budget
    assert thinking_share(budget) == budget - budget // 2
    assert _accumulated(client, **kw) == whole


def test_a_forced_call_when_the_model_opens_no_thinking(server):
    """``qwen3``: the model writes ``<think>`` itself, and the tiny one never does. Its words are
    content, no end marker is written into them, and the call follows."""
    _, client = server("qwen3")
    kw = dict(model="default", messages=ASK, tools=CALL_TOOLS, tool_choice={
        "type": "function", "function": {"name": "get_weather"}}, max_tokens=160, temperature=1.0, seed=3)
    reasoning, content, calls, reason = whole = _read(client.chat.completions.create(**kw).choices[0])
    assert reason == "tool_calls" and reasoning is None and "</think>" not in (content or ""), whole
    assert [name for name, _ in calls] == ["get_weather"]
    assert _accumulated(client, **kw) == whole


def test_thinking_share_keeps_room_for_the_calls():
    from radixlm.runtime.server.chat.pipeline import CALL_ROOM, thinking_share

    assert [thinking_share(b) for b in (1, 2, 9, 100)] == [1, 1, 5, 50]
    assert thinking_share(4096) == 4096 - CALL_ROOM


def test_chat_template_kwargs_are_checked(server):
    srv, _ = server("qwen3")
    url = srv.url + "/v1/chat/completions"
    for bad, param in (({"chat_template_kwargs": [1]}, "chat_template_kwargs"),
                       ({"chat_template_kwargs": {"messages": []}}, "chat_template_kwargs.messages"),
                       ({"separate_reasoning": "no"}, "separate_reasoning")):
        r = requests.post(url, json={"messages": ASK, "max_tokens": 2, **bad}, timeout=30)
        assert r.status_code == 400 and r.json()["error"]["param"] == param, r.text


# ---- the gpt-oss tool-call format ----------------------------------------------------------------

WEATHER = {"type": "object", "properties": {"city": {"enum": ["Paris", "Lima"]}}, "required": ["city"],
           "additionalProperties": False}
HARMONY_CALLS = [
    ('<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city": "Paris"}<|call|>',
     "", [("get_weather", {"city": "Paris"})]),
    ('Checking.<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>'
     '{"city": "Lima"}<|call|>', "Checking.<|start|>assistant", [("get_weather", {"city": "Lima"})]),
    ("<|channel|>commentary to=functions.get_weather <|message|>not json<|call|>",
     "<|channel|>commentary to=functions.get_weather <|message|>not json<|call|>", []),
]


@pytest.mark.parametrize(("text", "content", "calls"), HARMONY_CALLS)
def test_gpt_oss_calls_parse_and_stream_alike(text, content, calls):
    from radixlm.runtime.chat_formats.tool_formats.registry import get_format as tool_format
    from radixlm.runtime.chat_formats.tool_formats.scanner import accumulate
    from radixlm.runtime.chat_formats.tools import ToolSpec

    fmt, tools = tool_format("gpt_oss"), [ToolSpec("get_weather", "Weather", WEATHER)]
    assert tool_format("gpt-oss") is fmt
    for step in (1, 2, 3, 7, len(text)):
        parser = fmt.stream(tools)
        events = [e for i in range(0, len(text), step) for e in parser.feed(text[i:i + step])] + parser.finish()
        for result in (fmt.parse(text, tools), accumulate(events)):
            assert result.content == content, step
            assert [(c.name, json.loads(c.arguments)) for c in result.calls] == calls, step


def test_gpt_oss_tool_format_is_detected_from_its_template():
    from llamacpp_assets import fetch_or_reason
    from radixlm.runtime.chat_formats.tool_formats.registry import detect_name as detect_tools

    assets = fetch_or_reason()
    if isinstance(assets, str):
        pytest.skip(assets)
    assert detect_tools((assets.templates_dir / "openai-gpt-oss-120b.jinja").read_text()) == "gpt_oss"


def test_gpt_oss_forced_call_through_the_server(server, qwen3_engine):
    import jsonschema

    qwen3_engine.server_args.tool_call_parser = "gpt_oss"
    try:
        _, client = server(None)  # qwen3 reasoning (detected); enable_thinking false: the call comes first
        tools = [{"type": "function", "function": {"name": "get_weather", "parameters": WEATHER}}]
        for seed in range(2):
            out = client.chat.completions.create(
                model="default", messages=ASK, tools=tools, tool_choice="required", max_tokens=60, seed=seed,
                extra_body={"chat_template_kwargs": {"enable_thinking": False}})
            call = out.choices[0].message.tool_calls[0]
            assert out.choices[0].finish_reason == "tool_calls" and call.function.name == "get_weather"
            jsonschema.validate(json.loads(call.function.arguments), WEATHER)
    finally:
        qwen3_engine.server_args.tool_call_parser = None
