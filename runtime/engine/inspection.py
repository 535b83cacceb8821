"""What the dashboard reads of a running engine: the radix tree's largest branches, its evictions,
the last finished requests and the compiled-grammar cache (``Engine.inspect``).

The tree is read in the engine thread between two steps (``EngineLoop.call``), so it never changes
under the walk; the walk is bounded (``radix_cache.snapshot``), so the step loop waits at most a
few milliseconds. The request log and the grammar cache have locks of their own.
"""

from __future__ import annotations

import time
from typing import Any

from radixlm.runtime.engine.grammar_compiler import GrammarCompiler
from radixlm.runtime.engine.step_loop import EngineLoop
from radixlm.runtime.scheduler.scheduler import Scheduler

MAX_NODES_LIMIT = 512
SHOWN_IDS_LIMIT = 256


def inspect_engine(loop: EngineLoop, scheduler: Scheduler, grammar: GrammarCompiler, max_nodes: int = 64,
                   shown_ids: int = 32, events_since: int = 0, requests_since: int = 0) -> dict[str, Any]:
    """``{"radix_cache", "tree", "evictions", "eviction_seq", "requests", "request_seq", "grammars"}``.

    ``tree``: ``RadixCache.snapshot(max_nodes, shown_ids)`` (None with the radix cache disabled);
    ``evictions``: the events after ``events_since``, each with ``age_s``; ``requests``: the
    request records after ``requests_since`` (``request_log.request_record``); ``grammars``: the
    compile cache's entries. ``ValueError`` for bounds out of range."""
    for name, value, hi in (("max_nodes", max_nodes, MAX_NODES_LIMIT), ("shown_ids", shown_ids, SHOWN_IDS_LIMIT)):
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= hi:
            raise ValueError(f"{name} must be an integer in [1, {hi}], got {value!r}")
    tree = scheduler.cache.tree

    def read() -> tuple[Any, list[dict[str, Any]], int]:
        if tree is None:
            return None, [], 0
        return tree.snapshot(max_nodes, shown_ids), tree.evictions.since(events_since), tree.evictions.seq

    snapshot, evictions, eviction_seq = loop.call(read)
    now = time.monotonic()
    for event in evictions:
        event["age_s"] = max(now - event.pop("time"), 0.0)
    return {"radix_cache": tree is not None, "tree": snapshot, "evictions": evictions,
            "eviction_seq": eviction_seq, "requests": loop.request_log.recent(requests_since),
            "request_seq": loop.request_log.seq, "grammars": grammar.cache_entries()}
