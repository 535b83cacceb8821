"""The reasoning formats by name, and detection of a checkpoint's format from its chat template.

Names follow SGLang's ``--reasoning-parser`` names (vLLM's spellings are aliases). A template
with none of the known markers (our test checkpoints' included) gets no reasoning format: the
output is all content, as before.
"""

from __future__ import annotations

from radixlm.runtime.server.reasoning.base import ReasoningFormat
from radixlm.runtime.server.reasoning.deepseek_r1 import DeepSeekR1Format
from radixlm.runtime.server.reasoning.gpt_oss import GptOssFormat
from radixlm.runtime.server.reasoning.qwen3 import Qwen3Format

FORMATS: dict[str, ReasoningFormat] = {f.name: f for f in (DeepSeekR1Format(), Qwen3Format(), GptOssFormat())}
ALIASES: dict[str, str] = {a: f.name for f in FORMATS.values() for a in f.aliases}

# (format, markers that must all be in the template), most specific first
_DETECT: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("gpt-oss", ("<|channel|>", "<|start|>assistant")),
    ("deepseek-r1", ("<｜Assistant｜><think>",)),
    ("qwen3", ("<|im_start|>", "<think>")),
)


def names() -> list[str]:
    """Every accepted parser name (formats and aliases), sorted."""
    return sorted(set(FORMATS) | set(ALIASES))


def get_format(name: str) -> ReasoningFormat:
    """The format called ``name`` (or an alias); ``ValueError`` naming the valid names otherwise."""
    key = ALIASES.get(name, name)
    if key not in FORMATS:
        raise ValueError(f"reasoning_parser must be one of {', '.join(names())}; got {name!r}")
    return FORMATS[key]


def detect_name(chat_template: str | None) -> str | None:
    """The format whose markers the template writes, or None."""
    source = chat_template or ""
    for name, markers in _DETECT:
        if all(m in source for m in markers):
            return name
    return None


def resolve(parser: str | None, chat_template: str | None) -> ReasoningFormat | None:
    """``--reasoning-parser`` if set, else the format detected from the chat template (or None)."""
    if parser:
        return get_format(parser)
    name = detect_name(chat_template)
    return FORMATS[name] if name else None
