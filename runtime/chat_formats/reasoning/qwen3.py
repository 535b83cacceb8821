"""Qwen3 (and QwQ): ``<think>...</think>`` written by the model itself.

The output is reasoning only when it opens with ``<think>`` (or the prompt opened it, as
Qwen3-Thinking-2507's template does); ``chat_template_kwargs: {"enable_thinking": false}`` makes the
template write an empty ``<think>\\n\\n</think>\\n\\n`` into the prompt, and the output is the answer.
"""

from __future__ import annotations

from radixlm.runtime.chat_formats.reasoning.think_tags import ThinkTagFormat


class Qwen3Format(ThinkTagFormat):
    """Qwen3's reasoning."""

    name = "qwen3"
    # SGLang's names of the families that write <think>...</think> themselves
    aliases = ("qwq", "glm45", "kimi_k2", "minimax", "minimax-append-think", "step3")
    forced = False
