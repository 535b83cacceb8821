"""Tool-call formats: golden outputs per family (parse == every streamed chunking), detection from
the real chat templates, and forced calls through the live server in several families' syntax."""

from __future__ import annotations

import json
import re
import sys
from contextlib import contextmanager
from pathlib import Path

import jsonschema
import openai
import pytest
from radixlm.runtime.chat_formats.tool_formats.registry import FORMATS, detect_name, get_format, names
from radixlm.runtime.chat_formats.tool_formats.scanner import accumulate
from radixlm.runtime.chat_formats.tools import ToolSpec
from radixlm.runtime.server_args import TOOL_CALL_PARSERS, ServerArgs

sys.path.insert(0, str(Path(__file__).parent))
from llamacpp_assets import fetch_or_reason  # noqa: E402

WEATHER = {"type": "object", "properties": {"city": {"enum": ["Paris", "Tokyo", "Lima"]},
                                            "metric": {"type": "boolean"}},
           "required": ["city", "metric"], "additionalProperties": False}
TIME = {"type": "object", "properties": {"zone": {"type": "string"}}, "required": ["zone"],
        "additionalProperties": False}
TOOLS = [ToolSpec("get_weather", "Weather", WEATHER), ToolSpec("get_time", "Time", TIME)]
W = ("get_weather", {"city": "Paris", "metric": True})
T = ("get_time", {"zone": "UTC"})
V32 = ("<｜DSML｜function_calls>", '<｜DSML｜invoke name=', '<｜DSML｜parameter name=', "</｜DSML｜parameter>",
       "</｜DSML｜invoke>", "</｜DSML｜function_calls>")
DS = "<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>", "<｜tool▁sep｜>", "<｜tool▁call▁end｜>", "<｜tool▁calls▁end｜>"

