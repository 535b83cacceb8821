"""gpt-oss (harmony): a call is a message on the commentary channel addressed to the function.

The model writes ``<|start|>assistant<|channel|>commentary to=functions.NAME <|constrain|>json<|message|>{...}<|call|>``
(after the prompt's ``<|start|>assistant``, the first message has no ``<|start|>``); the chat
template renders earlier calls as ``<|start|>assistant to=functions.NAME<|channel|>commentary json<|message|>...``,
which parses too. The markers are special tokens of gpt-oss's vocabulary (kept by the decoder:
the server sets ``skip_special_tokens: false`` for gpt-oss).
"""

from __future__ import annotations

import re

from radixlm.runtime.chat_formats.tool_formats.base import (
    CallLayout,
    ParsedCall,
    ToolFormat,
    dump_args,
    json_object,
)
from radixlm.runtime.chat_formats.tools import ToolSpec

OPEN = "<|channel|>commentary to=functions."  # what the model writes
TEMPLATE_OPEN = " to=functions."  # the template's spelling: the recipient in the role header
CALL = "<|call|>"
_BODY = re.compile(r"([A-Za-z0-9_.-]+?)\s*(?:<\|channel\|>\s*commentary)?\s*(?:<\|constrain\|>)?\s*(?:json)?\s*"
                   r"<\|message\|>(.*)" + re.escape(CALL) + r"$", re.S)


class GptOssFormat(ToolFormat):
    """gpt-oss harmony calls, one message per call.

    The layout is what a forced call writes; the parser also reads the template's spelling (the
    recipient in the role header, the channel and ``<|constrain|>`` optional), so it keeps its own
    reading (:meth:`parse_block`)."""

    name = "gpt_oss"
    syntax = ("gpt-oss (harmony): a call is a message on the commentary channel addressed to the "
              "function.")
    aliases = ("gpt-oss", "openai")
    layout = CallLayout(OPEN, CALL, "{name} <|constrain|>json<|message|>{args}", also_open=(TEMPLATE_OPEN,),
                        parallel=False)
    inner_markers = ("<|channel|>", "<|constrain|>", "<|message|>", "<|start|>", "<|end|>", "<|return|>")

    def parse_block(self, block: str, tools: list[ToolSpec]) -> tuple[list[ParsedCall], int] | None:
        opener = OPEN if block.startswith(OPEN) else TEMPLATE_OPEN
        m = _BODY.match(block[len(opener):])
        args = json_object(m.group(2)) if m else None
        if m is None or args is None:
            return None
        return [ParsedCall(m.group(1), dump_args(args))], len(block)
