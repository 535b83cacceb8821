"""Container items of ``uniqueItems`` arrays whose items are unconstrained (any JSON value): the
in-array reader (``checks.reader.array_run``, mode ``U_CON``) reads such an item whole, as raw
bytes, and compares it once it closes, as JSON Schema compares values (``value_key``). An open
container can always still become a value not written before, so none is ever dead.
"""

from __future__ import annotations

import re

_STR_SKIP = re.compile(rb'[^"\\]+')  # string bytes that change nothing
_CON_SKIP = re.compile(rb'[^"\[\]{}]+')  # bytes outside strings that change nothing


def value_key(value: object) -> tuple:
    """A hashable key equal for values JSON Schema calls equal: ``1`` is ``1.0``, ``true`` is not
    ``1``, members compare in any order."""
    if isinstance(value, bool) or value is None:
        return "l", value
    if isinstance(value, (int, float)):
        return "n", value
    if isinstance(value, str):
        return "s", value
    if isinstance(value, list):
        return "a", tuple(value_key(v) for v in value)
    return "o", frozenset((k, value_key(v)) for k, v in value.items())


def container_run(buf: bytearray, esc: int, clean: int, data: bytes, i: int) -> tuple:
    """Read ``data[i:]`` inside a container item (``buf``: its raw bytes so far, growing in
    place; ``esc`` -1 after a backslash in one of its strings; ``clean`` its depth * 2 + whether
    a string is open): ``(esc, clean, i, raw)``, ``raw`` its bytes once it closed (``i`` past
    it), else None."""
    n, depth, in_str = len(data), clean >> 1, clean & 1
    while i < n:
        m = None if esc else (_STR_SKIP if in_str else _CON_SKIP).match(data, i)
        if m is not None:
            buf += m.group()
            i = m.end()
            continue
        b = data[i]
        buf.append(b)
        i += 1
        if in_str:  # the byte after a backslash, a backslash, or the closing quote
            if esc:
                esc = 0
            elif b == 0x5C:
                esc = -1
            else:
                in_str = 0
        elif b == 0x22:
            in_str = 1
        elif b == 0x5B or b == 0x7B:
            depth += 1
        else:  # a closing bracket (nothing else stops the skip outside strings)
            depth -= 1
            if depth == 0:
                return 0, 0, i, bytes(buf)
    return esc, depth * 2 + in_str, i, None
