"""Kimi-K2: ``<|tool_calls_section_begin|><|tool_call_begin|>functions.NAME:IDX<|tool_call_argument_begin|>{json}<|tool_call_end|>...<|tool_calls_section_end|>``.

The model writes each call's id itself (``functions.NAME:IDX``); the API returns it as the id.
"""

from __future__ import annotations

from radixlm.runtime.chat_formats.tool_formats.base import CallLayout, ToolFormat


class KimiK2Format(ToolFormat):
    """Kimi-K2 calls in a section; ids come from the text."""

    name = "kimi_k2"
    syntax = ("Kimi-K2: "
              "``<|tool_calls_section_begin|><|tool_call_begin|>functions.NAME:IDX<|tool_call_argument_begin|>{json}<|tool_call_end|>...<|tool_calls_section_end|>``.")
    aliases = ("kimi",)
    layout = CallLayout("<|tool_calls_section_begin|>", "<|tool_calls_section_end|>",
                        "<|tool_call_begin|>functions.{name}:{id}<|tool_call_argument_begin|>{args}<|tool_call_end|>",
                        many=True, forced_head=True, call_end="<|tool_call_end|>", call_id="functions.{name}:{id}")
