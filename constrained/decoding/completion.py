"""Completions: short bytes that finish a document from a matcher's state.

Budget-aware completion (``runtime/engine/constraints.py``) splices one in when a request's
output budget is about to run out; test walks finish on one. The search is greedy and byte by
byte through the single-byte tokens, on a copy of the matcher: forced text first, else the first
candidate byte the grammar allows. It does not search exhaustively (llguidance exposes no state
to deduplicate on), so it tries a few orders of candidates, each of which escapes a different
trap, and keeps the first that ends (every order first within 256 bytes, then 2,048, then
``max_bytes``):

- ``closers``: the closing quote and brackets first, then separators and the shortest values;
  when ``_STALL`` bytes pass without an end ("0,0,0," where an item >= 5 is needed), the order
  of the non-closing candidates starts further along;
- ``hints``: like ``closers``, but inside a string it spells the literal runs and samples of the
  grammar's patterns in turn (``abc`` somewhere in a string), a refused byte skipped, and after a
  forced run found among them (a pattern's literal start) it spells on from there;
- ``keys``: like ``closers``, but a JSON string the grammar spells literally (a member's key, a
  ``const``) that the text so far has begun is continued first, and each new string tries those
  literals in turn (a required key after optional extras: ``,"":0,"":0`` would never end);
- ``rotate``: the whole order rotates, closers included.

In every order a byte picked ``_RUN`` times in a row goes last (inside a string ``}`` is text:
it would be picked for ever), and a number that has begun is ended first (``}``, ``]``, ``,``:
a stalled order would otherwise put digits first and write one number for ever). A search stops
after ``_TRIES`` candidate bytes per byte of ``max_bytes`` (each try is a matcher step).

None when no order ends within ``max_bytes``.

What the orders try, computed once per grammar and filed in its tables: the keys a completion
writes first in an object (``schema_keys``: the required, then the declared, keys of the schema
at the object's document path; ``{"a": [{`` is at ``("a", 0)``), the grammar's string literals
looked up by the open key's prefix (``string_literals``, ``literals_starting_with``), and the
hints (``completion_hints``: literal runs inside the grammar's lexemes and short strings matching
its patterns, ``0.0.0`` for ``\\d+\\.\\d+\\.\\d+``). They only order candidates: the matcher checks
every byte, so a wrong guess costs bytes, never validity.
"""

from __future__ import annotations

import bisect
import json
import re
import time
from typing import Any

from radixlm.constrained.pattern.samples import samples
from radixlm.constrained.vocab import TableSlot

_CLOSING = [ord(c) for c in '"}]),:0' + "1{[ntf-.e" + "abcdefghijklmnopqrstuvwxyz"]
_CLOSING += [b for b in range(0x20, 0x7F) if b not in _CLOSING] + [0x0A] + list(range(0x80, 0xC0))  # UTF-8 tails
_CLOSERS = 4  # _CLOSING[:_CLOSERS]: the closing quote and brackets
_STALL, _STRIDE, _RUN = 64, 1, 8
_BUDGETS = (256, 2048)  # bytes of the first, shorter tries of every order
_TRIES = 32  # candidate bytes tried per byte of max_bytes, at most
_NUMBER_END = [ord(c) for c in "}],"]
STRATEGIES = ("keys", "closers", "hints", "rotate")


def greedy_completion(matcher: Any, max_bytes: int = 20_000) -> bytes | None:
    """Short bytes that complete ``matcher``'s document (``b""`` when complete), or None; works
    on any matcher of the ``GrammarMatcher`` interface (only copies move)."""
    if matcher.is_accepting():
        return b""
    hints = completion_hints(matcher.grammar)
    start = _Keys()
    history = getattr(matcher, "accepted_bytes", None)
    if history is not None:
        start.feed(history())  # the document so far, read once: where its strings and objects are open
    for budget in _budgets(max_bytes):
        for strategy in STRATEGIES:
            if strategy == "hints" and not hints:
                continue
            if strategy == "keys":
                keys = bool(string_literals(matcher.grammar))
                out = _complete(matcher, start, budget, "closers", b"", keys=True) if keys else None
            else:
                out = _complete(matcher, start, budget, strategy, hints)
            if out is not None:
                return out
    return None


