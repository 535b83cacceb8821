"""A read-only view of the compiled-grammar cache for the dashboard: one dict per entry."""

from __future__ import annotations

import json
from typing import Any

PREVIEW_CHARS = 160


def entry_view(key: str, done: bool, hits: int, nbytes: int, grammar: Any, error: Any) -> dict[str, Any]:
    """``{"kind", "spec", "state", "hits", "compile_s", "bytes", "error"}`` of one cache entry.

    ``key`` is the entry's ``CompileRequest.cache_key()`` (a JSON list: kind, spec, whitespace
    pattern, strict); ``spec`` is the constraint shortened to ``PREVIEW_CHARS`` characters;
    ``state`` is ``compiling``, ``ready`` or ``error``; ``hits`` counts the requests that found
    the entry in the cache (the first, which started the compile, is not a hit)."""
    try:
        kind, spec = json.loads(key)[:2]
    except (ValueError, TypeError):
        kind, spec = "?", key
    text = spec if isinstance(spec, str) else json.dumps(spec, ensure_ascii=False, sort_keys=True)
    if len(text) > PREVIEW_CHARS:
        text = text[: PREVIEW_CHARS - 1] + "\u2026"
    state = "compiling" if not done else "error" if error is not None else "ready"
    return {"kind": kind, "spec": text, "state": state, "hits": hits,
            "compile_s": getattr(grammar, "compile_s", None), "bytes": nbytes,
            "error": None if error is None else str(error)}
