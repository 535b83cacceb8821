"""Decoding a request body: UTF-8 JSON whose nesting depth and value count are measured before it is decoded.

``json.loads`` recurses once per nesting level, so a body of 10,000 ``[`` raises ``RecursionError``
(and every later walk over a deep value risks the same). :func:`nesting_depth` measures the depth
on the raw bytes first, without recursion and at C speed (bytes methods and numpy), so a body
deeper than ``max_json_depth`` is a 400 and never reaches the decoder.

A body's decoding cost (time and memory: ~50 bytes of Python object per value) follows its number
of values, not its bytes: 18 MB of ``{},`` is six million objects. :func:`value_count` bounds the
values from the same scan (one more than the commas and opening brackets outside strings), so a
body of more than ``max_json_values`` is a 400 before decoding. ``json.loads`` holds the GIL for
its whole run, so the bound, not the thread it runs in, is what keeps the event loop responsive;
the server still decodes large bodies in a small pool of its own (``ServerState.read_json``), so
several of them at once wait their turn instead of multiplying the memory.

A compressed body (``Content-Encoding: gzip`` or ``deflate``; the server turns aiohttp's automatic
decompression off) is inflated by :func:`decompress_body` in bounded steps, stopping with a 413 as
soon as the output passes the body limit: a small bomb never expands in memory.
"""

from __future__ import annotations

import json
import re
import sys
import zlib
from typing import Any

import numpy as np
from radixlm.runtime.server.http_errors import APIError

