"""Formats that write the thinking between two tags (``<think>...</think>``), and their parser.

As SGLang's and vLLM's think-tag parsers do: the start tag is optional when the format is
*forced* (DeepSeek-R1's template opens ``<think>`` in the prompt, so the output starts inside the
thinking), an unclosed thinking is all reasoning (the budget ran out), the answer is the text
after the end tag, and whitespace around the tags is not part of either (SGLang strips it).

The formats: ``qwen3`` (Qwen3, QwQ: the model writes ``<think>`` itself; GLM-4.5+, Kimi-K2-Thinking and
MiniMax-M2 are this format under their SGLang names). ``deepseek-r1``: the template opens ``<think>``.
``qwen3-thinking``: Qwen3-Thinking-2507, whose template opens ``<think>`` in the prompt (the output
starts inside the thinking, so it is *forced*). ``mistral``: Magistral / Ministral-Reasoning's
``[THINK]...[/THINK]``. ``gemma4``: Gemma 4's thought channel, ``<|channel>thought ... <channel|>``.
"""

from __future__ import annotations

from radixlm.runtime.chat_formats.format_registry import held_prefix
from radixlm.runtime.chat_formats.reasoning.base import (
    CLOSED,
    NONE,
    OPEN,
    ReasoningFormat,
    ReasoningParser,
    Split,
)

_MAYBE, _REASONING, _CONTENT = "maybe", "reasoning", "content"


class ThinkTagParser(ReasoningParser):
    """The streaming state machine: maybe (before the start tag, if any) -> reasoning -> content."""

    def __init__(self, start: str, end: str, in_reasoning: bool, thinks: bool):
        self.start, self.end = start, end
        # in_reasoning: the output starts inside the thinking; thinks: it may open one itself
        self.state = _MAYBE if thinks else _CONTENT
        self.fallback = _REASONING if in_reasoning else _CONTENT  # when no start tag comes
        self.buf = ""
        self.lead = True  # strip the whitespace that starts a section

    def feed(self, delta: str) -> Split:
        self.buf += delta
        out = Split()
        while True:
            if self.state == _MAYBE and not self._maybe():
                return out
            if self.state == _REASONING:
                if not self._reasoning(out):
                    return out
                continue
            if self.state == _CONTENT:
                out.content += self._take_content(self.buf)
                self.buf = ""
                return out

    @property
    def in_reasoning(self) -> bool:
        return self.state == _REASONING or (self.state == _MAYBE and self.fallback == _REASONING)

    def _maybe(self) -> bool:
        """Decide whether the output opens with the start tag; False while it cannot tell yet."""
        stripped = self.buf.lstrip()
        if stripped.startswith(self.start):
            self.buf, self.state, self.lead = stripped[len(self.start):], _REASONING, True
            return True
        if self.start.startswith(stripped):  # empty, or a prefix of the tag: wait for more
            return False
        self.state = self.fallback
        if self.state == _REASONING:
            self.buf = stripped
        else:
            self.lead = False  # an answer with no thinking is the output as written
        return True

    def _reasoning(self, out: Split) -> bool:
        """Emit reasoning up to the end tag; True when the tag was found (now in content)."""
        if self.lead:
            self.buf = self.buf.lstrip()
            if not self.buf:
                return False
            self.lead = False
        idx = self.buf.find(self.end)
        if idx >= 0:
            out.reasoning += self.buf[:idx].rstrip()
            self.buf, self.state, self.lead = self.buf[idx + len(self.end):], _CONTENT, True
            return True
        keep = held_prefix(self.buf, (self.end,))
        text = self.buf[:len(self.buf) - keep]
        body = text.rstrip()  # trailing whitespace waits: it is dropped if the end tag follows
        out.reasoning += body
        self.buf = text[len(body):] + self.buf[len(self.buf) - keep:]
        return False

    def _take_content(self, text: str) -> str:
        if self.lead:
            text = text.lstrip()
            if text:
                self.lead = False
        return text

    def finish(self) -> Split:
        out = Split()
        if self.state == _MAYBE:  # only whitespace, or a prefix of the start tag
            self.state = self.fallback
            if self.state == _CONTENT:
                out.content, self.buf = self.buf, ""
        if self.state == _REASONING:
            out.reasoning += self.buf.strip() if self.lead else self.buf.rstrip()
        elif self.buf:
            out.content += self._take_content(self.buf)
        self.buf = ""
        return out


class ThinkTagFormat(ReasoningFormat):
    """A think-tag family; ``forced``: the output starts inside the thinking unless the prompt
    closed it (the family's templates open it in the prompt)."""

    start = "<think>"
    end = "</think>"
    forced = False

    @property
    def gate_marker(self) -> str:  # type: ignore[override]
        return self.end

    @property
    def call_after(self) -> tuple[str, str]:  # type: ignore[override]
        return (self.end, "")

    def markers(self) -> tuple[str, ...]:
        return (self.start, self.end)

    def prompt_state(self, prompt: str) -> str:
        tail = prompt.rstrip()
        if tail.endswith(self.end):
            return CLOSED
        if tail.endswith(self.start):
            return OPEN
        return NONE

    def parser(self, state: str) -> ReasoningParser:
        if state == CLOSED:  # the template ended the thinking: the output is the answer
            return ThinkTagParser(self.start, self.end, in_reasoning=False, thinks=False)
        return ThinkTagParser(self.start, self.end, in_reasoning=state == OPEN or self.forced, thinks=True)


class Qwen3Format(ThinkTagFormat):
    """Qwen3 (and QwQ): ``<think>...</think>`` written by the model itself.

    The output is reasoning only when it opens with ``<think>`` (or the prompt opened it);
    ``chat_template_kwargs: {"enable_thinking": false}`` makes the template write an empty
    ``<think>\\n\\n</think>\\n\\n`` into the prompt, and the output is the answer."""

    name = "qwen3"
    # SGLang's names of the families that write <think>...</think> themselves
    aliases = ("qwq", "glm45", "kimi_k2", "minimax", "minimax-append-think", "step3")
    forced = False


class DeepSeekR1Format(ThinkTagFormat):
    """DeepSeek-R1 (and its distills): the template ends the prompt with ``<think>\\n``, so the
    output starts inside the thinking and usually has no start tag (*forced*)."""

    name = "deepseek-r1"
    aliases = ("deepseek_r1",)
    forced = True


class Qwen3ThinkingFormat(ThinkTagFormat):
    """Qwen3-Thinking-2507: the thinking is open from the output's first token."""

    name = "qwen3-thinking"
    aliases = ("qwen3_thinking",)
    forced = True


class MistralThinkFormat(ThinkTagFormat):
    """Magistral / Ministral-Reasoning: ``[THINK]...[/THINK]`` then the answer."""

    name = "mistral"
    aliases = ("magistral",)
    start, end = "[THINK]", "[/THINK]"


class Gemma4Format(ThinkTagFormat):
    """Gemma 4: ``<|channel>thought`` opens the thinking, ``<channel|>`` ends it."""

    name = "gemma4"
    aliases = ("gemma-4",)
    start, end = "<|channel>thought", "<channel|>"
