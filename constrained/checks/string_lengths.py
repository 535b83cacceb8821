"""How the matcher counts a JSON string's length as its bytes arrive: in code points of the
decoded string, as ``minLength``/``maxLength`` measure it (``json_schema.counted_strings``).

A character counts at its first byte: a UTF-8 lead byte or ASCII byte, or the backslash of an
escape (``\\n`` and ``\\u0061`` are one character each; the grammar's string lexeme admits no
surrogate escapes, so a ``\\u`` escape is always one code point). ``esc`` is where a read stops
inside an escape: 0 outside one, -1 after its backslash, 1-4 the ``\\u`` hex digits still due.
The tracker (``checks.tracker``) and the vocabulary tables (``masks.string_lengths``) both read
through ``read_counted``, so the mask and ``accept_token`` count alike.
"""

from __future__ import annotations

import re

_PLAIN = re.compile(rb'[^"\\]+')
TAILS = bytes(range(0x80, 0xC0))  # UTF-8 continuation bytes: their character counted already


def read_counted(data: bytes, i: int, esc: int, count: int) -> tuple[int, int, int, bool]:
    """Read string content from ``data[i]``: ``(esc, count, i, closed)``, stopping past the
    closing quote (``closed``) or at the end of ``data``."""
    n = len(data)
    while i < n:
        if esc:
            if esc == -1:
                esc = 4 if data[i] == 0x75 else 0  # \u: four hex digits follow
            else:
                esc -= 1
            i += 1
            continue
        m = _PLAIN.match(data, i)
        if m is not None:
            run = m.group()
            count += len(run.translate(None, TAILS))
            i = m.end()
            continue
        if data[i] == 0x22:
            return 0, count, i + 1, True
        count += 1  # a backslash: one escaped character
        esc, i = -1, i + 1
    return esc, count, i, False


def chars_until_close(data: bytes, esc: int) -> tuple[int, bool]:
    """``(characters, closed)`` of a token's bytes read as string content from ``esc``: the
    characters before its closing quote, or all of them when it does not close."""
    _, count, _, closed = read_counted(data, 0, esc, 0)
    return count, closed
