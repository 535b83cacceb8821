"""The shared nouns of reasoning formats: the prompt's reasoning state, a split, the format base.

A reasoning model writes its thinking before its answer, in a family's markers. A format knows
its markers, where in the prompt a chat template may already have opened (DeepSeek-R1) or closed
(Qwen3 with ``enable_thinking: false``) the thinking, and the marker after which the answer
starts (``gate_marker``: what the engine's reasoning gate waits for before a constraint applies).

Both the non-streamed split and the streamed one run the same parser (``parse`` feeds the whole
text at once), so the streamed deltas always concatenate to the non-streamed values.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

OPEN, CLOSED, NONE = "open", "closed", "none"  # the prompt's reasoning state


@dataclass
class Split:
    """Reasoning and content text (one piece of each, or the whole output's)."""

    reasoning: str = ""
    content: str = ""

    def __iadd__(self, other: Split) -> Split:
        self.reasoning += other.reasoning
        self.content += other.content
        return self


class ReasoningParser(ABC):
    """Streaming: ``feed(delta) -> Split`` of the text it can place now, ``finish() -> Split``."""

    @abstractmethod
    def feed(self, delta: str) -> Split:
        """The reasoning / content text of ``delta`` that is certain; the rest is held back."""

    @abstractmethod
    def finish(self) -> Split:
        """What was held back, placed now that the output has ended."""

    @property
    def in_reasoning(self) -> bool:
        """Whether the text fed so far ends inside the thinking (its end marker would close it)."""
        return False


class ReasoningFormat(ABC):
    """Base class: a family's name, markers and parser."""

    name: str = ""
    aliases: tuple[str, ...] = ()
    gate_marker: str = ""  # the answer starts after this text
    # a forced tool call: the think phase stops at call_after[0], then call_after[1] precedes the call
    call_after: tuple[str, str] = ("", "")

    def markers(self) -> tuple[str, ...]:
        """Every marker text the parser must see in the output (kept when special tokens are skipped)."""
        return tuple(dict.fromkeys(m for m in (self.gate_marker, *self.call_after) if m))

    @abstractmethod
    def prompt_state(self, prompt: str) -> str:
        """``OPEN`` (the prompt ends inside the thinking), ``CLOSED`` (it ended it: no thinking
        follows) or ``NONE`` (the model opens it itself, or not)."""

    @abstractmethod
    def parser(self, state: str) -> ReasoningParser:
        """A streaming parser for an output that follows a prompt in ``state``."""

    def parse(self, text: str, state: str = NONE) -> Split:
        """The whole output split at once (the streaming parser, fed in one piece)."""
        parser = self.parser(state)
        out = parser.feed(text)
        out += parser.finish()
        return out