# family -> (single call, parallel calls, text around a call, malformed call); each (output, content, calls)
GOLDEN = {
    "hermes": [
        ('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "metric": true}}\n</tool_call>', "", [W]),
        ('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "metric": true}}\n</tool_call>\n'
         '<tool_call>\n{"name": "get_time", "arguments": {"zone": "UTC"}}\n</tool_call>', "\n", [W, T]),
        ('Let me check.\n<tool_call>\n{"name": "get_time", "arguments": {"zone": "UTC"}}\n</tool_call>\nDone.',
         "Let me check.\n\nDone.", [T]),
        ('<tool_call>\n{"name": "get_time", "arguments": {"zone": </tool_call> tail',
         '<tool_call>\n{"name": "get_time", "arguments": {"zone": </tool_call> tail', []),
    ],
    "qwen3_coder": [
        ("<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=metric>\ntrue\n"
         "</parameter>\n</function>\n</tool_call>", "", [W]),
        ("<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=metric>\ntrue\n"
         "</parameter>\n</function>\n</tool_call>\n<tool_call>\n<function=get_time>\n<parameter=zone>\nUTC\n"
         "</parameter>\n</function>\n</tool_call>", "\n", [W, T]),
        ("I will look.\n\n<tool_call>\n<function=get_time>\n<parameter=zone>\nUTC\n</parameter>\n</function>\n"
         "</tool_call>", "I will look.\n\n", [T]),
        ("<tool_call>\n<function=get_time>\nzone=UTC\n</tool_call>", "<tool_call>\n<function=get_time>\nzone=UTC\n"
         "</tool_call>", []),
    ],
    "llama3": [
        ('{"name": "get_weather", "parameters": {"city": "Paris", "metric": true}}', "", [W]),
        ('<|python_tag|>{"name": "get_weather", "parameters": {"city": "Paris", "metric": true}}; '
         '{"name": "get_time", "parameters": {"zone": "UTC"}}', "", [W, T]),
        ('Sure. {"name": "get_time", "parameters": {"zone": "UTC"}}', "Sure. ", [T]),
        ('{"name": "get_time", "parameters": {"zone": "UTC"', '{"name": "get_time", "parameters": {"zone": "UTC"', []),
    ],
    "pythonic": [
        ('[get_weather(city="Paris", metric=True)]', "", [W]),
        ('[get_weather(city="Paris", metric=True), get_time(zone="UTC")]', "", [W, T]),
        ('Checking: [get_time(zone="UTC")] now', "Checking:  now", [T]),
        ("[get_time(zone=UTC, ]", "[get_time(zone=UTC, ]", []),
    ],
    "mistral": [
        ('[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris", "metric": true}}]', "", [W]),
        ('[TOOL_CALLS]get_weather[ARGS]{"city": "Paris", "metric": true}[TOOL_CALLS]get_time[ARGS]{"zone": "UTC"}',
         "", [W, T]),
        ('Okay. [TOOL_CALLS][{"name": "get_time", "arguments": {"zone": "UTC"}, "id": "abcDEF123"}]', "Okay. ", [T]),
        ('[TOOL_CALLS][{"name": "get_time", "arguments": ', '[TOOL_CALLS][{"name": "get_time", "arguments": ', []),
    ],
    "deepseekv3": [
        (f'{DS[0]}{DS[1]}function{DS[2]}get_weather\n```json\n{{"city": "Paris", "metric": true}}\n```{DS[3]}{DS[4]}',
         "", [W]),
        (f'{DS[0]}{DS[1]}function{DS[2]}get_weather\n```json\n{{"city": "Paris", "metric": true}}\n```{DS[3]}\n'
         f'{DS[1]}function{DS[2]}get_time\n```json\n{{"zone": "UTC"}}\n```{DS[3]}{DS[4]}', "", [W, T]),
        (f'Hmm.{DS[0]}{DS[1]}function{DS[2]}get_time\n```json\n{{"zone": "UTC"}}\n```{DS[3]}{DS[4]} ok', "Hmm. ok", [T]),
        (f'{DS[0]}{DS[1]}function{DS[2]}get_time\n```json\n{{"zone": \n```{DS[3]}{DS[4]}',
         f'{DS[0]}{DS[1]}function{DS[2]}get_time\n```json\n{{"zone": \n```{DS[3]}{DS[4]}', []),
    ],
    "deepseekv31": [
        (f'{DS[0]}{DS[1]}get_weather{DS[2]}{{"city": "Paris", "metric": true}}{DS[3]}{DS[4]}', "", [W]),
        (f'{DS[0]}{DS[1]}get_weather{DS[2]}{{"city": "Paris", "metric": true}}{DS[3]}{DS[1]}get_time{DS[2]}'
         f'{{"zone": "UTC"}}{DS[3]}{DS[4]}', "", [W, T]),
        (f'Looking.{DS[0]}{DS[1]}get_time{DS[2]}{{"zone": "UTC"}}{DS[3]}{DS[4]}', "Looking.", [T]),
        (f'{DS[0]}{DS[1]}get_time{DS[2]}{{"zone"}}{DS[3]}{DS[4]}', f'{DS[0]}{DS[1]}get_time{DS[2]}{{"zone"}}{DS[3]}{DS[4]}', []),
    ],
    "deepseekv32": [
        (f'{V32[0]}\n{V32[1]}"get_weather">\n{V32[2]}"city" string="true">Paris{V32[3]}\n{V32[2]}"metric" '
         f'string="false">true{V32[3]}\n{V32[4]}\n{V32[5]}', "", [W]),
        (f'{V32[0]}\n{V32[1]}"get_weather">\n{V32[2]}"city" string="true">Paris{V32[3]}\n{V32[2]}"metric" '
         f'string="false">true{V32[3]}\n{V32[4]}\n{V32[1]}"get_time">\n{V32[2]}"zone" string="true">UTC{V32[3]}\n'
         f'{V32[4]}\n{V32[5]}', "", [W, T]),
        (f'Checking.\n\n{V32[0]}\n{V32[1]}"get_time">\n{V32[2]}"zone" string="true">UTC{V32[3]}\n{V32[4]}\n'
         f'{V32[5]}', "Checking.\n\n", [T]),
        (f'{V32[0]}\n{V32[1]}"get_time">\n{V32[2]}"zone" string="false">UTC{V32[3]}\n{V32[4]}\n{V32[5]}',
         f'{V32[0]}\n{V32[1]}"get_time">\n{V32[2]}"zone" string="false">UTC{V32[3]}\n{V32[4]}\n{V32[5]}', []),
    ],
    "glm45": [
        ("<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n<arg_key>metric</arg_key>\n"
         "<arg_value>true</arg_value>\n</tool_call>", "", [W]),
        ("<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n<arg_key>metric</arg_key>\n"
         "<arg_value>true</arg_value>\n</tool_call>\n<tool_call>get_time\n<arg_key>zone</arg_key>\n"
         "<arg_value>UTC</arg_value>\n</tool_call>", "\n", [W, T]),
        ("Sure.\n<tool_call>get_time\n<arg_key>zone</arg_key>\n<arg_value>UTC</arg_value>\n</tool_call>",
         "Sure.\n", [T]),
        ("<tool_call>get time\nzone</tool_call>", "<tool_call>get time\nzone</tool_call>", []),
    ],
    "kimi_k2": [
        ('<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>'
         '{"city": "Paris", "metric": true}<|tool_call_end|><|tool_calls_section_end|>', "", [W]),
        ('<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>'
         '{"city": "Paris", "metric": true}<|tool_call_end|><|tool_call_begin|>functions.get_time:1'
         '<|tool_call_argument_begin|>{"zone": "UTC"}<|tool_call_end|><|tool_calls_section_end|>', "", [W, T]),
        ('One moment.<|tool_calls_section_begin|><|tool_call_begin|>functions.get_time:0<|tool_call_argument_begin|>'
         '{"zone": "UTC"}<|tool_call_end|><|tool_calls_section_end|>', "One moment.", [T]),
        ("<|tool_calls_section_begin|>oops<|tool_calls_section_end|>",
         "<|tool_calls_section_begin|>oops<|tool_calls_section_end|>", []),
    ],
    "granite": [
        ('<|tool_call|>[{"name": "get_weather", "arguments": {"city": "Paris", "metric": true}}]', "", [W]),
        ('<|tool_call|>[{"name": "get_weather", "arguments": {"city": "Paris", "metric": true}}, '
         '{"name": "get_time", "arguments": {"zone": "UTC"}}]', "", [W, T]),
        ('Let me see. <|tool_call|>[{"name": "get_time", "arguments": {"zone": "UTC"}}]', "Let me see. ", [T]),
        ('<|tool_call|>[{"name": "get_time"}]', '<|tool_call|>[{"name": "get_time"}]', []),
    ],
}
CASES = [(fam, k, *case) for fam, cases in GOLDEN.items() for k, case in enumerate(cases)]


