"""Think-tag families beyond Qwen3 and DeepSeek-R1: the same parser, other tags or defaults.

``qwen3-thinking``: Qwen3-Thinking-2507, whose template opens ``<think>`` in the prompt (the output
starts inside the thinking, so it is *forced*). ``mistral``: Magistral / Ministral-Reasoning's
``[THINK]...[/THINK]``. ``gemma4``: Gemma 4's thought channel, ``<|channel>thought ... <channel|>``.
GLM-4.5+, Kimi-K2-Thinking and MiniMax-M2 write ``<think>...</think>`` themselves: they are the
``qwen3`` format under their SGLang names (see the registry).
"""

from __future__ import annotations

from radixlm.runtime.chat_formats.reasoning.think_tags import ThinkTagFormat


class Qwen3ThinkingFormat(ThinkTagFormat):
    """Qwen3-Thinking-2507: the thinking is open from the output's first token."""

    name = "qwen3-thinking"
    aliases = ("qwen3_thinking",)
    forced = True


class MistralThinkFormat(ThinkTagFormat):
    """Magistral / Ministral-Reasoning: ``[THINK]...[/THINK]`` then the answer."""

    name = "mistral"
    aliases = ("magistral",)
    start, end = "[THINK]", "[/THINK]"


class Gemma4Format(ThinkTagFormat):
    """Gemma 4: ``<|channel>thought`` opens the thinking, ``<channel|>`` ends it."""

    name = "gemma4"
    aliases = ("gemma-4",)
    start, end = "<|channel>thought", "<channel|>"
