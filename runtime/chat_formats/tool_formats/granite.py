"""Granite 3.x: ``<|tool_call|>`` then a JSON list of ``{"name", "arguments"}`` objects.

Granite 4 templates use the Hermes ``<tool_call>`` blocks instead (detected as ``hermes``).
"""

from __future__ import annotations

from radixlm.runtime.chat_formats.tool_formats.base import CallLayout, ToolFormat


class GraniteFormat(ToolFormat):
    """A JSON list of calls after ``<|tool_call|>``, running to the end of the answer."""

    name = "granite"
    syntax = "Granite 3.x: ``<|tool_call|>`` then a JSON list of ``{\"name\", \"arguments\"}`` objects."
    # the calls are one JSON list: its brackets are forced text, the calls inside it
    layout = CallLayout("<|tool_call|>", None, '{"name": {name}, "arguments": {args}}', lead="[", trail="]",
                        gap=", ", many=True)