def _calls(result) -> list[tuple[str, dict]]:
    return [(c.name, json.loads(c.arguments)) for c in result.calls]


@pytest.mark.parametrize(("family", "k", "text", "content", "calls"), CASES)
def test_golden_parse_and_every_chunking_agree(family, k, text, content, calls):
    fmt = get_format(family)
    full = fmt.parse(text, TOOLS)
    assert full.content == content and _calls(full) == calls
    for step in (1, 2, 3, 5, 11, len(text)):
        parser = fmt.stream(TOOLS)
        events = [e for i in range(0, len(text), step) for e in parser.feed(text[i:i + step])] + parser.finish()
        streamed = accumulate(events)
        assert streamed.content == content and _calls(streamed) == calls, step
        starts = [e for e in events if e.kind == "call_start"]
        assert [e.index for e in starts] == list(range(len(calls))) and all(e.id and e.name for e in starts)


def test_call_ids_follow_the_family():
    mistral = get_format("mistral").parse(GOLDEN["mistral"][0][0], TOOLS).calls[0]
    assert len(mistral.id) == 9 and mistral.id.isalnum()
    assert get_format("mistral").new_call_id("f", 0).isalnum()
    kimi = get_format("kimi_k2").parse(GOLDEN["kimi_k2"][1][0], TOOLS).calls
    assert [c.id for c in kimi] == ["functions.get_weather:0", "functions.get_time:1"]


def test_parser_names_and_the_server_flag():
    assert tuple(names()) == TOOL_CALL_PARSERS
    assert ServerArgs(tool_call_parser="qwen3_coder").tool_call_parser == "qwen3_coder"
    with pytest.raises(ValueError, match="tool_call_parser must be one of .*hermes"):
        ServerArgs(tool_call_parser="nope")
    with pytest.raises(ValueError, match="tool_call_parser"):
        get_format("nope")


