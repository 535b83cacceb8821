"""The tokens a runtime member check (``checks.tracker``) can refuse, filed once per vocabulary by
what they can do from a reader mode, so a mask feeds only a few hundred candidates instead of the
vocabulary (``masks.members``). Only tokens holding a structural byte can be refused (``,`` ``}``
``{``, a key's quotes).

String splits: Where each token of a vocabulary closes an open JSON string: its first unescaped quote, read
from either escape state, or past the bytes that open a string (``"``, ``,"``).

The runtime member check (``masks.member_memo``'s tail verdicts) decides a token inside a string by what follows
its closing quote (its *tail*): tokens share a few dozen tails (``",`` ``"}`` ``":"`` ...), so a
state's verdicts come from one feed per distinct tail. Built once per vocabulary (only tokens
holding a quote are read, a few thousand at 152k); ``close_of`` reads any other bytes the same way.
A step then looks each candidate up instead of slicing and scanning its bytes: with caches left
cold by the core's mask, a few Python operations per token were most of a new state's cost.
"""

from __future__ import annotations

import bisect
import functools
import re
from typing import Any

import numpy as np
from radixlm.constrained.vocab import TableSlot

_STRUCTURAL = re.compile(rb'[",{}\]\\]')
# what a check may ask of the open objects (``masks.members.asks``), as bits
# whether ``}`` may come; another member; a key's name; a key spelled with an escape
ASK_CLOSE, ASK_ADD, ASK_KEY, ASK_ESCAPE = 1, 2, 4, 8
_FILES = TableSlot("member_tokens")  # per vocabulary


