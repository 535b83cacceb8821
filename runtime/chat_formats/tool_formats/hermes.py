"""Hermes / Qwen2.5 / Qwen3: ``<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>``.

A forced body is one JSON object per block in the template's spelling (``{"name": "NAME",
"arguments": ARGS}`` on its own line), the arguments under the tool's schema; several blocks
follow one another in a parallel turn.
"""

from __future__ import annotations

from radixlm.runtime.chat_formats.tool_formats.base import CallLayout, ToolFormat


class HermesFormat(ToolFormat):
    """One JSON object per ``<tool_call>`` block."""

    name = "hermes"
    syntax = ("Hermes / Qwen2.5 / Qwen3: ``<tool_call>\\n{\"name\": ..., \"arguments\": "
              "{...}}\\n</tool_call>``.")
    aliases = ("qwen25", "qwen", "qwen3")
    layout = CallLayout("<tool_call>", "</tool_call>", '\n{"name": {name}, "arguments": {args}}\n', gap="\n")
    bare_json_calls = True  # Qwen2.5(-Coder) / Llama 3.x write bare call objects under auto
