"""Tool-call formats: golden outputs per family (parse == every streamed chunking), detection from
the real chat templates, and forced calls through the live server in several families' syntax."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import jsonschema
import pytest
from radixlm.runtime.chat_formats.tool_formats.registry import FORMATS, detect_name, get_format, names
from radixlm.runtime.chat_formats.tool_formats.scanner import accumulate
from radixlm.runtime.chat_formats.tools import ToolSpec
from radixlm.runtime.server_args import TOOL_CALL_PARSERS, ServerArgs

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from llamacpp_assets import fetch_or_reason  # noqa: E402
from tool_call_cases import (  # noqa: E402
    API_TOOLS,
    ASK,
    GOLDEN,
    LIVE,
    MAX_TOKENS,
    SCHEMAS,
    TOOLS,
    family_client,
)

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
    """A parameter layout writes one parameter per declared property: a root that is not an object
    of properties, or a name the layout cannot spell, is refused (naming the tool), never guessed."""
    union = [ToolSpec("f", None, {"anyOf": [{"type": "object"}, {"type": "array"}]})]
    for family in ("pythonic", "qwen3_coder", "glm45", "deepseekv32"):
        with pytest.raises(ValueError, match=r"tools\[0\]\.function\.parameters"):
            FORMATS[family].body_constraint(union, None)
    reserved = [ToolSpec("f", None, {"type": "object", "properties": {"class": {"type": "string"}}})]
    with pytest.raises(ValueError, match=r"tools\[0\]\.function\.parameters.*'class'"):
        FORMATS["pythonic"].body_constraint(reserved, None)


@pytest.fixture(scope="module")
def engine():
    from radixlm.runtime.engine.engine import Engine

    eng = Engine(max_total_tokens=8192, random_seed=0)
    yield eng
    eng.shutdown()


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


@pytest.mark.parametrize("family", ["qwen3_coder", "glm45", "pythonic", "llama3", "gemma4", "cohere"])
def test_required_with_parallel_calls_in_each_layout(engine, family):
    """``required`` with ``parallel_tool_calls``: one or more complete, valid calls in the family's
    layout (XML and key/value blocks parsed whole, JSON arguments streamed), streamed alike."""
    with family_client(engine, family) as client:
        kwargs = {"model": "default", "messages": ASK, "tools": API_TOOLS, "tool_choice": "required",
                  "max_tokens": 600, "temperature": 1.0, "seed": 7}
        out = client.chat.completions.create(**kwargs).choices[0]
        assert out.finish_reason == "tool_calls" and 1 <= len(out.message.tool_calls) <= 8, out
        for call in out.message.tool_calls:
            jsonschema.validate(json.loads(call.function.arguments), SCHEMAS[call.function.name])
        streamed: dict[int, list[str]] = {}
        for chunk in client.chat.completions.create(**kwargs, stream=True):
            for tc in (chunk.choices[0].delta.tool_calls or []) if chunk.choices else []:
                got = streamed.setdefault(tc.index, [tc.function.name or "", ""])
                got[1] += tc.function.arguments or ""
        assert [tuple(v) for _, v in sorted(streamed.items())] == [
            (c.function.name, c.function.arguments) for c in out.message.tool_calls]


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
    """One call to ``find`` in ``family``'s declared layout (the part a forced turn generates), with
    ``ARGS`` where the arguments go."""
    layout = FORMATS[family].layout
    name = json.dumps("find") if layout.json_call else "find"
    return layout.body.replace("{name}", name).replace("{id}", "0").replace("{args}", "ARGS")


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
