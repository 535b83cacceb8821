"""gpt-oss (OpenAI's harmony format): the reasoning is the ``analysis`` channel.

After the prompt's ``<|start|>assistant`` the model writes messages, each a header and a body:
``<|channel|>analysis<|message|>...<|end|>`` (reasoning), then
``<|start|>assistant<|channel|>final<|message|>...<|return|>`` (the answer). A message addressed
to a tool (``... to=functions.NAME ...``) is kept whole, markers included, as content, for the
tool-call parser. Headers and end markers are not text of either field. The markers are special
tokens of gpt-oss's vocabulary, so the server decodes them (``skip_special_tokens: false``).
"""

from __future__ import annotations

import re

from radixlm.runtime.chat_formats.format_registry import held_prefix
from radixlm.runtime.chat_formats.reasoning.base import (
    CLOSED,
    NONE,
    ReasoningFormat,
    ReasoningParser,
    Split,
)

MESSAGE = "<|message|>"
ENDS = ("<|end|>", "<|return|>", "<|call|>")
FINAL = "<|channel|>final" + MESSAGE
_CHANNEL = re.compile(r"<\|channel\|>\s*([A-Za-z_]+)")


class HarmonyParser(ReasoningParser):
    """Header -> body -> header ... ; the body's channel says where its text goes."""

    def __init__(self, in_final: bool):
        self.buf = ""
        self.header: str | None = None if in_final else ""  # None: inside a body
        self.channel = "final"
        self.raw = False  # a tool-addressed message: kept whole in content

    def feed(self, delta: str) -> Split:
        self.buf += delta
        out = Split()
        while self._step(out):
            pass
        return out

    @property
    def in_reasoning(self) -> bool:
        return self.header is None and self.channel == "analysis" and not self.raw

    def _step(self, out: Split) -> bool:
        """Advance over one header or body; False when more text is needed."""
        if self.header is not None:
            idx = self.buf.find(MESSAGE)
            if idx < 0:
                return False
            header = self.buf[:idx]
            m = _CHANNEL.search(header)
            self.channel = m.group(1) if m else "final"
            self.raw = " to=" in header or header.lstrip().startswith("to=")
            if self.raw:
                out.content += header + MESSAGE
            self.buf, self.header = self.buf[idx + len(MESSAGE):], None
            return True
        ends = [(self.buf.find(e), e) for e in ENDS if e in self.buf]
        if ends:
            idx, end = min(ends)
            self._emit(out, self.buf[:idx] + (end if self.raw else ""))
            self.buf, self.header = self.buf[idx + len(end):], ""
            return True
        keep = held_prefix(self.buf, ENDS)
        self._emit(out, self.buf[:len(self.buf) - keep])
        self.buf = self.buf[len(self.buf) - keep:]
        return False

    def _emit(self, out: Split, text: str) -> None:
        if self.channel == "analysis" and not self.raw:
            out.reasoning += text
        else:
            out.content += text

    def finish(self) -> Split:
        out = Split()
        if self.header is None:
            self._emit(out, self.buf)
        elif "<|channel|>" not in self.buf and "<|start|>" not in self.buf:
            out.content += self.buf  # plain text with no harmony header at all: the answer
        self.buf = ""
        return out


class GptOssFormat(ReasoningFormat):
    """gpt-oss's harmony channels."""

    name = "gpt-oss"
    aliases = ("gpt_oss", "openai_gptoss")
    gate_marker = FINAL  # the answer (and a response_format) starts in the final channel
    call_after = ("<|end|>", "<|start|>assistant")  # a call is a new message after the analysis

    def markers(self) -> tuple[str, ...]:
        return ("<|start|>", "<|channel|>", "<|constrain|>", MESSAGE, *ENDS)

    def prompt_state(self, prompt: str) -> str:
        return CLOSED if prompt.rstrip().endswith(FINAL) else NONE

    def parser(self, state: str) -> ReasoningParser:
        return HarmonyParser(in_final=state == CLOSED)
