"""``radixlm serve --model-path`` on a checkpoint directory of each family that has no real-shape
checkpoint (Mistral-Nemo, DeepSeek-R1-distill, gpt-oss), with no parser flags: the tool-call and
reasoning formats are detected from the family's real chat template, and forced calls come back in
OpenAI's shape, valid against the schema.

Each directory is the tiny test checkpoint with the family's real chat template (llama.cpp's
corpus) and the family's markers as special tokens, as its real vocabulary has them (reserved
special tokens renamed; ``runtime/testing/real_shapes.py``).
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import jsonschema
import pytest
from radixlm.runtime.chat_formats.reasoning.registry import detect_name as detect_reasoning
from radixlm.runtime.chat_formats.tool_formats.registry import detect_name as detect_tools
from radixlm.runtime.chat_formats.tool_formats.registry import get_format
from radixlm.runtime.testing.real_shapes import rename_added_tokens
from radixlm.runtime.tokenizer.tokenizer import Tokenizer

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from llamacpp_assets import fetch_or_reason  # noqa: E402
from serve_process import serve  # noqa: E402
from tool_call_cases import API_TOOLS, ASK, SCHEMAS  # noqa: E402

HARMONY = ("<|start|>", "<|channel|>", "<|message|>", "<|end|>", "<|return|>", "<|call|>", "<|constrain|>")
# template -> (tool-call parser, reasoning parser, extra special tokens, the token that ends the thinking)
FAMILIES = {
    "mistralai-Mistral-Nemo-Instruct-2407": ("mistral", None, ("[INST]", "[/INST]", "[AVAILABLE_TOOLS]",
                                                                "[/AVAILABLE_TOOLS]", "[TOOL_RESULTS]"), None),
    "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B": ("deepseekv3", "deepseek-r1", ("<｜User｜>", "<｜Assistant｜>",
                                                                              "<think>", "</think>"), "</think>"),
    "openai-gpt-oss-120b": ("gpt_oss", "gpt-oss", HARMONY, "<|end|>"),
}


def _checkpoint(out: Path, template: str, markers: tuple[str, ...], templates_dir: Path) -> Path:
    from radixlm.runtime.checkpoints.synthetic import default_model_path

    shutil.copytree(default_model_path(), out)
    spec = json.loads((out / "tokenizer.json").read_text(encoding="utf-8"))
    config = json.loads((out / "tokenizer_config.json").read_text(encoding="utf-8"))
    reserved = [t["id"] for t in spec["added_tokens"] if t["content"].startswith("<|reserved_special_token_")]
    rename_added_tokens(spec, config, {tid: (m, True) for tid, m in zip(reserved, markers)})
    config.pop("chat_template", None)
    (out / "tokenizer.json").write_text(json.dumps(spec, ensure_ascii=False), encoding="utf-8")
    (out / "tokenizer_config.json").write_text(json.dumps(config, ensure_ascii=False), encoding="utf-8")
    shutil.copyfile(templates_dir / f"{template}.jinja", out / "chat_template.jinja")
    return out


@pytest.fixture(scope="module", params=sorted(FAMILIES))
def served(request, tmp_path_factory):
    assets = fetch_or_reason()
    if isinstance(assets, str):
        pytest.skip(assets)
    parser, reasoning, extra, _ = FAMILIES[request.param]
    markers = tuple(dict.fromkeys((*get_format(parser).markers(), *extra)))
    tmp = tmp_path_factory.mktemp("family")
    path = _checkpoint(tmp / "ckpt", request.param, markers, assets.templates_dir)
    with serve(path, tmp, "--max-total-tokens", "8192") as client:
        yield request.param, path, client


def test_the_template_names_the_family(served):
    template, path, _ = served
    tok = Tokenizer(path)
    parser, reasoning, _, _ = FAMILIES[template]
    assert (detect_tools(tok.chat_template), detect_reasoning(tok.chat_template)) == (parser, reasoning)
    assert tok.special_ids_of(get_format(parser).markers())  # its markers are special tokens here


def test_forced_calls_in_openai_shape(served):
    template, path, client = served
    parser, _, _, think_end = FAMILIES[template]
    bias = {str(Tokenizer(path).encode(think_end)[0]): 100} if think_end else {}  # end the thinking at once
    for seed, choice in enumerate(["required", {"type": "function", "function": {"name": "get_time"}}] * 2):
        out = client.chat.completions.create(model="default", messages=ASK, tools=API_TOOLS, tool_choice=choice,
                                             max_tokens=200, temperature=1.0, seed=seed, parallel_tool_calls=False,
                                             logit_bias=bias)
        choice_ = out.choices[0]
        assert choice_.finish_reason == "tool_calls" and len(choice_.message.tool_calls) == 1, choice_
        call = choice_.message.tool_calls[0]
        jsonschema.validate(json.loads(call.function.arguments), SCHEMAS[call.function.name])
        if parser == "mistral":
            assert len(call.id) == 9 and call.id.isalnum()
