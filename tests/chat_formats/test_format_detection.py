"""Detection over the whole template corpus: every template of llama.cpp's collection gets the
tool-call parser and reasoning parser its markers name (a changed detection fails here).

Templates whose family has no parser of ours get the default, hermes, and a warning naming the
markers they write (``tool_formats/unparsed.py``; ``test_family_table.py`` lists them), and no
reasoning parser unless they write a known one. Granite 4 templates ask for ``<tool_call>`` JSON
blocks, so ``hermes`` is theirs.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from radixlm.runtime.chat_formats.reasoning.registry import detect_name as detect_reasoning
from radixlm.runtime.chat_formats.tool_formats.registry import detect_name as detect_tools

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from llamacpp_assets import fetch_or_reason  # noqa: E402

# template -> (tool-call parser, reasoning parser or None)
CORPUS = {
    "Apertus-8B-Instruct": ("hermes", None),
    "Apriel-1.6-15b-Thinker-fixed": ("hermes", None),
    "Bielik-11B-v3.0-Instruct": ("hermes", "qwen3"),
    "ByteDance-Seed-OSS": ("seed_oss", None),
    "Cohere2MoE": ("cohere", None),
    "CohereForAI-c4ai-command-r-plus-tool_use": ("command_r", None),
    "CohereForAI-c4ai-command-r7b-12-2024-tool_use": ("cohere", None),
    "GLM-4.6": ("glm45", "qwen3"),
    "GLM-4.7-Flash": ("glm45", "qwen3"),
    "GigaChat3-10B-A1.8B": ("hermes", None),
    "GigaChat3.1-10B-A1.8B": ("hermes", None),
    "HuggingFaceTB-SmolLM3-3B": ("hermes", "qwen3"),
    "Kimi-K2-Instruct": ("kimi_k2", None),
    "Kimi-K2-Thinking": ("kimi_k2", "qwen3"),
    "Kimi-K3": ("hermes", None),
    "LFM2-8B-A1B": ("hermes", None),
    "LFM2.5-8B-A1B": ("hermes", "qwen3"),
    "LFM2.5-Instruct": ("hermes", None),
    "MiMo-VL": ("hermes", None),
    "MiniMax-M1": ("hermes", None),
    "MiniMax-M2": ("minimax_m2", "qwen3"),
    "MiniMax-M3": ("hermes", None),
    "Mistral-Small-3.2-24B-Instruct-2506": ("mistral", None),
    "NVIDIA-Nemotron-3-Nano-30B-A3B-BF16": ("qwen3_coder", "qwen3"),
    "NVIDIA-Nemotron-Nano-v2": ("hermes", None),
    "NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use": ("hermes", None),
    "NousResearch-Hermes-3-Llama-3.1-8B-tool_use": ("hermes", None),
    "Qwen-QwQ-32B": ("hermes", "qwen3"),
    "Qwen-Qwen2.5-7B-Instruct": ("hermes", None),
    "Qwen-Qwen3-0.6B": ("hermes", "qwen3"),
    "Qwen3-Coder": ("qwen3_coder", None),
    "Qwen3.5-4B": ("qwen3_coder", "qwen3"),
    "Reka-Edge": ("hermes", None),
    "Spark2.5": ("glm45", "qwen3"),
    "StepFun3.5-Flash": ("qwen3_coder", "qwen3"),
    "deepseek-ai-DeepSeek-R1-Distill-Llama-8B": ("deepseekv3", "deepseek-r1"),
    "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B": ("deepseekv3", "deepseek-r1"),
    "deepseek-ai-DeepSeek-V3.1": ("deepseekv31", "deepseek-r1"),
    "deepseek-ai-DeepSeek-V3.2": ("deepseekv32", "deepseek-r1"),
    "deepseek-ai-DeepSeek-V4-Flash-0731": ("hermes", "deepseek-r1"),
    "deepseek-ai-DeepSeek-V4": ("hermes", "deepseek-r1"),
    "fireworks-ai-llama-3-firefunction-v2": ("hermes", None),
    "google-gemma-2-2b-it": ("hermes", None),
    "google-gemma-4-31B-it-interleaved": ("gemma4", "gemma4"),
    "google-gemma-4-31B-it": ("gemma4", "gemma4"),
    "ibm-granite-granite-3.3-2B-Instruct": ("granite", None),
    "ibm-granite-granite-4.0": ("hermes", None),
    "ibm-granite-granite-4.1": ("hermes", None),
    "inclusionai-ling-3.0-flash": ("glm45", "qwen3"),
    "llama-cpp-deepseek-r1": ("deepseekv3", "deepseek-r1"),
    "llama-cpp-rwkv-world": ("hermes", None),
    "meetkai-functionary-medium-v3.1": ("functionary_v31", None),
    "meetkai-functionary-medium-v3.2": ("functionary_v32", None),
    "meta-llama-Llama-3.1-8B-Instruct": ("llama3", None),
    "meta-llama-Llama-3.2-3B-Instruct": ("llama3", None),
    "meta-llama-Llama-3.3-70B-Instruct": ("llama3", None),
    "microsoft-Phi-3.5-mini-instruct": ("hermes", None),
    "mistralai-Ministral-3-14B-Reasoning-2512": ("mistral", "mistral"),
    "mistralai-Mistral-Nemo-Instruct-2407": ("mistral", None),
    "moonshotai-Kimi-K2": ("kimi_k2", None),
    "muse-glimmer": ("hermes", None),
    "openai-gpt-oss-120b": ("gpt_oss", "gpt-oss"),
    "openbmb-MiniCPM5-1B": ("hermes", "qwen3"),
    "poolside-Laguna-S-2.1": ("glm45", "qwen3"),
    "poolside-Laguna-XS-2.1": ("glm45", "qwen3"),
    "poolside-Laguna-XS.2": ("glm45", "qwen3"),
    "tencent-Hy3": ("hermes", None),
    "unsloth-Apriel-1.5": ("hermes", None),
    "unsloth-mistral-Devstral-Small-2507": ("mistral", None),
    "upstage-Solar-Open-100B": ("hermes", None),
}


@pytest.fixture(scope="module")
def assets():
    got = fetch_or_reason()
    if isinstance(got, str):
        pytest.skip(got)
    return got


def test_the_table_covers_the_whole_corpus(assets):
    assert sorted(p.stem for p in assets.templates()) == sorted(CORPUS)


@pytest.mark.parametrize(("template", "want"), sorted(CORPUS.items()))
def test_every_template_gets_its_parsers(assets, template, want):
    source = (assets.templates_dir / f"{template}.jinja").read_text(encoding="utf-8")
    assert (detect_tools(source), detect_reasoning(source)) == want
