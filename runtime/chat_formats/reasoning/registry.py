"""The reasoning formats by name, and detection of a checkpoint's format from its chat template.

Names follow SGLang's ``--reasoning-parser`` names (vLLM's spellings are aliases). A template
with none of the known markers (our test checkpoints' included) gets no reasoning format: the
output is all content, as before.
"""

from __future__ import annotations

from radixlm.runtime.chat_formats.format_registry import FormatRegistry
from radixlm.runtime.chat_formats.reasoning.base import ReasoningFormat
from radixlm.runtime.chat_formats.reasoning.deepseek_r1 import DeepSeekR1Format
from radixlm.runtime.chat_formats.reasoning.gpt_oss import GptOssFormat
from radixlm.runtime.chat_formats.reasoning.qwen3 import Qwen3Format

# (format, markers that must all be in the template), most specific first
REGISTRY: FormatRegistry[ReasoningFormat] = FormatRegistry(
    "reasoning_parser", (DeepSeekR1Format(), Qwen3Format(), GptOssFormat()),
    (("gpt-oss", ("<|channel|>", "<|start|>assistant")),
     ("deepseek-r1", ("<｜Assistant｜><think>",)),
     ("deepseek-r1", ("｜DSML｜", "<think>")),  # V3.2: thinking opened (or closed) by the template
     ("qwen3", ("<|im_start|>", "<think>"))))
FORMATS, ALIASES = REGISTRY.formats, REGISTRY.aliases
names, get_format, detect_name, resolve = REGISTRY.names, REGISTRY.get, REGISTRY.detect_name, REGISTRY.resolve
