"""The reasoning formats by name, and detection of a checkpoint's format from its chat template.

Names follow SGLang's ``--reasoning-parser`` names (vLLM's spellings are aliases). A template
with none of the known markers (our test checkpoints' included) gets no reasoning format: the
output is all content, as before.
"""

from __future__ import annotations

from radixlm.runtime.chat_formats.format_registry import FormatRegistry
from radixlm.runtime.chat_formats.reasoning.base import ReasoningFormat
from radixlm.runtime.chat_formats.reasoning.gpt_oss import GptOssFormat
from radixlm.runtime.chat_formats.reasoning.think_tags import (
    DeepSeekR1Format,
    Gemma4Format,
    MistralThinkFormat,
    Qwen3Format,
    Qwen3ThinkingFormat,
)

# (format, markers that must all be in the template), most specific first
REGISTRY: FormatRegistry[ReasoningFormat] = FormatRegistry(
    "reasoning_parser", (DeepSeekR1Format(), Qwen3Format(), GptOssFormat(), Qwen3ThinkingFormat(),
                         MistralThinkFormat(), Gemma4Format()),
    (("gpt-oss", ("<|channel|>", "<|start|>assistant")),
     ("gemma4", ("<|channel>thought", "<channel|>")),
     ("mistral", ("[THINK]", "[/THINK]")),
     ("qwen3", ("<arg_key>", "<think>")),  # GLM-4.5 / 4.6 / 4.7
     ("qwen3", ("<|tool_calls_section_begin|>", "<think>")),  # Kimi-K2-Thinking
     ("qwen3", ("<minimax:tool_call>", "<think>")),  # MiniMax-M2
     ("deepseek-r1", ("<｜Assistant｜><think>",)),
     ("deepseek-r1", ("｜DSML｜", "<think>")),  # V3.2: thinking opened (or closed) by the template
     ("qwen3", ("<|im_start|>", "<think>"))))
FORMATS, ALIASES = REGISTRY.formats, REGISTRY.aliases
names, get_format, detect_name, resolve = REGISTRY.names, REGISTRY.get, REGISTRY.detect_name, REGISTRY.resolve
