"""``TextState``: a request's decoded output text and its stop-string search (no torch).

``detokenizer`` is any object with ``step(new_ids) -> str``, ``finish() -> str`` and
``fresh()`` (a new one with the same settings and no ids); None in scheduler tests, which then
have no text and no stop strings.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass
class TextState:
    """The output text so far, where a matched stop string starts, and how far it was searched."""

    detokenizer: Any = None
    text: str = ""
    stop_pos: int | None = None  # where the matched stop string starts in text
    checked_len: int = 0  # text searched for stop strings so far
    regex: Any = None  # the request's StopRegexMatcher, made at its first stop_regex check

    def append(self, token_ids: list[int]) -> None:
        if self.detokenizer is not None:
            self.text += self.detokenizer.step(token_ids)

    def flush(self) -> None:
        """Append the text held back for an unfinished character (when the request finishes)."""
        if self.detokenizer is not None:
            self.text += self.detokenizer.finish()
