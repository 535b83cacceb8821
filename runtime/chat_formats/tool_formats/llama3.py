"""Llama 3.x JSON calls: ``{"name": "f", "parameters": {...}}``, optionally after ``<|python_tag|>``.

Several calls are separated by ``;``. The Llama 3.1/3.3 templates render an assistant call as
``{"name": "f", "parameters": {...}}`` and ask the model for that shape; ``arguments`` is
accepted too, as the family's parsers do.
"""

from __future__ import annotations

import json
import re
from typing import Any

from radixlm.runtime.chat_formats.tool_formats.base import (
    ParsedCall,
    ToolFormat,
    decode_at,
    json_head,
    named_call,
)
from radixlm.runtime.chat_formats.tool_formats.grammar import json_args, lit, per_tool
from radixlm.runtime.chat_formats.tools import ToolSpec

PYTHON_TAG = "<|python_tag|>"
CALL_OPEN = '{"name": '


class Llama3Format(ToolFormat):
    """Bare JSON call objects (the output starts one with ``{"name": ``)."""

    name = "llama3"
    syntax = ("Llama 3.x JSON calls: ``{\"name\": \"f\", \"parameters\": {...}}``, optionally after "
              "``<|python_tag|>``.")
    aliases = ("llama", "llama31", "llama33", "llama3_json", "llama4_json")
    openers = (PYTHON_TAG, CALL_OPEN)
    open_marker = CALL_OPEN
    forced_prefix = CALL_OPEN
    call_head = json_head(f"(?:{re.escape(PYTHON_TAG)})?", "parameters|arguments")
    bare_json_calls = True  # Qwen2.5(-Coder) / Llama 3.x write bare call objects under auto
    call_separator = "; " + CALL_OPEN
    next_call_head = json_head(r";\s*", "parameters|arguments")

    @property
    def auto_openers(self) -> tuple[str, ...]:
        return (CALL_OPEN, PYTHON_TAG)  # <|python_tag|> is a special token: it never spells CALL_OPEN

    def parse_block(self, block: str, tools: list[ToolSpec]) -> tuple[list[ParsedCall], int] | None:
        pos = len(PYTHON_TAG) if block.startswith(PYTHON_TAG) else 0
        calls: list[ParsedCall] = []
        while True:
            got = decode_at(block, pos)
            call = named_call(got[0], "parameters", "arguments") if got else None
            if call is None:
                break
            calls.append(call)
            pos = got[1]
            rest = block[pos:].lstrip()
            if not rest.startswith(";"):
                break
            pos = len(block) - len(rest) + 1
        if not calls:
            return None
        end = len(block) - len(block[pos:].lstrip()) if not block[pos:].strip() else pos
        return calls, end

    def body_constraint(self, tools: list[ToolSpec], name: str | None, max_calls: int = 1) -> dict[str, Any]:
        return per_tool(tools, name, lambda i, t: lit(json.dumps(t.name) + ', "parameters": ')
                        + json_args(i, t) + lit("}"), self.call_separator, max_calls)
