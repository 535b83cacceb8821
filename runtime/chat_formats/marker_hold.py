"""``held_prefix``: how much of a streamed text's tail to hold back because a marker may be starting.

Both streaming parsers (tool calls, reasoning) cut their output at markers such as ``<tool_call>``
or ``</think>``; a delta can end in the middle of one, so that tail waits for the next delta.
"""

from __future__ import annotations


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
