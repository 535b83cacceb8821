"""Completions: short bytes that finish a document from a matcher's state.

Budget-aware completion (``runtime/engine/budget_close.py``) splices one in when a request's
output budget is about to run out; test walks finish on one. The search is greedy and byte by
byte through the single-byte tokens, on a copy of the matcher: forced text first, else the first
candidate byte the grammar allows. It does not search exhaustively (llguidance exposes no state
to deduplicate on), so it tries a few orders of candidates, each of which escapes a different
trap, and keeps the first that ends:

- ``closers``: the closing quote and brackets first, then separators and the shortest values;
  when ``_STALL`` bytes pass without an end ("0,0,0," where an item >= 5 is needed), the order
  of the non-closing candidates starts further along;
- ``hints``: like ``closers``, but right after the quote it spells the literal runs of the
  grammar's patterns in turn (``abc`` somewhere in a string);
- ``keys``: like ``closers``, but a JSON string the grammar spells literally (a member's key, a
  ``const``) that the text so far has begun is continued first, and each new string tries those
  literals in turn (a required key after optional extras: ``,"":0,"":0`` would never end);
- ``rotate``: the whole order rotates, closers included.

In every order a byte picked ``_RUN`` times in a row goes last (inside a string ``}`` is text:
it would be picked for ever).

None when no order ends within ``max_bytes``.
"""

from __future__ import annotations

import re
import weakref
from typing import Any

_CLOSING = [ord(c) for c in '"}]),:0' + "1{[ntf-.e" + "abcdefghijklmnopqrstuvwxyz"]
_CLOSING += [b for b in range(0x20, 0x7F) if b not in _CLOSING] + [0x0A] + list(range(0x80, 0xC0))  # UTF-8 tails
_CLOSERS = 4  # _CLOSING[:_CLOSERS]: the closing quote and brackets
_STALL, _STRIDE, _RUN = 64, 1, 8
STRATEGIES = ("closers", "keys", "hints", "rotate")
_LITERALS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # grammar -> its string literals


def greedy_completion(matcher: Any, max_bytes: int = 20_000) -> bytes | None:
    """Short bytes that complete ``matcher``'s document (``b""`` when complete), or None; works
    on any matcher of the ``GrammarMatcher`` interface (only copies move)."""
    if matcher.is_accepting():
        return b""
    hints = getattr(matcher.grammar, "completion_hints", b"")
    for strategy in STRATEGIES:
        if strategy == "hints" and not hints:
            continue
        if strategy == "keys":
            literals = string_literals(matcher.grammar)
            out = _complete(matcher, max_bytes, "closers", b"", literals) if literals else None
        else:
            out = _complete(matcher, max_bytes, strategy, hints)
        if out is not None:
            return out
    return None


def _complete(matcher: Any, max_bytes: int, strategy: str, hints: bytes,
              literals: list[bytes] | None = None) -> bytes | None:
    """One greedy search in ``strategy``'s order (``keys``: the ``closers`` order after the
    continuations of ``literals`` at a key position, read by a ``_Keys`` tracker)."""
    probe, out, spelled = matcher.copy(), bytearray(), 0
    byte_ids = matcher.grammar.vocab.byte_tokens
    track = _Keys() if literals is not None else None
    history = getattr(matcher, "accepted_bytes", None)
    if track is not None and history is not None:
        track.feed(history())  # the document so far: where its strings and objects are open
    while len(out) < max_bytes and not probe.is_accepting():
        forced = _take_forced(probe, byte_ids)
        if forced is None:
            return None
        if forced:
            out += forced
            if track is not None:
                track.feed(forced)
            continue
        order = _order(strategy, len(out), hints[spelled % len(hints)] if hints else None)
        if len(out) >= _RUN and len(set(out[-_RUN:])) == 1:
            order = [b for b in order if b != out[-1]] + [out[-1]]
        if track is not None:
            order = track.continuations(literals) + order
        for b in order:
            if byte_ids[b] >= 0 and probe.accept_token(byte_ids[b]):
                out.append(b)
                spelled += strategy == "hints" and bool(hints) and b == hints[spelled % len(hints)]
                if track is not None:
                    track.feed(bytes([b]))
                break
        else:
            return None
    return bytes(out) if probe.is_accepting() else None


def _take_forced(probe: Any, byte_ids: list[int]) -> bytes | None:
    """Accept the forced continuation through single-byte tokens: its bytes (``b""``: none is
    forced), or None when one of them is not accepted."""
    forced = probe.forced_continuation().encode("utf-8")
    if not all(byte_ids[b] >= 0 and probe.accept_token(byte_ids[b]) for b in forced):
        return None
    return forced


def _order(strategy: str, length: int, hint: int | None) -> list[int]:
    """The candidate bytes, in the order ``strategy`` tries them after ``length`` bytes."""
    if strategy == "rotate":
        shift = (length // _STALL) * _STRIDE % len(_CLOSING)
        return _CLOSING[shift:] + _CLOSING[:shift]
    rest = [b for b in _CLOSING[_CLOSERS:] if b != hint or strategy != "hints"]
    shift = (length // _STALL) * _STRIDE % len(rest)
    spell = [hint] if strategy == "hints" and hint is not None else []
    return _CLOSING[:1] + spell + _CLOSING[1:_CLOSERS] + rest[shift:] + rest[:shift]


def string_literals(grammar: Any) -> list[bytes]:
    """The JSON strings (quotes included) a grammar's Lark text spells as literals: keys, consts."""
    if grammar not in _LITERALS:
        lark = getattr(grammar, "lark", "")
        found = re.findall(r'"\\"((?:[^"\\]|\\\\)*?)\\""', lark)
        _LITERALS[grammar] = [b'"' + k.encode() + b'"' for k in dict.fromkeys(found)]
    return _LITERALS[grammar]


class _Keys:
    """Where the completion's text is, as far as its own bytes tell (it starts mid-document): the
    open containers, whether a string is open, whether it is a key, and the keys each open object
    has had."""

    def __init__(self) -> None:
        self.stack: list[set | None] = []  # an object's keys so far, or None for an array
        self.key: bytearray | None = None  # the key being written
        self.in_string = self.escaped = False
        self.expect_key = False

    def feed(self, data: bytes) -> None:
        for b in data:
            if self.in_string:
                if self.key is not None:
                    self.key.append(b)
                if self.escaped:
                    self.escaped = False
                elif b == 0x5C:
                    self.escaped = True
                elif b == 0x22:
                    self.in_string = False
                    if self.key is not None and self.stack and self.stack[-1] is not None:
                        self.stack[-1].add(bytes(self.key))
                    self.key = None
                continue
            if b == 0x22:
                self.in_string = True
                self.key = bytearray(b'"') if self.expect_key else None
                self.expect_key = False
            elif b in b"{[":
                self.stack.append(set() if b == 0x7B else None)
                self.expect_key = b == 0x7B
            elif b in b"}]":
                if self.stack:
                    self.stack.pop()
                self.expect_key = False
            elif b == 0x2C:
                self.expect_key = bool(self.stack) and self.stack[-1] is not None
            elif b == 0x3A:
                self.expect_key = False

    def continuations(self, literals: list[bytes]) -> list[int]:
        """Next bytes of the literals the open key begins (at a key position only; literals this
        object has had go last)."""
        if self.key is None:
            return []
        begun, had = bytes(self.key), self.stack[-1] if self.stack else set()
        fresh = [lit for lit in literals if lit not in had] + [lit for lit in literals if lit in had]
        return list(dict.fromkeys(lit[len(begun)] for lit in fresh
                                  if len(lit) > len(begun) and lit.startswith(begun)))
