"""Token-key helpers for the radix tree: normalising keys and comparing an edge with a key."""

from __future__ import annotations

from collections.abc import Sequence

# Tokens compared per slice when an edge does not match whole.
_SCAN_CHUNK = 64


def as_tokens(key: Sequence[int], name: str) -> tuple[int, ...]:
    """``key`` as a tuple of token ids (``TypeError`` naming ``name`` for str/bytes/non-sequences)."""
    if type(key) is tuple:
        return key
    if isinstance(key, (str, bytes)):
        raise TypeError(f"{name} must be a sequence of ints, got {type(key).__name__}")
    try:
        return tuple(key)
    except TypeError:
        raise TypeError(f"{name} must be a sequence of ints, got {type(key).__name__}") from None


def common_prefix_len(edge: Sequence, key: Sequence, start: int = 0, page_size: int = 1) -> int:
    """Length of the common prefix of ``edge`` and ``key[start:]``, rounded down to a whole page.

    Any sliceable sequences of the same kind (token tuples or lists, strings). Compares slices in
    C rather than items in Python: first the whole edge (the common case on a cache hit), then
    chunks, then single items inside the first differing chunk.
    """
    size = len(edge)
    if key[start : start + size] == edge:
        return size
    limit = min(size, len(key) - start)
    j = 0
    while j + _SCAN_CHUNK <= limit and key[start + j : start + j + _SCAN_CHUNK] == edge[j : j + _SCAN_CHUNK]:
        j += _SCAN_CHUNK
    while j < limit and key[start + j] == edge[j]:
        j += 1
    return j - j % page_size
