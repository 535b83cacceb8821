"""The families added with their real chat templates (llama-cpp-python's sdist corpus): MiniMax-M2,
Seed-OSS, Cohere Command R7B / Command A and Command R / R+, Functionary v3.1 and v3.2 and Gemma 4.

For each: the template is detected as the family; a forced call (random walks under the family's
grammar, a tool schema with bounds, an array, an enum and a ``$ref``) parses and validates, and its
streamed parse equals the whole one for every chunking; the call, sent back as the assistant's
``tool_calls`` with a tool result, renders through the real template, and our parser reads the
template's own rendering of it back to the same call (the syntax we force is the one the template
teaches).
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

import jsonschema
import pytest
from radixlm.constrained.testing.walks import random_walk
from radixlm.runtime.chat_formats.tool_formats.registry import FORMATS, detect_name
from radixlm.runtime.chat_formats.tool_formats.scanner import accumulate
from radixlm.runtime.chat_formats.tools import ToolSpec
from radixlm.runtime.tokenizer.chat_template import render_chat_template

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from llamacpp_assets import fetch_or_reason  # noqa: E402
from test_forced_call_grammars import SEARCH, k_seed  # noqa: E402

LOOKUP = {"type": "object", "properties": {"q": {"type": "string"}, "n": {"type": "integer"}},
          "required": ["q", "n"]}


def _described(schema: dict) -> dict:
    """``schema`` with a description on each property (Command R+'s template requires them)."""
    props = {k: {**v, "description": f"the {k}"} for k, v in schema["properties"].items()}
    return {**schema, "properties": props}


TOOLS = [ToolSpec("search", "Search the index", _described(SEARCH)), ToolSpec("lookup", "Look a word up", _described(LOOKUP))]
SCHEMAS = {t.name: t.parameters for t in TOOLS}
# family -> the corpus templates that are its own
FAMILIES = {"minimax_m2": ["MiniMax-M2"], "seed_oss": ["ByteDance-Seed-OSS"],
            "cohere": ["CohereForAI-c4ai-command-r7b-12-2024-tool_use", "Cohere2MoE"],
            "command_r": ["CohereForAI-c4ai-command-r-plus-tool_use"],
            "functionary_v31": ["meetkai-functionary-medium-v3.1"],
            "functionary_v32": ["meetkai-functionary-medium-v3.2"],
            "gemma4": ["google-gemma-4-31B-it", "google-gemma-4-31B-it-interleaved"]}
CASES = [(family, template) for family, templates in FAMILIES.items() for template in templates]
SPECIALS = {"bos_token": "<s>", "eos_token": "</s>"}


@pytest.fixture(scope="module")
def assets():
    got = fetch_or_reason()
    if isinstance(got, str):
        pytest.skip(got)
    return got


@pytest.fixture(scope="module")
def vocab(tiny_llama):
    from radixlm.constrained import TokenizerVocab
    from radixlm.runtime.tokenizer.tokenizer import Tokenizer

    tok = Tokenizer(tiny_llama)
    return tok, TokenizerVocab.from_tokenizer(tok)


def _source(assets, template: str) -> str:
    return (assets.templates_dir / f"{template}.jinja").read_text(encoding="utf-8")


def _forced_texts(vocab, family: str, name: str | None, max_calls: int, walks: int = 4) -> list[str]:
    from radixlm.constrained import compile_grammar

    fmt = FORMATS[family]
    (kind, spec), = fmt.body_constraint(TOOLS, name, max_calls).items()
    grammar = compile_grammar(vocab[1], kind, spec)
    rng, out = random.Random(k_seed(family)), []
    for _ in range(walks):
        got = random_walk(grammar, rng, max_tokens=120)
        assert got is not None
        out.append(fmt.forced_prefix + vocab[0].decode(got[0]) + fmt.call_suffix)
    return out


def _calls(result) -> list[tuple[str, dict]]:
    return [(c.name, json.loads(c.arguments)) for c in result.calls]


@pytest.mark.parametrize(("family", "template"), CASES)
def test_the_template_is_detected_as_its_family(assets, family, template):
    assert detect_name(_source(assets, template)) == family


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_a_forced_call_parses_validates_and_streams_the_same(vocab, family):
    fmt = FORMATS[family]
    for text in _forced_texts(vocab, family, None, 3):
        whole = fmt.parse(text, TOOLS)
        assert whole.content.strip() == "" and 1 <= len(whole.calls) <= 3, text
        for name, args in _calls(whole):
            jsonschema.validate(args, SCHEMAS[name])
        for step in (1, 3, 7, len(text)):
            parser = fmt.stream(TOOLS)
            events = [e for i in range(0, len(text), step) for e in parser.feed(text[i:i + step])] + parser.finish()
            streamed = accumulate(events)
            assert (streamed.content, _calls(streamed)) == (whole.content, _calls(whole)), (family, step)


@pytest.mark.parametrize(("family", "template"), CASES)
def test_the_second_turn_renders_and_the_template_writes_our_syntax(assets, family, template):
    source, fmt = _source(assets, template), FORMATS[family]
    api_tools = [t.to_template() for t in TOOLS]
    ask = [{"role": "user", "content": "Look up cats, then dogs."}]
    first = render_chat_template(source, ask, tools=api_tools, add_generation_prompt=True, **SPECIALS)
    assert "lookup" in first
    calls = [("lookup", {"q": "cats", "n": 3}), ("lookup", {"q": "dogs", "n": 1})]
    history = ask + [{"role": "assistant", "content": "", "tool_calls": [
        {"id": f"call_{k}", "type": "function", "function": {"name": name, "arguments": args}}
        for k, (name, args) in enumerate(calls)]}]
    history += [{"role": "tool", "tool_call_id": f"call_{k}", "content": f"result-{k}"}
                for k in range(len(calls))]
    second = render_chat_template(source, history, tools=api_tools, add_generation_prompt=True, **SPECIALS)
    assert second.startswith(first[:len(first) // 2]) and "result-1" in second
    parsed = _calls(fmt.parse(second, TOOLS))
    assert parsed[-len(calls):] == calls, second