# +1 for an opening bracket, -1 for a closing one, 0 for every other byte.
_STEP = np.zeros(256, dtype=np.int8)
_STEP[[ord("["), ord("{")]] = 1
_STEP[[ord("]"), ord("}")]] = -1
_COMMA, _OPEN_ARRAY, _OPEN_OBJECT = ord(","), ord("["), ord("{")
_QUOTE = ord('"')
_CHUNK = 1 << 20  # brackets per running-sum slice: bounds the int64 scratch to 8 MiB
_INFLATE_STEP = 1 << 20  # most bytes one decompress call may produce
_WBITS = {"gzip": 16 + zlib.MAX_WBITS, "x-gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS}


def decompress_body(raw: bytes, encoding: str | None, limit: int) -> bytes:
    """``raw`` decoded from its ``Content-Encoding`` (gzip, deflate or identity), at most ``limit``
    bytes of output (413 beyond it; 415 for another encoding, 400 for a corrupt stream)."""
    name = (encoding or "identity").strip().lower()
    if name == "identity":
        return raw
    if name not in _WBITS:
        raise APIError(415, f"unsupported Content-Encoding {encoding!r} (gzip, deflate or none)",
                       code="unsupported_encoding")
    wbits = _WBITS[name]
    if name == "deflate" and raw[:1] != b"\x78":  # raw deflate, without the zlib header some clients skip
        wbits = -zlib.MAX_WBITS
    inflater = zlib.decompressobj(wbits)
    out, size, pending = [], 0, raw
    try:
        while pending and not inflater.eof:
            piece = inflater.decompress(pending, _INFLATE_STEP)
            pending = inflater.unconsumed_tail
            size += len(piece)
            if size > limit:
                raise APIError(413, f"request body too large: more than {limit} bytes once decompressed "
                               "(max_body_bytes)", code="request_too_large")
            out.append(piece)
    except zlib.error as e:
        raise APIError(400, f"request body is not valid {name} data ({e})", code="invalid_encoding") from None
    return b"".join(out)


def _structure(raw: bytes) -> np.ndarray:
    """The bytes of the JSON text ``raw`` (UTF-8) that lie outside strings."""
    # Drop escaped backslashes, then escaped quotes, so every remaining quote opens or closes a
    # string (left-to-right pairing is JSON's escape rule: a run of 2k+1 backslashes escapes the
    # next byte). In UTF-8, bytes below 0x80 only ever encode ASCII, so the byte view is exact.
    text = raw.replace(b"\\\\", b"").replace(b'\\"', b"")
    codes = np.frombuffer(text, dtype=np.uint8)
    in_string = np.bitwise_xor.accumulate((codes == _QUOTE).view(np.uint8))
    return codes[~in_string.view(bool)]


def value_count(raw: bytes) -> int:
    """An upper bound of the values ``json.loads(raw)`` makes: one more than the commas and opening
    brackets outside strings (exact for arrays of scalars; at most 2x for nested empty containers)."""
    return _value_count(_structure(raw))


def nesting_depth(raw: bytes, limit: int | None = None) -> int:
    """The deepest ``[``/``{`` nesting of the JSON text ``raw`` (UTF-8), brackets inside strings
    excluded (0 for a scalar). With ``limit``, counting stops once the depth passes it (the result
    is then some value > limit)."""
    return _depth(_structure(raw), limit)


def _value_count(codes: np.ndarray) -> int:
    return 1 + sum(int(np.count_nonzero(codes == c)) for c in (_COMMA, _OPEN_ARRAY, _OPEN_OBJECT))


def _depth(codes: np.ndarray, limit: int | None) -> int:
    brackets = codes[_STEP[codes] != 0]
    steps = _STEP[brackets]
    depth = deepest = 0
    for start in range(0, steps.size, _CHUNK):
        running = np.cumsum(steps[start:start + _CHUNK], dtype=np.int64) + depth
        deepest = max(deepest, int(running.max()))
        depth = int(running[-1])
        if limit is not None and deepest > limit:
            break
    return deepest


def check_shape(raw: bytes, max_depth: int, max_values: int | None) -> None:
    """400 when ``raw`` holds more than ``max_values`` values or nests deeper than ``max_depth``;
    one scan of its bytes, skipped when too few brackets and commas appear anywhere to matter."""
    brackets = raw.count(b"[") + raw.count(b"{")
    needs_depth = brackets > max_depth
    needs_count = max_values is not None and brackets + raw.count(b",") >= max_values
    if not (needs_depth or needs_count):
        return
    codes = _structure(raw)
    if needs_count:
        count = _value_count(codes)
        if count > max_values:
            raise APIError(400, f"request body holds about {count} JSON values, more than max_json_values "
                           f"({max_values})", code="json_too_many_values")
    if needs_depth and _depth(codes, max_depth) > max_depth:
        raise APIError(400, f"request body nests deeper than max_json_depth ({max_depth} levels of arrays "
                       "and objects)", code="json_too_deep")


def parse_json_body(raw: bytes, max_depth: int, max_values: int | None = None) -> dict[str, Any]:
    """Decode a request body that must be a UTF-8 JSON object at most ``max_depth`` deep and of at
    most ``max_values`` values (400 otherwise)."""
    try:
        text = raw.decode("utf-8-sig")  # JSON over HTTP is UTF-8 (RFC 8259); the depth scan relies on it
    except UnicodeDecodeError as e:
        raise APIError(400, f"request body is not valid UTF-8 (byte {e.start})", code="invalid_json") from None
    check_shape(raw, max_depth, max_values)
    # Python refuses to convert integers of more digits than its limit (a ValueError naming no
    # field): such bodies decode with a hook that marks those integers, then name the first one.
    big = sys.get_int_max_str_digits()
    hook = _mark_big_int if big and re.search(rb"[0-9]{%d}" % (big + 1), raw) else None
    try:
        body = json.loads(text, parse_int=hook)
    except json.JSONDecodeError as e:
        raise APIError(400, f"request body is not valid JSON: {e}", code="invalid_json") from None
    except RecursionError:  # only if max_json_depth was set near Python's recursion limit
        raise APIError(400, "request body nests too deep to decode", code="json_too_deep") from None
    if not isinstance(body, dict):
        raise APIError(400, f"request body must be a JSON object, got {type(body).__name__}",
                       code="invalid_json")
    if hook is not None:
        _reject_big_ints(body)
    return body


class _BigInt(int):
    """An integer literal of more digits than Python converts; holds its digit count."""


def _mark_big_int(digits: str) -> int:
    if len(digits.lstrip("-")) > sys.get_int_max_str_digits():
        return _BigInt(len(digits.lstrip("-")))
    return int(digits)


def _reject_big_ints(body: dict[str, Any]) -> None:
    """400 naming the first integer of ``body`` too long to convert, by its path (``a.b[2]``)."""
    stack: list[tuple[Any, str]] = [(body, "")]
    while stack:
        value, path = stack.pop()
        if isinstance(value, _BigInt):
            raise APIError(400, f"'{path}': an integer of {int(value)} digits is too large (at most "
                           f"{sys.get_int_max_str_digits()} digits)", param=path, code="invalid_value")
        if isinstance(value, dict):
            stack.extend((item, f"{path}.{key}" if path else str(key)) for key, item in reversed(value.items()))
        elif isinstance(value, list):
            stack.extend((item, f"{path}[{i}]") for i, item in reversed(list(enumerate(value))))