def opening_bytes(matcher: Any, max_bytes: int, seconds: float, fill: int | None = None) -> bytes:
    """The bytes the first completion order (``keys``) writes from ``matcher`` within
    ``max_bytes`` and ``seconds``, whether or not they end the document: a valid continuation
    along the shortest documents, for compile-time warm-up (``warm_start``), at the cost of one
    search rather than every order's. ``fill``: a byte tried first in each string value as it
    opens (a value of one character, where the grammar allows it, rather than an empty one)."""
    keys = bool(string_literals(matcher.grammar))
    out = _complete(matcher, _Keys(), max_bytes, "closers", b"", keys=keys,
                    partial=True, deadline=time.perf_counter() + seconds, fill=fill)
    return out or b""


def _budgets(max_bytes: int) -> list[int]:
    """Growing byte budgets up to ``max_bytes``: every order gets a short try first, so an order
    that loops (``,"":0,"":0``) costs little before the one that ends is tried."""
    out = [b for b in _BUDGETS if b < max_bytes]
    return out + [max_bytes]


def _complete(matcher: Any, start: _Keys, max_bytes: int, strategy: str, hints: bytes,
              keys: bool = False, partial: bool = False,
              deadline: float | None = None, fill: int | None = None) -> bytes | None:
    """One greedy search in ``strategy``'s order (``keys``: the ``closers`` order after the
    continuations of the grammar's literals at a key position, read by a ``_Keys`` tracker).
    ``partial``:
    the bytes written so far where the search ends without an end (else None); ``deadline``: a
    ``time.perf_counter()`` past which it ends; ``fill``: a byte tried first where a string value
    has just opened."""
    probe, out, spelled, tries = matcher.copy(), bytearray(), 0, _TRIES * max_bytes
    byte_ids = matcher.grammar.vocab.byte_tokens
    track = start.copy()
    while len(out) < max_bytes and not probe.is_accepting():
        if deadline is not None and time.perf_counter() > deadline:
            break
        forced = _take_forced(probe, byte_ids)
        if forced is None:
            return bytes(out) if partial else None
        if forced:
            out += forced
            track.feed(forced)
            if strategy == "hints":
                spelled = _align(hints, forced, spelled)
            continue
        order = _order(strategy, len(out), hints[spelled % len(hints)] if hints else None)
        if len(out) >= _RUN and len(set(out[-_RUN:])) == 1:
            order = [b for b in order if b != out[-1]] + [out[-1]]
        if track.number:
            order = _NUMBER_END + order
        if keys and track.key is not None:
            begun = _first_keys(probe, track) + literals_starting_with(probe.grammar, bytes(track.key))
            order = _spelled_on(probe, track, begun) + order
        if fill is not None and track.value_opened:
            order = [fill] + order
        for b in order:
            tries -= 1
            if tries < 0:
                return bytes(out) if partial else None
            if byte_ids[b] >= 0 and probe.accept_token(byte_ids[b]):
                out.append(b)
                # inside a string the hint byte was tried before any other (but the closing
                # quote): taken or refused, the spelling moves on, so a refused one is skipped
                spelled += strategy == "hints" and bool(hints) and track.in_string and b != 0x22
                track.feed(bytes([b]))
                break
        else:
            return bytes(out) if partial else None
    return bytes(out) if probe.is_accepting() or partial else None


def _align(hints: bytes, forced: bytes, spelled: int) -> int:
    """Where to spell ``hints`` on from after ``forced`` text: after the longest end of it
    that the hints contain (``"key":"iglu:`` ends with a pattern's literal start), else as before."""
    for k in range(min(len(forced), 32), 2, -1):
        i = hints.find(forced[-k:])
        if i >= 0:
            return i + k
    return spelled


def _spelled_on(probe: Any, track: _Keys, literals: list[bytes]) -> list[int]:
    """The next byte of the first of ``literals`` (``_Keys.begun``'s order) that the open key
    begins and whose whole rest the grammar accepts from here, or none. A key that may not come
    now (schema order: a later named key where only the next one or an extra key may) would
    otherwise be spelled up to its closing quote, refused there, and go on as an extra key."""
    n, byte_ids = len(track.key), probe.grammar.vocab.byte_tokens
    for lit in track.begun(literals):
        rest = [byte_ids[b] for b in lit[n:]]
        if all(t >= 0 for t in rest) and probe.validate_tokens(rest) == len(rest):
            return [lit[n]]
    return []


def _first_keys(probe: Any, track: _Keys) -> list[bytes]:
    """The keys to try first at a key position: those the object's runtime check still
    requires, then the schema's required and declared keys of the object there."""
    required = getattr(probe, "required_keys", None)
    first = list(required()) if required is not None else []
    path = track.path()
    return first + (schema_keys(probe.grammar, path) if path is not None else [])


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


