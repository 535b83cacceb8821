"""Mistral: ``[TOOL_CALLS]`` then a JSON list of calls (v3 / Nemo), or, from tokenizer v11
(Mistral Small 3.2, Devstral), ``[TOOL_CALLS]name[ARGS]{...}`` per call (``[CALL_ID]id`` optional).

Call ids are 9 alphanumeric characters: the family's templates reject any other id.
"""

from __future__ import annotations

import re

from radixlm.runtime.chat_formats.tool_formats.base import (
    CallLayout,
    ParsedCall,
    ToolFormat,
    decode_at,
    dump_args,
    mistral_call_id,
)
from radixlm.runtime.chat_formats.tools import ToolSpec

OPEN = "[TOOL_CALLS]"
_NAMED = re.compile(r"\s*([A-Za-z0-9_-]{1,64})(?:\[CALL_ID\]([A-Za-z0-9]{9}))?\[ARGS\]")


def _named_calls(block: str) -> tuple[list[ParsedCall], int] | None:
    """``[TOOL_CALLS]name[ARGS]{...}`` repeated."""
    calls, pos = [], 0
    while block.startswith(OPEN, pos):
        m = _NAMED.match(block, pos + len(OPEN))
        got = decode_at(block, m.end()) if m else None
        if got is None or not isinstance(got[0], dict):
            break
        calls.append(ParsedCall(m.group(1), dump_args(got[0]), m.group(2)))
        pos = got[1]
    return (calls, pos) if calls else None


class MistralFormat(ToolFormat):
    """``[TOOL_CALLS]`` calls, which run to the end of the answer.

    The layout is the JSON list a forced call writes; tokenizer v11's ``name[ARGS]{...}`` calls
    (one ``[TOOL_CALLS]`` each, an optional ``[CALL_ID]``) are a second layout the parser also
    reads (:meth:`parse_block`)."""

    name = "mistral"
    syntax = ("Mistral: ``[TOOL_CALLS]`` then a JSON list of calls (v3 / Nemo), or, from tokenizer "
              "v11\n(Mistral Small 3.2, Devstral), ``[TOOL_CALLS]name[ARGS]{...}`` per call "
              "(``[CALL_ID]id`` optional).")
    # the calls are one JSON list: its brackets are forced text, the calls inside it
    layout = CallLayout(OPEN, None, '{"name": {name}, "arguments": {args}}', lead="[", trail="]", gap=", ", many=True)
    inner_markers = ("[ARGS]", "[CALL_ID]")

    def parse_block(self, block: str, tools: list[ToolSpec]) -> tuple[list[ParsedCall], int] | None:
        if block[len(OPEN):].lstrip().startswith("["):
            return super().parse_block(block, tools)
        return _named_calls(block)

    def new_call_id(self, name: str, index: int) -> str:
        return mistral_call_id()
