"""Cohere Command R7B and Command A: a JSON list of calls between ``<|START_ACTION|>`` and ``<|END_ACTION|>``;
Command R / R+: the same list (without ids) in an ``Action:`` JSON code block.

``<|START_ACTION|>[\\n    {"tool_call_id": "0", "tool_name": "NAME", "parameters": {...}},\\n    ...\\n]<|END_ACTION|>``
and ``Action:\\n```json\\n[\\n    {"tool_name": "NAME", "parameters": {...}}\\n]```\\n``, as the templates render
earlier calls. Call ids are the server's (the templates renumber them).
"""

from __future__ import annotations

from radixlm.runtime.chat_formats.tool_formats.base import CallLayout, ToolFormat

SYNTAX = ("Cohere Command R7B and Command A: a JSON list of calls between ``<|START_ACTION|>`` and "
          "``<|END_ACTION|>``;\nCommand R / R+: the same list (without ids) in an ``Action:`` JSON "
          "code block.")


class CohereFormat(ToolFormat):
    """A JSON list of ``{"tool_call_id", "tool_name", "parameters"}`` objects in an action block."""

    name = "cohere"
    syntax = SYNTAX
    aliases = ("command_r7b", "command-r7b", "command_a", "command-a", "cohere2")
    layout = CallLayout("<|START_ACTION|>", "<|END_ACTION|>",
                        '{"tool_call_id": "{id}", "tool_name": {name}, "parameters": {args}}',
                        lead="[\n    ", trail="\n]", gap=",\n    ", many=True)
    inner_markers = ("<|START_THINKING|>", "<|END_THINKING|>")


class CommandRFormat(ToolFormat):
    """Command R / R+: a JSON list of ``{"tool_name", "parameters"}`` objects in an ``Action:`` block
    (its closer holds the list's ``]``)."""

    name = "command_r"
    syntax = SYNTAX
    aliases = ("command-r", "command_r_plus", "command-r-plus")
    layout = CallLayout("Action:\n```json\n", "]```", '{"tool_name": {name}, "parameters": {args}}',
                        lead="[\n    ", trail="\n", gap=",\n    ", many=True)
