"""SGLang's and vLLM's parser names are accepted: ``--tool-call-parser`` / ``--reasoning-parser``
aliases resolve to the format that reads that family's output, and the reasoning formats added
for them split real outputs."""

from __future__ import annotations

import pytest
from radixlm.runtime.chat_formats.reasoning.base import CLOSED, NONE, OPEN
from radixlm.runtime.chat_formats.reasoning.registry import get_format as reasoning_format
from radixlm.runtime.chat_formats.reasoning.registry import names as reasoning_names
from radixlm.runtime.chat_formats.tool_formats.registry import get_format, names
from radixlm.runtime.server_args import REASONING_PARSERS, TOOL_CALL_PARSERS, ServerArgs

TOOL_ALIASES = {"llama3_json": "llama3", "llama4_json": "llama3", "llama4_pythonic": "pythonic",
                "openai": "gpt_oss", "gpt-oss": "gpt_oss", "glm": "glm45", "glm47": "glm45",
                "qwen3_xml": "qwen3_coder", "minimax-m2": "minimax_m2", "seed-oss": "seed_oss",
                "seed_oss": "seed_oss", "deepseek_v32": "deepseekv32", "qwen25": "hermes", "gemma4": "gemma4",
                "command-a": "cohere", "functionary-v3.1": "functionary_v31"}
REASONING_ALIASES = {"glm45": "qwen3", "kimi_k2": "qwen3", "minimax": "qwen3", "qwen3-thinking": "qwen3-thinking",
                     "mistral": "mistral", "gemma4": "gemma4", "deepseek_r1": "deepseek-r1", "gpt_oss": "gpt-oss"}


@pytest.mark.unit
@pytest.mark.parametrize(("alias", "name"), sorted(TOOL_ALIASES.items()))
def test_tool_call_parser_aliases(alias, name):
    assert get_format(alias).name == name
    assert ServerArgs(tool_call_parser=alias).tool_call_parser == alias


@pytest.mark.unit
@pytest.mark.parametrize(("alias", "name"), sorted(REASONING_ALIASES.items()))
def test_reasoning_parser_aliases(alias, name):
    assert reasoning_format(alias).name == name
    assert ServerArgs(reasoning_parser=alias).reasoning_parser == alias


@pytest.mark.unit
def test_the_flags_list_every_name():
    assert tuple(names()) == TOOL_CALL_PARSERS and tuple(reasoning_names()) == REASONING_PARSERS
    with pytest.raises(ValueError, match="reasoning_parser must be one of .*gemma4"):
        ServerArgs(reasoning_parser="nope")


@pytest.mark.unit
@pytest.mark.parametrize(("name", "prompt", "text", "reasoning", "content"), [
    ("mistral", "[INST]hi[/INST]", "[THINK]add 2 and 2[/THINK]It is 4.", "add 2 and 2", "It is 4."),
    ("mistral", "[INST]hi[/INST]", "It is 4.", "", "It is 4."),
    ("gemma4", "<start_of_turn>model\n", "<|channel>thought\nplan<channel|>Answer", "plan", "Answer"),
    ("qwen3-thinking", "<|im_start|>assistant\n<think>\n", "plan</think>\n\nAnswer", "plan", "Answer"),
    ("qwen3-thinking", "<|im_start|>assistant\n", "plan</think>Answer", "plan", "Answer"),  # forced
    ("glm45", "<|assistant|>", "<think>plan</think>Answer", "plan", "Answer"),
    ("glm45", "<|assistant|><think></think>", "Answer", "", "Answer"),
])
def test_the_added_reasoning_formats_split_their_outputs(name, prompt, text, reasoning, content):
    fmt = reasoning_format(name)
    state = fmt.prompt_state(prompt)
    assert state in (OPEN, CLOSED, NONE)
    split = fmt.parse(text, state)
    assert (split.reasoning, split.content) == (reasoning, content)
    streamed = fmt.parser(state)
    parts = [streamed.feed(c) for c in text] + [streamed.finish()]
    assert ("".join(p.reasoning for p in parts), "".join(p.content for p in parts)) == (reasoning, content)
