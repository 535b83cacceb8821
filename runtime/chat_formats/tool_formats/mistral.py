"""Mistral: ``[TOOL_CALLS]`` then a JSON list of calls (v3 / Nemo), or, from tokenizer v11
(Mistral Small 3.2, Devstral), ``[TOOL_CALLS]name[ARGS]{...}`` per call (``[CALL_ID]id`` optional).

Call ids are 9 alphanumeric characters: the family's templates reject any other id.
"""

from __future__ import annotations

import json
import re
from typing import Any

from radixlm.runtime.chat_formats.tool_formats.base import (
    ParsedCall,
    ToolFormat,
    call_list,
    decode_at,
    dump_args,
    json_head,
    mistral_call_id,
)
from radixlm.runtime.chat_formats.tool_formats.grammar import json_args, lit, per_tool
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
    """``[TOOL_CALLS]`` calls, which run to the end of the answer."""

    # the calls are one JSON list: its bracket is part of the forced text, the calls inside it
    openers, closer, open_marker, forced_prefix, call_suffix = (OPEN,), None, OPEN, OPEN + "[", "]"
    call_separator = ", "
    next_call_head = json_head(r",\s*")

    name = "mistral"
    syntax = ("Mistral: ``[TOOL_CALLS]`` then a JSON list of calls (v3 / Nemo), or, from tokenizer "
              "v11\n(Mistral Small 3.2, Devstral), ``[TOOL_CALLS]name[ARGS]{...}`` per call "
              "(``[CALL_ID]id`` optional).")
    inner_markers = ("[ARGS]", "[CALL_ID]")
    call_head = json_head(re.escape(OPEN) + r"\s*\[")

    def parse_block(self, block: str, tools: list[ToolSpec]) -> tuple[list[ParsedCall], int] | None:
        if block[len(OPEN):].lstrip().startswith("["):
            return call_list(block, len(OPEN))
        return _named_calls(block)

    def body_constraint(self, tools: list[ToolSpec], name: str | None, max_calls: int = 1) -> dict[str, Any]:
        return per_tool(tools, name, lambda i, t: lit('{"name": ' + json.dumps(t.name) + ', "arguments": ')
                        + json_args(i, t) + lit("}"), self.call_separator, max_calls)

    def new_call_id(self, name: str, index: int) -> str:
        return mistral_call_id()
