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
- ``rotate``: the whole order rotates, closers included.

In every order a byte picked ``_RUN`` times in a row goes last (inside a string ``}`` is text:
it would be picked for ever).

None when no order ends within ``max_bytes``.
"""

from __future__ import annotations

from typing import Any

_CLOSING = [ord(c) for c in '"}]),:0' + "1{[ntf-.e" + "abcdefghijklmnopqrstuvwxyz"]
_CLOSING += [b for b in range(0x20, 0x7F) if b not in _CLOSING] + [0x0A] + list(range(0x80, 0xC0))  # UTF-8 tails
_CLOSERS = 4  # _CLOSING[:_CLOSERS]: the closing quote and brackets
_STALL, _STRIDE, _RUN = 64, 1, 8
STRATEGIES = ("closers", "hints", "rotate")


def greedy_completion(matcher: Any, max_bytes: int = 20_000) -> bytes | None:
    """Short bytes that complete ``matcher``'s document (``b""`` when complete), or None; works
    on any matcher of the ``GrammarMatcher`` interface (only copies move)."""
    if matcher.is_accepting():
        return b""
    hints = getattr(matcher.grammar, "completion_hints", b"")
    for strategy in STRATEGIES:
        if strategy == "hints" and not hints:
            continue
        out = _complete(matcher, max_bytes, strategy, hints)
        if out is not None:
            return out
    return None


def _complete(matcher: Any, max_bytes: int, strategy: str, hints: bytes) -> bytes | None:
    probe, out, spelled = matcher.copy(), bytearray(), 0
    byte_ids = matcher.grammar.vocab.byte_tokens
    while len(out) < max_bytes and not probe.is_accepting():
        forced = probe.forced_continuation().encode("utf-8")
        if forced:
            if not all(byte_ids[b] >= 0 and probe.accept_token(byte_ids[b]) for b in forced):
                return None
            out += forced
            continue
        order = _order(strategy, len(out), hints[spelled % len(hints)] if hints else None)
        if len(out) >= _RUN and len(set(out[-_RUN:])) == 1:
            order = [b for b in order if b != out[-1]] + [out[-1]]
        for b in order:
            if byte_ids[b] >= 0 and probe.accept_token(byte_ids[b]):
                out.append(b)
                spelled += strategy == "hints" and hints and b == hints[spelled % len(hints)]
                break
        else:
            return None
    return bytes(out) if probe.is_accepting() else None


def _order(strategy: str, length: int, hint: int | None) -> list[int]:
    """The candidate bytes, in the order ``strategy`` tries them after ``length`` bytes."""
    if strategy == "rotate":
        shift = (length // _STALL) * _STRIDE % len(_CLOSING)
        return _CLOSING[shift:] + _CLOSING[:shift]
    rest = [b for b in _CLOSING[_CLOSERS:] if b != hint or strategy != "hints"]
    shift = (length // _STALL) * _STRIDE % len(rest)
    spell = [hint] if strategy == "hints" and hint is not None else []
    return _CLOSING[:1] + spell + _CLOSING[1:_CLOSERS] + rest[shift:] + rest[:shift]