class MemberTokens:
    """One vocabulary's candidate tokens: ``outside`` (a ``,``/``}``/``{`` or two quotes: may
    refuse from outside strings), ``after_quote`` (a quote before a structural byte: may refuse
    once the open string closes), ``after_bracket`` (the same after a ``]``: inside a unique
    array), ``after_brace`` (a ``{`` before a ``}`` or quote: may open a checked object and refuse
    in it), ``quoted`` (any quote), ``live`` (a ``,`` with two quotes after it: may write a whole key
    after another, ``masks.member_memo``), and the tokens sorted by their bytes (prefix lookups).
    Files are numpy arrays and the sorted ids one int32 array: at 152k tokens, lists of Python
    ints and a bytes -> id dict held some 18 MB."""

    def __init__(self, token_bytes: tuple) -> None:
        tokens = [b or b"" for b in token_bytes]
        outside, after_quote, after_bracket, quoted, after_brace = [], [], [], [], []
        for t, b in enumerate(tokens):
            if _STRUCTURAL.search(b) is None:  # most tokens: nothing a check reads
                continue
            last = max(b.rfind(b","), b.rfind(b"}"), b.rfind(b'"'), b.rfind(b"{"))
            if b'"' in b:
                quoted.append(t)
                if b.find(b'"') < last:
                    after_quote.append(t)
            if b.count(b'"') >= 2 or b"," in b or b"}" in b or b"{" in b or b'"' in b and b"\\" in b:
                outside.append(t)
            if b"]" in b and b.find(b"]") < last:
                after_bracket.append(t)
            if b"{" in b and b.find(b"{") < max(b.rfind(b"}"), b.rfind(b'"')):
                after_brace.append(t)
        arr = lambda ids: np.asarray(ids, dtype=np.int64)  # noqa: E731
        self.outside, self.after_quote = arr(outside), arr(after_quote)
        self.after_bracket, self.quoted, self.after_brace = arr(after_bracket), arr(quoted), arr(after_brace)
        self.any_outside = np.union1d(self.outside, self.quoted)
        # a later whole key of an object needs a ``,`` and two quotes after it (``masks.member_memo``)
        self.live = arr([t for t, b in enumerate(tokens) if may_write_a_key(b)])
        self.backslashed = arr([t for t, b in enumerate(tokens) if b"\\" in b])
        self.key_chars = np.union1d(self.after_quote, self.backslashed)
        # what a token must hold to be refused for each thing a check may ask (``narrowed``)
        self.closes = arr([t for t, b in enumerate(tokens) if b"}" in b])
        self.commas = arr([t for t, b in enumerate(tokens) if b"," in b])
        self.two_quotes = arr([t for t, b in enumerate(tokens) if b.count(b'"') >= 2])
        # a key opened with bytes after its quote (after a ``,``; anywhere, from ``G_KEY``): a key
        # opened bare is refused only where no member may come (``ASK_ADD``)
        self.named_after_comma = arr([t for t, b in enumerate(tokens) if quote_then_more(b, b.find(b","))])
        self.named_after_quote = arr([t for t, b in enumerate(tokens) if quote_then_more(b, 0)])
        self.token_bytes = token_bytes  # the vocabulary's own table: each id's bytes (None for none)
        self._narrowed: dict[tuple, tuple] = {}
        self._starting: dict[tuple, tuple[int, ...]] = {}
        self._prefixes: dict[bytes, tuple[int, ...]] = {}
        self._places = {id(a): place(a) for a in (self.outside, self.after_quote, self.after_bracket,
                                                   self.after_brace, self.any_outside, self.key_chars)}

    def warm(self) -> None:
        """Build the lazily built parts now (the sorted tokens: a fraction of a second at 152k;
        every narrowed file)."""
        _ = self._sorted, self._longest, self.live_set
        for ids in (self.outside, self.after_quote, self.any_outside, self.key_chars):
            for asks in range((ASK_CLOSE | ASK_ADD | ASK_KEY | ASK_ESCAPE) + 1):
                for key_start in (False, True):
                    self.narrowed(ids, asks, key_start)

    def narrowed(self, ids: np.ndarray, asks: int, key_start: bool) -> tuple[np.ndarray, tuple]:
        """``(ids, placed)``: the candidates of ``ids`` (one of this vocabulary's files) that can be
        refused where a check may ask only ``asks`` (``ASK_*`` bits) of the open objects, from
        ``G_KEY`` if ``key_start``. Any token may open an object (``after_brace``) or write a
        later key whole (``live``; from ``G_KEY``, any two quotes); beyond those a token needs a
        ``}`` to be refused a close, a ``,`` (or, from ``G_KEY``, a quote) a member, a quote
        and more bytes after a ``,`` (from ``G_KEY``, anywhere) a key's name, and a backslash
        an escaped one.
        Cached per file."""
        found = self._narrowed.get((id(ids), asks, key_start))
        if found is None:
            parts = [self.after_brace, self.live] + ([self.two_quotes] if key_start else [])
            if asks & ASK_CLOSE:
                parts.append(self.closes)
            if asks & ASK_ADD:
                parts += [self.commas] + ([self.quoted] if key_start else [])
            if asks & ASK_KEY:
                parts.append(self.named_after_quote if key_start else self.named_after_comma)
            if asks & ASK_ESCAPE:
                parts.append(self.backslashed)
            kept = np.intersect1d(ids, functools.reduce(np.union1d, parts))
            found = self._narrowed[(id(ids), asks, key_start)] = (kept, place(kept))
        return found

    @functools.cached_property
    def live_set(self) -> frozenset[int]:
        """``live`` as a set."""
        return frozenset(self.live.tolist())

    def placed(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``place(ids)``, shared for this vocabulary's own candidate arrays."""
        found = self._places.get(id(ids))
        return found if found is not None else place(ids)

    @functools.cached_property
    def _sorted(self) -> tuple[list[bytes], np.ndarray]:
        """The tokens' bytes sorted (ties by id), and their ids as int32 (built at the first key
        lookup; the list holds references to the table's own bytes)."""
        table = self.token_bytes
        order = [t for t, b in enumerate(table) if b]
        order.sort(key=table.__getitem__)  # stable: equal bytes keep id order
        return [table[t] for t in order], np.asarray(order, dtype=np.int32)

    def starting_with(self, prefix: bytes, longer: bool = False) -> tuple[int, ...]:
        """The tokens whose bytes start with ``prefix`` (``longer``: and go on past it). Cached:
        an open key asks again for every key its object has written, at each new member."""
        found = self._starting.get((prefix, longer))
        if found is None:
            if len(self._starting) > 65536:
                self._starting.clear()
            found = self._starting[(prefix, longer)] = tuple(self._starting_with(prefix, longer))
        return found

    def _starting_with(self, prefix: bytes, longer: bool) -> list[int]:
        """``starting_with``, looked up in the sorted tokens."""
        keys, ids = self._sorted
        lo = (bisect.bisect_right if longer else bisect.bisect_left)(keys, prefix)
        end = prefix.rstrip(b"\xff")  # the least bytes above every one starting with ``prefix``
        hi = bisect.bisect_left(keys, end[:-1] + bytes((end[-1] + 1,)), lo) if end else len(keys)
        return ids[lo:hi].tolist()

    def prefixes_of(self, data: bytes) -> tuple[int, ...]:
        """The tokens whose bytes are a non-empty prefix of ``data`` (cached, as
        ``starting_with``)."""
        found = self._prefixes.get(data)
        if found is None:
            (keys, ids), out = self._sorted, []
            for n in range(1, min(len(data), self._longest) + 1):
                head = data[:n]
                i = bisect.bisect_left(keys, head)
                if i == len(keys) or not keys[i].startswith(head):
                    break  # no token starts with ``head``, so none is a longer prefix
                while i < len(keys) and keys[i] == head:
                    out.append(int(ids[i]))
                    i += 1
            if len(self._prefixes) > 65536:
                self._prefixes.clear()
            found = self._prefixes[data] = tuple(out)
        return found

    @functools.cached_property
    def _longest(self) -> int:
        """The longest token's length in bytes."""
        return max((len(b) for b in self.token_bytes if b), default=0)


def quote_then_more(data: bytes, start: int) -> bool:
    """Whether ``data`` has a quote after offset ``start`` (-1: none) followed by more bytes: a
    key opened there goes on with a name."""
    quote = data.find(b'"', start) if start >= 0 else -1
    return 0 <= quote < len(data) - 1


def may_write_a_key(data: bytes) -> bool:
    """Whether ``data`` could write a whole later key of an object: a ``,`` with two quotes after it."""
    comma = data.find(b",")
    return comma >= 0 and data.count(b'"', comma) >= 2


def place(ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(word, bit)`` of each token id in a mask of uint32 words."""
    return ids >> 5, np.uint32(1) << (ids & 31).astype(np.uint32)


def member_tokens_for(vocab: Any) -> MemberTokens:
    """The (cached) ``MemberTokens`` of ``vocab``."""
    return _FILES.of(vocab, lambda: MemberTokens(vocab.token_bytes))


_SPLITS = TableSlot("quote_split")  # per vocabulary
UNSPLIT = -2  # a quote comes after a ``\u`` escape: read the bytes whole
OPENERS = (b'"', b',"')  # the bytes that open a string from outside one (a value or key; a key)
# a key's tail that only opens a value string: the plain bytes in that string change nothing
_OPEN_VALUE = re.compile(rb'[ \t\n\r]*:[ \t\n\r]*"[^"\\]*')
# a key's tail that nothing can refuse: its colon, then at most a value string or number begun
_QUIET = re.compile(rb'[ \t\n\r]*(:[ \t\n\r]*("|-?[0-9]*))?')


class QuoteSplit:
    """``reading[r]``: token id -> ``(at, head, tail, plain, quiet)`` read from inside a string
    (``r`` 0 for the plain escape state, 1 for the one after a backslash; ``at`` is
    ``close_of(its bytes, escaped=bool(r))``; tokens without a quote are left out: they close
    nothing) or past an
    opener (``r`` one of ``OPENERS``: every token that starts with it and goes on; ``at`` and
    ``head`` count from after the opener). ``head``/``tail``: the bytes before and after the
    closing quote (None where ``at`` < 0), a tail that only opens a value string cut after its
    quote; ``plain``: the head has no backslash and the token cannot write a later key whole
    (``may_write_a_key``), so a key it completes is named by the head alone; ``quiet``: after a
    key, nothing in the tail can be refused (a colon, then at most the start of a value string or
    number), so the key alone decides."""

    def __init__(self, token_bytes: tuple) -> None:
        self.reading: dict[Any, dict[int, tuple]] = {r: {} for r in (0, 1, *OPENERS)}
        interned: dict[bytes, bytes] = {}
        for t, data in enumerate(token_bytes):
            if not data or b'"' not in data:
                continue
            for e in (0, 1):
                self.reading[e][t] = _read(data, close_of(data, bool(e)), interned)
            for opener in OPENERS:
                if len(data) > len(opener) and data.startswith(opener):
                    rest = data[len(opener):]
                    self.reading[opener][t] = _read(rest, close_of(rest, False), interned)


def _read(data: bytes, at: int, interned: dict) -> tuple:
    """``(at, head, tail, plain, quiet)`` of ``data`` whose closing quote is at ``at``."""
    if at < 0:
        return at, None, None, False, False
    head, tail = data[:at], data[at + 1:]
    if _OPEN_VALUE.fullmatch(tail):
        tail = tail[:tail.index(b'"') + 1]
    head, tail = interned.setdefault(head, head), interned.setdefault(tail, tail)
    return at, head, tail, b"\\" not in head and not may_write_a_key(data), _QUIET.fullmatch(tail) is not None


def close_of(data: bytes, escaped: bool) -> int:
    """The offset of the first quote in ``data`` that no backslash escapes (``escaped``: the first
    byte is escaped), -1 when there is none, or ``UNSPLIT`` when a ``\\u`` escape comes before it.
    As the tracker reads strings an escape covers one byte, but a counted string's reader takes a
    ``\\u`` escape's four hex digits whatever they are: the two part only on bytes the grammar
    refuses, and such bytes are left to be read whole."""
    i = 1 if escaped else 0
    if escaped and data[:1] == b"u":
        return UNSPLIT if b'"' in data else -1
    while i < len(data):
        b = data[i]
        if b == 0x5C:
            if data[i + 1:i + 2] == b"u":
                return UNSPLIT if b'"' in data[i:] else -1
            i += 2
            continue
        if b == 0x22:
            return i
        i += 1
    return -1


def quote_split_for(vocab: Any) -> QuoteSplit:
    """The (cached) ``QuoteSplit`` of ``vocab``."""
    return _SPLITS.of(vocab, lambda: QuoteSplit(vocab.token_bytes))