DETECT = {"Qwen-Qwen2.5-7B-Instruct": "hermes", "Qwen-Qwen3-0.6B": "hermes",
          "NousResearch-Hermes-3-Llama-3.1-8B-tool_use": "hermes", "Qwen3-Coder": "qwen3_coder",
          "meta-llama-Llama-3.1-8B-Instruct": "llama3", "meta-llama-Llama-3.3-70B-Instruct": "llama3",
          "mistralai-Mistral-Nemo-Instruct-2407": "mistral", "Mistral-Small-3.2-24B-Instruct-2506": "mistral",
          "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B": "deepseekv3", "deepseek-ai-DeepSeek-V3.1": "deepseekv31",
          "GLM-4.6": "glm45", "moonshotai-Kimi-K2": "kimi_k2", "ibm-granite-granite-3.3-2B-Instruct": "granite",
          "ibm-granite-granite-4.0": "hermes", "ibm-granite-granite-4.1": "hermes",  # Granite 4: <tool_call> JSON
          "deepseek-ai-DeepSeek-V3.2": "deepseekv32", "openai-gpt-oss-120b": "gpt_oss"}


@pytest.mark.parametrize(("template", "family"), sorted(DETECT.items()))
def test_detection_from_real_templates(template, family):
    assets = fetch_or_reason()
    if isinstance(assets, str):
        pytest.skip(assets)
    assert detect_name((assets.templates_dir / f"{template}.jinja").read_text()) == family


def test_our_checkpoint_template_is_hermes():
    from radixlm.runtime.checkpoints.synthetic import default_model_path
    from radixlm.runtime.tokenizer.tokenizer import Tokenizer

    assert detect_name(Tokenizer(default_model_path()).chat_template) == "hermes"
    assert detect_name(None) == "hermes"


def test_layouts_that_cannot_express_a_schema_name_the_tool():
    nested = [ToolSpec("f", None, {"type": "object", "properties": {"a": {"type": "array"}}, "required": ["a"]})]
    for family in ("pythonic", "qwen3_coder", "glm45"):
        with pytest.raises(ValueError, match=r"tools\[0\]\.function\.parameters"):
            FORMATS[family].body_constraint(nested, None)


LIVE = ("hermes", "qwen3_coder", "llama3", "pythonic", "mistral", "deepseekv31", "glm45", "kimi_k2", "granite",
        "deepseekv3", "deepseekv32")
MAX_TOKENS = {"deepseekv32": 240}  # DSML's fullwidth markers take many byte-level tokens of the tiny vocab
ZONE = {"type": "object", "properties": {"zone": {"enum": ["UTC", "CET"]}}, "required": ["zone"],
        "additionalProperties": False}  # an enum: a free string from the tiny model may run past max_tokens
SCHEMAS = {"get_weather": WEATHER, "get_time": ZONE}
ASK = [{"role": "user", "content": "Weather in Paris?"}]
API_TOOLS = [ToolSpec("get_weather", "Weather", WEATHER).to_template(), ToolSpec("get_time", "Time", ZONE).to_template()]


@pytest.fixture(scope="module")
def engine():
    from radixlm.runtime.engine.engine import Engine

    eng = Engine(max_total_tokens=8192, random_seed=0)
    yield eng
    eng.shutdown()


@contextmanager
def family_client(engine, family: str):
    """An OpenAI client of a live server on ``engine`` that parses calls in ``family``'s syntax."""
    from radixlm.runtime.server.app import BackgroundServer
    from radixlm.runtime.server.state import ServerConfig

    engine.server_args.tool_call_parser = family
    srv = BackgroundServer(engine, ServerConfig(port=0)).start()
    try:
        yield openai.OpenAI(base_url=srv.url + "/v1", api_key="x", max_retries=0, timeout=60)
    finally:
        srv.stop()
        engine.server_args.tool_call_parser = None


