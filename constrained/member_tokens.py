"""The tokens a runtime member check (``member_check``) can refuse, filed once per vocabulary by
what they can do from a reader mode, so a mask feeds only a few hundred candidates instead of the
vocabulary (``member_mask``). Only tokens holding a structural byte can be refused (``,`` ``}``
``{``, a key's quotes)."""

from __future__ import annotations

import bisect
import functools
import re
import weakref
from typing import Any

import numpy as np

_STRUCTURAL = re.compile(rb'[",{}\]\\]')
_files: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


class MemberTokens:
    """One vocabulary's candidate tokens: ``outside`` (a ``,``/``}``/``{`` or two quotes: may
    refuse from outside strings), ``after_quote`` (a quote before a structural byte: may refuse
    once the open string closes), ``after_bracket`` (the same after a ``]``: inside a unique
    array), ``after_brace`` (a ``{`` before a ``}`` or quote: may open a checked object and refuse
    in it), ``quoted`` (any quote), ``live`` (three quotes or more), and the tokens sorted by their bytes (prefix lookups)."""

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
        # three or more quotes: may close a key and write another whole one (``member_memo``)
        self.live = arr([t for t, b in enumerate(tokens) if b.count(b'"') >= 3])
        self.key_chars = np.union1d(self.after_quote, arr([t for t, b in enumerate(tokens) if b"\\" in b]))
        self._tokens = tokens
        self._places = {id(a): place(a) for a in (self.outside, self.after_quote, self.after_bracket,
                                                   self.after_brace, self.any_outside, self.key_chars)}

    def warm(self) -> None:
        """Build the lazily built parts now (the sorted tokens: a fraction of a second at 152k)."""
        _ = self._sorted

    def placed(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``place(ids)``, shared for this vocabulary's own candidate arrays."""
        found = self._places.get(id(ids))
        return found if found is not None else place(ids)

    @functools.cached_property
    def _sorted(self) -> tuple[list[bytes], list[int]]:
        """The tokens' bytes sorted, and their ids (built at the first key lookup)."""
        order = sorted((b, t) for t, b in enumerate(self._tokens) if b)
        return [b for b, _ in order], [t for _, t in order]

    def starting_with(self, prefix: bytes) -> list[int]:
        """The tokens whose bytes start with ``prefix``."""
        keys, ids = self._sorted
        i, out = bisect.bisect_left(keys, prefix), []
        while i < len(keys) and keys[i].startswith(prefix):
            out.append(ids[i])
            i += 1
        return out

    def prefixes_of(self, data: bytes) -> list[int]:
        """The tokens whose bytes are a non-empty prefix of ``data``."""
        keys, ids, out = *self._sorted, []
        for n in range(1, len(data) + 1):
            i = bisect.bisect_left(keys, data[:n])
            while i < len(keys) and keys[i] == data[:n]:
                out.append(ids[i])
                i += 1
        return out


def place(ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(word, bit)`` of each token id in a mask of uint32 words."""
    return ids >> 5, np.uint32(1) << (ids & 31).astype(np.uint32)


def member_tokens_for(vocab: Any) -> MemberTokens:
    """The (cached) ``MemberTokens`` of ``vocab``."""
    files = _files.get(vocab)
    if files is None:
        files = _files[vocab] = MemberTokens(vocab.token_bytes)
    return files
