"""DeepSeek-R1 (and its distills): ``<think>...</think>``, opened by the chat template.

The template ends the prompt with ``<think>\\n``, so the output starts inside the thinking and
usually has no start tag: the format is *forced* (everything before ``</think>`` is reasoning).
"""

from __future__ import annotations

from radixlm.runtime.chat_formats.reasoning.think_tags import ThinkTagFormat


class DeepSeekR1Format(ThinkTagFormat):
    """DeepSeek-R1's reasoning."""

    name = "deepseek-r1"
    aliases = ("deepseek_r1",)
    forced = True