@pytest.mark.parametrize("family", LIVE)
def test_forced_calls_parse_and_validate_in_each_family(engine, family):
    with family_client(engine, family) as client:
        for seed, choice in enumerate(["required", {"type": "function", "function": {"name": "get_time"}}] * 2):
            out = client.chat.completions.create(model="default", messages=ASK, tools=API_TOOLS, tool_choice=choice,
                                                 max_tokens=MAX_TOKENS.get(family, 80), temperature=1.0, seed=seed,
                                                 parallel_tool_calls=False)
            msg = out.choices[0].message
            assert out.choices[0].finish_reason == "tool_calls" and len(msg.tool_calls) == 1, msg
            call = msg.tool_calls[0]
            jsonschema.validate(json.loads(call.function.arguments), SCHEMAS[call.function.name])
            if family == "mistral":
                assert len(call.id) == 9 and call.id.isalnum()


@pytest.mark.parametrize("family", ["llama3", "mistral", "deepseekv31", "kimi_k2", "granite", "deepseekv3", "gpt_oss"])
def test_json_argument_calls_are_grammars_of_any_depth_and_order(tiny_llama, family):
    """A JSON-argument body is a grammar (not one regex): a generic value nests past any regex
    cut (depth 8 here), members come in any order, undeclared arguments are refused, and the
    wrapper is spelled exactly."""
    from radixlm.constrained import TokenizerVocab, compile_grammar
    from radixlm.runtime.tokenizer.tokenizer import Tokenizer

    schema = {"type": "object", "properties": {"q": {"type": "string"}, "opts": {"type": "object"}},
              "required": ["q"]}
    constraint = FORMATS[family].body_constraint([ToolSpec("find", None, schema)], None)
    assert set(constraint) == {"ebnf"}
    grammar = compile_grammar(TokenizerVocab.from_tokenizer(Tokenizer(tiny_llama)), "ebnf", constraint["ebnf"])
    deep: object = 1
    for _ in range(8):
        deep = {"k": [deep]}
    good = [{"q": "a"}, {"opts": deep, "q": "b"}, {"q": "c", "opts": {"x": None}}]
    bad = [{"opts": {}}, {"q": "a", "extra": 1}, {"q": 1}]
    body = _sample_body(family)
    for args in good:
        assert grammar.matches(body.replace("ARGS", json.dumps(args, separators=(",", ":")))), (family, args)
    for args in bad:
        assert not grammar.matches(body.replace("ARGS", json.dumps(args, separators=(",", ":")))), (family, args)


def _sample_body(family: str) -> str:
    """One call to ``find`` in ``family``'s body layout, with ``ARGS`` where the arguments go."""
    from radixlm.runtime.chat_formats.tool_formats import grammar as g

    seen: list[str] = []

    def capture(tools, name, body):
        seen.append(body(0, tools[0]))
        return {"regex": "x"}

    real = g.per_tool
    module = sys.modules[type(FORMATS[family]).__module__]
    module.per_tool = capture
    try:
        FORMATS[family].body_constraint([ToolSpec("find", None, {"type": "object"})], None)
    finally:
        module.per_tool = real
    return _unescape(seen[0].replace(g._ARGS, "ARGS"))


def _unescape(regex: str) -> str:
    """The literal text of a wrapper regex made of escaped literals (``kimi_k2``'s ``[0-9]`` -> 0)."""
    return re.sub(r"\\(x[0-9a-fA-F]{2}|.)", lambda m: chr(int(m[1][1:], 16)) if len(m[1]) == 3 else m[1],
                  regex.replace("[0-9]", "0"))


def test_tool_call_arguments_keep_the_lexeme_algebra(tiny_llama):
    """A parameter that needs the lexeme algebra (a `not` pattern) compiles inside a call body."""
    from radixlm.constrained import TokenizerVocab, compile_grammar
    from radixlm.runtime.tokenizer.tokenizer import Tokenizer

    tool = ToolSpec("f", None, {"type": "object", "properties": {"s": {"type": "string", "not": {"pattern": "a"}}},
                                "required": ["s"]})
    constraint = FORMATS["llama3"].body_constraint([tool], None)
    assert "LEX" in constraint["ebnf"]
    grammar = compile_grammar(TokenizerVocab.from_tokenizer(Tokenizer(tiny_llama)), "ebnf", constraint["ebnf"])
    assert grammar.matches('"f", "parameters": {"s":"xyz"}}')
    assert not grammar.matches('"f", "parameters": {"s":"xaz"}}')