class _Keys:
    """Where the completion's text is, read from the whole document so far: the open containers
    (an object's keys so far and its last key, an array's item index), whether a string is open,
    whether it is a key, and whether a number has begun."""

    def __init__(self) -> None:
        self.stack: list[list] = []  # ["o", keys so far, last key] or ["a", item index]
        self.key: bytearray | None = None  # the key being written
        self.in_string = self.escaped = False
        self.expect_key = False
        self.number = False  # a number value has begun and may still go on
        self.value_opened = False  # a string value's opening quote was the last byte

    def copy(self) -> _Keys:
        """An independent tracker at the same place."""
        other = _Keys()
        other.stack = [[e[0], set(e[1]), e[2]] if e[0] == "o" else list(e) for e in self.stack]
        other.key = bytearray(self.key) if self.key is not None else None
        other.in_string, other.escaped = self.in_string, self.escaped
        other.expect_key, other.number = self.expect_key, self.number
        other.value_opened = self.value_opened
        return other

    def feed(self, data: bytes) -> None:
        for b in data:
            if self.in_string:
                self.value_opened = False
                self._string_byte(b)
                continue
            self.number = (b in b"-0123456789") or (self.number and b in b".eE+")
            if b == 0x22:
                self.in_string = True
                self.key = bytearray(b'"') if self.expect_key else None
                self.value_opened = not self.expect_key
                self.expect_key = False
            elif b in b"{[":
                self.stack.append(["o", set(), None] if b == 0x7B else ["a", 0])
                self.expect_key = b == 0x7B
            elif b in b"}]":
                if self.stack:
                    self.stack.pop()
                self.expect_key = False
            elif b == 0x2C:
                top = self.stack[-1] if self.stack else None
                self.expect_key = top is not None and top[0] == "o"
                if top is not None and top[0] == "a":
                    top[1] += 1
            elif b == 0x3A:
                self.expect_key = False

    def _string_byte(self, b: int) -> None:
        if self.key is not None:
            self.key.append(b)
        if self.escaped:
            self.escaped = False
        elif b == 0x5C:
            self.escaped = True
        elif b == 0x22:
            self.in_string = False
            top = self.stack[-1] if self.stack else None
            if self.key is not None and top is not None and top[0] == "o":
                top[1].add(bytes(self.key))
                top[2] = bytes(self.key)
            self.key = None

    def path(self) -> tuple | None:
        """The document path of the innermost open container (keys and item indices), None when
        a key on it does not decode."""
        out: list = []
        for entry in self.stack[:-1]:
            if entry[0] == "a":
                out.append(entry[1])
                continue
            try:
                out.append(json.loads(entry[2].decode("utf-8")))
            except (AttributeError, ValueError):
                return None
        return tuple(out)

    def begun(self, literals: list[bytes]) -> list[bytes]:
        """The ``literals`` the open key begins and goes on past (at a key position only), in
        order, with those this object has had last."""
        if self.key is None:
            return []
        begun = bytes(self.key)
        top = self.stack[-1] if self.stack else None
        had = top[1] if top is not None and top[0] == "o" else set()
        n = len(begun)
        fresh, stale = [], []
        for lit in dict.fromkeys(literals):
            if len(lit) > n and lit.startswith(begun):
                (stale if lit in had else fresh).append(lit)
        return fresh + stale


_DEPTH = 8  # nested $ref / allOf / anyOf / oneOf levels followed per path step
_KEYS = TableSlot("schema_keys")  # per grammar: {path: keys}
_LITERALS = TableSlot("string_literals")  # per grammar: its string literals


def schema_keys(grammar: Any, path: tuple) -> list[bytes]:
    """Raw keys (quotes included) of the object at ``path`` in ``grammar``'s JSON Schema: its
    required ones first, then its declared ones; empty for other kinds of constraint."""
    if getattr(grammar, "kind", None) != "json_schema" or not isinstance(grammar.spec, dict):
        return []
    memo = _KEYS.of(grammar, dict)
    if path not in memo:
        memo[path] = _keys_at(grammar.spec, path)
    return memo[path]


def _keys_at(root: dict, path: tuple) -> list[bytes]:
    nodes = _expand(root, root)
    for step in path:
        nodes = [child for node in nodes for child in _expand(root, _child(node, step))]
        if not nodes:
            return []
    required = [k for node in nodes for k in node.get("required", ()) if isinstance(k, str)]
    named = [k for node in nodes if isinstance(node.get("properties"), dict) for k in node["properties"]]
    return [json.dumps(k, ensure_ascii=False).encode() for k in dict.fromkeys(required + named)]


