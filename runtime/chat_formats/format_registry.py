"""``FormatRegistry``: output formats by name and alias, and detection from a chat template.

The tool-call formats and the reasoning formats are both looked up by the name a launch flag
gives (``--tool-call-parser``, ``--reasoning-parser``) or detected from the markers a checkpoint's
chat template writes.

``held_prefix``: how much of a streamed text's tail to hold back because a marker may be starting.

Both streaming parsers (tool calls, reasoning) cut their output at markers such as ``<tool_call>``
or ``</think>``; a delta can end in the middle of one, so that tail waits for the next delta.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Generic, TypeVar

F = TypeVar("F")


class FormatRegistry(Generic[F]):
    """``formats`` (objects with ``name`` and ``aliases``) for the flag ``field``; ``detect`` lists
    ``(name, markers that must all be in the template)``, most specific first; ``default`` is the
    name when none matches (None: no format)."""

    def __init__(self, field: str, formats: Iterable[F], detect: tuple[tuple[str, tuple[str, ...]], ...],
                 default: str | None = None) -> None:
        self.field = field
        self.formats: dict[str, F] = {f.name: f for f in formats}
        self.aliases: dict[str, str] = {a: f.name for f in self.formats.values() for a in f.aliases}
        self._detect = detect
        self.default = default

    def names(self) -> list[str]:
        """Every accepted name (formats and aliases), sorted."""
        return sorted(set(self.formats) | set(self.aliases))

    def get(self, name: str) -> F:
        """The format called ``name`` (or an alias); ``ValueError`` naming the valid names otherwise."""
        key = self.aliases.get(name, name)
        if key not in self.formats:
            raise ValueError(f"{self.field} must be one of {', '.join(self.names())}; got {name!r}")
        return self.formats[key]

    def detect_name(self, chat_template: str | None) -> str | None:
        """The format whose markers the template writes, else ``default``."""
        return self.detected(chat_template) or self.default

    def detected(self, chat_template: str | None) -> str | None:
        """The format whose markers the template writes, or None when none matches."""
        source = chat_template or ""
        for name, markers in self._detect:
            if all(m in source for m in markers):
                return name
        return None

    def resolve(self, parser: str | None, chat_template: str | None) -> F | None:
        """The flag's format if set, else the one detected from the chat template (or None)."""
        if parser:
            return self.get(parser)
        name = self.detect_name(chat_template)
        return self.formats[name] if name else None


def held_prefix(text: str, markers: tuple[str, ...]) -> int:
    """Length of the longest suffix of ``text`` that is a proper prefix of one of ``markers``
    (it may be the start of a marker the next delta completes, so it is held back)."""
    best = 0
    for marker in markers:
        for n in range(min(len(marker) - 1, len(text)), best, -1):
            if text.endswith(marker[:n]):
                best = n
                break
    return best
