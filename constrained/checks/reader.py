"""The byte-level JSON reader's state (``ReaderState`` and its container frames) and modes, and
the in-array half of the ``uniqueItems`` reader: the scan of one unique array's bytes into
completed items (``array_run``), each item's comparison key (``item_key``: decoded strings,
numbers as numbers) and whether an open item can only become a duplicate
(``dead_open``). ``checks.tracker.UniqueTracker`` drives it; ``masks.duplicate_items`` and
``masks.duplicate_items`` use the same scan on token bytes.

Container items: Container items of ``uniqueItems`` arrays whose items are unconstrained (any JSON value): the
in-array reader (``array_run``, mode ``U_CON``) reads such an item whole, as raw
bytes, and compares it once it closes, as JSON Schema compares values (``value_key``). An open
container can always still become a value not written before, so none is ever dead.

``UniquePaths``: the checked-path table, an automaton over JSON paths that the runtime checks
follow as the text arrives, built by the JSON Schema front end (``json_schema/unique.py``).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import NamedTuple

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


# The reader's modes: outside unique arrays (G_*) and inside one (U_*), where the items are scalars
# or, for unconstrained items, containers read whole (U_CON: ``esc`` -1 after a backslash in one of
# its strings, ``clean`` its nesting depth * 2 + whether a string is open).
G_VAL, G_AFTER, G_KEY, G_INKEY, G_COLON, G_STR, G_NUM, G_LIT, G_DONE = range(9)
U_VAL, U_AFTER, U_STR, U_NUM, U_LIT, U_CON = range(10, 16)
LEAVE, ERROR = "leave", "error"  # events of the in-array reader besides a completed item
NUM_CHARS = frozenset(b"0123456789+-.eE")
WS = frozenset(b" \t\n\r\x0b\x0c")
# every byte the reader follows outside strings: whitespace, structure, numbers, literals' letters
OUTSIDE = bytes(sorted(WS | NUM_CHARS)) + b"[]{},:truefalsn"
LITERALS = {ord("t"): b"true", ord("f"): b"false", ord("n"): b"null"}
_STR_PLAIN = re.compile(rb'[^"\\\x80-\xff]+')  # string bytes that need no escape/UTF-8 tracking
STR_SKIP = re.compile(rb'[^"\\]+')
_FLOATY = re.compile(rb"[.eE]")
_EXPONENT = re.compile(rb"[eE]")
ZERO_KEY = ("n", 0)


class ReaderState(NamedTuple):
    """The reader after some accepted bytes: immutable and hashable (tuple equality: memo keys).

    ``frames``: the open containers, innermost last (``ArrayFrame``, ``ObjectFrame``,
    ``CheckedObject``, ``UniqueArray``); ``mode``: a ``G_*``/``U_*`` mode; ``vpos``: the path state
    of the next value (while a key is read, its object's; -1: nothing checked below); ``buf``: the
    open key's or item's raw bytes; ``esc``: 0, -1 after a backslash, or the ``\\u`` escape's hex
    digits still due; ``clean``: in a unique array, the length of ``buf`` that decodes on its own
    (``U_CON``: nesting depth * 2 + an open string), in a counted string its characters so far,
    else 0.
    """

    frames: tuple
    mode: int
    vpos: int
    buf: bytes
    esc: int
    clean: int


class ArrayFrame(NamedTuple):
    """An open array that is not unique: ``items``, the path state of its items."""

    kind: str  # "a"
    items: int


class ObjectFrame(NamedTuple):
    """An open object whose members are not checked: ``pos``, its path state."""

    kind: str  # "o"
    pos: int


class CheckedObject(NamedTuple):
    """An open object whose members are checked at runtime: its path state and the names of the
    keys written so far."""

    kind: str  # "o"
    pos: int
    seen: frozenset


class UniqueArray(NamedTuple):
    """An open ``uniqueItems`` array: the items so far (``item_key``) and whether its items are
    integers only."""

    kind: str  # "u"
    seen: frozenset
    zero: bool


def is_checked(frame: tuple) -> bool:
    """Whether ``frame`` is an object whose members are checked."""
    return type(frame) is CheckedObject


def holds_a_set(frame: tuple) -> bool:
    """Whether ``frame`` carries a set that grows (a checked object's keys, a unique array's
    items): the frames a state's memo key must not share blindly."""
    return type(frame) is CheckedObject or type(frame) is UniqueArray


def item_key(kind: str, raw: bytes) -> tuple:
    """The value of a completed item, comparable as JSON Schema compares (tagged by kind):
    strings decoded, numbers as Python numbers (``json.loads``' types: int unless there is a
    fraction or an exponent), literals as their text, containers (``c``) as ``value_key``."""
    try:
        if kind == "c":
            return "c", value_key(json.loads(raw.decode("utf-8")))
        if kind == "s":
            return "s", json.loads((b'"%s"' % raw).decode("utf-8"))
        if kind == "n":
            return "n", float(raw) if _FLOATY.search(raw) else int(raw)
    except ValueError:
        return "r", kind, raw
    return "l", raw


def array_run(mode: int, buf: bytearray, esc: int, clean: int, data: bytes, i: int) -> tuple:
    """Read ``data[i:]`` inside a unique array until an event: ``(mode, esc, clean, i, event)``
    with ``event`` None (data ended), ``LEAVE`` (its ``]``; ``i`` past it), ``ERROR``, or
    ``(kind, raw)`` for a completed item (``s``/``n``/``l``; the byte ending a number is not
    consumed). ``buf`` (the open item's raw bytes: a string's without the quotes) grows in place;
    ``esc``: 0, -1 after a backslash, n hex digits still due; ``clean``: the length of ``buf``
    that decodes on its own (not inside an escape, a UTF-8 character or a surrogate pair)."""
    n = len(data)
    while i < n:
        b = data[i]
        if mode == U_CON:
            esc, clean, i, raw = container_run(buf, esc, clean, data, i)
            if raw is None:
                return mode, esc, clean, i, None
            mode = U_AFTER
            return mode, 0, 0, i, ("c", raw)
        if mode == U_STR:
            if esc == 0:
                m = _STR_PLAIN.match(data, i)
                if m is not None:
                    buf += m.group()
                    i, clean = m.end(), len(buf)
                    continue
                if b == 0x22:
                    return U_AFTER, 0, 0, i + 1, ("s", bytes(buf))
            buf.append(b)
            esc, clean = _string_byte(buf, b, esc, clean)
            i += 1
        elif mode == U_NUM:
            if b not in NUM_CHARS:
                return U_AFTER, 0, 0, i, ("n", bytes(buf))
            buf.append(b)
            i += 1
        elif mode == U_LIT:
            buf.append(b)
            lit = LITERALS[buf[0]]
            if not lit.startswith(buf):
                return mode, esc, clean, i, ERROR
            i += 1
            if len(buf) == len(lit):
                return U_AFTER, 0, 0, i, ("l", bytes(buf))
        elif b in WS:
            i += 1
        elif mode == U_AFTER:
            if b == 0x2C:
                mode = U_VAL
            elif b == 0x5D:
                return mode, 0, 0, i + 1, LEAVE
            else:
                return mode, esc, clean, i, ERROR
            i += 1
        else:  # U_VAL
            del buf[:]
            if b == 0x22:
                mode, esc, clean = U_STR, 0, 0
            elif b in LITERALS:
                mode = U_LIT
                continue
            elif b == 0x2D or 0x30 <= b <= 0x39:
                mode = U_NUM
                continue
            elif b == 0x5D:
                return mode, 0, 0, i + 1, LEAVE
            elif b == 0x5B or b == 0x7B:  # a container item (the grammar allows one only
                mode, esc, clean = U_CON, 0, 0  # where the items are unconstrained)
                buf.append(b)
                clean = 2
            else:
                return mode, esc, clean, i, ERROR
            i += 1
    return mode, esc, clean, i, None


def _string_byte(buf: bytearray, b: int, esc: int, clean: int) -> tuple[int, int]:
    """``(esc, clean)`` after byte ``b`` (just appended to ``buf``) of an open string item: a
    backslash, an escape's bytes, or a byte of a multi-byte UTF-8 character."""
    if esc == 0:
        if b == 0x5C:
            return -1, clean
        return 0, len(buf) if 0x80 <= b < 0xC0 and _utf8_complete(buf) else clean
    if esc == -1:
        return (4, clean) if b == 0x75 else (0, len(buf))
    if esc == 1 and 0xD800 <= int(buf[-4:], 16) <= 0xDBFF:  # a high surrogate may pair on
        return 0, clean
    return esc - 1, len(buf) if esc == 1 else clean


def _utf8_complete(buf: bytearray) -> bool:
    """Whether ``buf`` (whose last byte is a UTF-8 continuation byte) ends on a whole character."""
    for back in range(1, 5):
        if back > len(buf):
            return False
        lead = buf[-back]
        if lead < 0x80 or lead >= 0xC0:
            need = 2 if lead < 0xE0 else 3 if lead < 0xF0 else 4
            return lead >= 0xC0 and need == back
    return False


def dead_open(mode: int, buf: bytes, seen: frozenset, zero: bool) -> bool:
    """Whether the open item ``buf`` can only be completed into a value already in ``seen``: a
    literal (fixed by its first letter), an integer ``0`` (``zero``: items are integers only),
    a number whose mantissa is zero and whose exponent has begun (``0e5`` is 0), or whose
    exponent already over- or underflows (``1e400`` is inf, and so is every longer one)."""
    if mode == U_LIT:
        return ("l", LITERALS[buf[0]]) in seen
    if mode != U_NUM:
        return False
    if zero and buf == b"0":
        return ZERO_KEY in seen
    e = _EXPONENT.search(buf)
    if e is None:
        return False
    try:
        if float(buf[:e.start()]) == 0:
            return ZERO_KEY in seen
        value = float(buf)
    except ValueError:  # no exponent digit yet: "1e", "1e-"
        return False
    return (value == 0 or math.isinf(value)) and ("n", value) in seen


@dataclass(frozen=True)
class UniquePaths:
    """An automaton over JSON paths (picklable: it crosses the compile-worker boundary).

    A state is a value position. ``unique[s]``: an array opening there is a ``uniqueItems``
    array of scalars; ``zero[s]``: its items are integers only (an item ``0`` cannot be
    extended into another value). ``items[s]``: the state of an array's items; ``keys[s]``: a
    member's raw key bytes (quotes included) -> state, else ``other[s]``. -1: no unique array
    can occur below.
    """

    start: int
    unique: tuple[bool, ...]
    zero: tuple[bool, ...]
    items: tuple[int, ...]
    keys: tuple[dict[bytes, int], ...]
    other: tuple[int, ...]
    members: tuple[int, ...] = ()  # per state: an object opening there is checked by specs[i] (-1: not)
    specs: tuple = ()  # json_schema.objects.MemberSpec of the runtime-checked objects
    # per state: a string opening there has its length counted by the matcher, (minLength,
    # maxLength or None), else None; empty when nothing is counted (``unique``)
    strings: tuple = ()
    counted: frozenset = frozenset()  # the counted lexemes the grammar no longer bounds