def _child(node: dict, step: str | int) -> Any:
    """The subschema of member ``step`` (a key) or item ``step`` (an index) of ``node``."""
    if isinstance(step, str):
        props = node.get("properties")
        if isinstance(props, dict) and step in props:
            return props[step]
        extra = node.get("additionalProperties")
        return extra if isinstance(extra, dict) else None
    prefix = node.get("prefixItems")
    items = node.get("items")
    if isinstance(prefix, list) and step < len(prefix):
        return prefix[step]
    if isinstance(items, list):  # draft 4 tuples
        return items[step] if step < len(items) else node.get("additionalItems")
    return items if isinstance(items, dict) else None


def _expand(root: dict, node: Any, depth: int = 0) -> list[dict]:
    """``node`` and the schemas it refers to or combines (``$ref``, ``allOf``, ``anyOf``,
    ``oneOf``), as far as ``_DEPTH`` levels."""
    if not isinstance(node, dict) or depth > _DEPTH:
        return []
    out = [node]
    ref = node.get("$ref")
    if isinstance(ref, str):
        out += _expand(root, _pointer(root, ref), depth + 1)
    for key in ("allOf", "anyOf", "oneOf"):
        for sub in node.get(key, ()) if isinstance(node.get(key), list) else ():
            out += _expand(root, sub, depth + 1)
    return out


def _pointer(root: dict, ref: str) -> Any:
    """The local schema ``ref`` (``#/$defs/x``) names, or None."""
    if not ref.startswith("#"):
        return None
    node: Any = root
    for part in ref[1:].split("/")[1:]:
        part = part.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict):
            node = node.get(part)
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return None
    return node


def string_literals(grammar: Any) -> list[bytes]:
    """The JSON strings (quotes included) a grammar's Lark text spells as literals: keys, consts."""
    return _literals(grammar)[0]


def literals_starting_with(grammar: Any, prefix: bytes) -> list[bytes]:
    """``string_literals`` that start with ``prefix``, in their order: looked up in a sorted copy
    rather than read whole at every byte of a key, which cost a large schema's search most of its
    time (hundreds of keys)."""
    _, keys, rank = _literals(grammar)
    i = bisect.bisect_left(keys, prefix)
    found = []
    while i < len(keys) and keys[i].startswith(prefix):
        found.append(keys[i])
        i += 1
    return sorted(found, key=rank.__getitem__)


def _literals(grammar: Any) -> tuple[list[bytes], list[bytes], dict[bytes, int]]:
    """``grammar``'s literals in order, sorted, and the position of each (cached per grammar)."""
    return _LITERALS.of(grammar, lambda: _literals_of(getattr(grammar, "lark", "")))


def _literals_of(lark: str) -> tuple[list[bytes], list[bytes], dict[bytes, int]]:
    spelled = re.findall(r'"\\"((?:[^"\\]|\\\\)*?)\\""', lark)
    literals = [b'"' + k.encode() + b'"' for k in dict.fromkeys(spelled)]
    return literals, sorted(literals), {k: i for i, k in enumerate(literals)}


def completion_hints(grammar: Any) -> bytes:
    """``grammar``'s hints (``b""`` for grammars of other cores, which have no Lark text)."""
    tables = getattr(grammar, "tables", None)
    if tables is None or not hasattr(grammar, "lark"):
        return b""
    return tables.get("completion_hints", lambda: _hints(grammar.lark, grammar.kind, grammar.spec))


def _hints(lark: str, kind: str, spec: Any) -> bytes:
    runs = re.findall(r"\(([A-Za-z0-9_:./@-]{1,32})\)", lark)
    runs += [s for p in _patterns(kind, spec) for s in samples(p)[:1]
             if s and all(0x20 <= ord(c) < 0x7F and c not in '"\\' for c in s)]
    return "".join(dict.fromkeys(runs)).encode()


def _patterns(kind: str, spec: Any, limit: int = 64) -> list[str]:
    """The regexes a constraint names: its ``pattern`` keywords (JSON schemas) or itself."""
    if kind == "regex":
        return [spec] if isinstance(spec, str) else []
    out: list[str] = []
    todo = [spec] if kind == "json_schema" else []
    while todo and len(out) < limit:
        node = todo.pop()
        if isinstance(node, dict):
            if isinstance(node.get("pattern"), str):
                out.append(node["pattern"])
            todo.extend(v for k, v in node.items() if k not in ("enum", "const", "examples", "default"))
        elif isinstance(node, list):
            todo.extend(node)
    return out
