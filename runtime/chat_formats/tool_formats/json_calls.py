"""Reading JSON calls that run to the end of the output: lists of call objects, or objects in a row."""

from __future__ import annotations

import json
from typing import Any

from radixlm.runtime.chat_formats.tool_formats.base import ParsedCall, named_call

_DECODER = json.JSONDecoder()


def decode_at(text: str, pos: int) -> tuple[Any, int] | None:
    """The JSON value starting at ``pos`` (after whitespace) and where it ends, or None."""
    while pos < len(text) and text[pos].isspace():
        pos += 1
    try:
        return _DECODER.raw_decode(text, pos)
    except (json.JSONDecodeError, ValueError):
        return None


def call_list(text: str, pos: int, args_key: str = "arguments",
              alt_key: str | None = None) -> tuple[list[ParsedCall], int] | None:
    """A JSON list of call objects at ``pos``: the calls and the end offset, or None."""
    got = decode_at(text, pos)
    if got is None or not isinstance(got[0], list) or not got[0]:
        return None
    calls = [named_call(obj, args_key, alt_key) for obj in got[0]]
    return (calls, got[1]) if all(calls) else None  # type: ignore[return-value]
