"""The eviction order of a radix tree: a lazy min-heap of evictable leaves."""

from __future__ import annotations

import heapq
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the tree's module imports this one
    from radixlm.radix_cache.radix_cache import TreeNode

EVICTION_POLICIES = ("lru", "lfu")


class EvictionQueue:
    """Evictable leaves ordered by policy; pop is O(log n) amortised.

    ``"lru"`` orders by ``last_access``; ``"lfu"`` by ``hit_count``, then ``last_access``.
    The owner calls :meth:`push` whenever a node becomes an evictable leaf or an evictable leaf's
    priority changes. Entries are never removed eagerly: each push gives the node a new stamp, and
    :meth:`pop` discards entries whose stamp is stale or whose node is no longer an evictable leaf
    (locked, grew a child, evicted). The heap is compacted when stale entries outnumber live ones,
    so its size stays within a constant factor of the number of nodes.
    """

    def __init__(self, policy: str) -> None:
        if policy not in EVICTION_POLICIES:
            raise ValueError(f"eviction_policy must be one of {EVICTION_POLICIES}, got {policy!r}")
        self._lfu = policy == "lfu"
        self._heap: list[tuple[int, int, int, TreeNode]] = []
        self._stamp = 0
        self._compact_at = 64

    def push(self, node: TreeNode) -> None:
        """(Re-)enter ``node`` with its current priority; older entries for it become stale."""
        self._stamp += 1
        node.heap_stamp = self._stamp
        if self._lfu:
            entry = (node.hit_count, node.last_access, self._stamp, node)
        else:
            entry = (node.last_access, 0, self._stamp, node)
        heapq.heappush(self._heap, entry)
        if len(self._heap) > self._compact_at:
            self._compact()

    def pop(self) -> TreeNode | None:
        """Remove and return the first evictable leaf in policy order, or None if there is none."""
        heap = self._heap
        while heap:
            _, _, stamp, node = heapq.heappop(heap)
            if stamp == node.heap_stamp and node.is_evictable_leaf():
                node.heap_stamp = 0
                return node
        return None

    def live_nodes(self) -> set[TreeNode]:
        """Nodes with a valid entry (for integrity checks)."""
        return {e[3] for e in self._heap if e[2] == e[3].heap_stamp and e[3].is_evictable_leaf()}

    def clear(self) -> None:
        self._heap.clear()
        self._compact_at = 64

    def __len__(self) -> int:
        return len(self._heap)

    def _compact(self) -> None:
        self._heap = [e for e in self._heap if e[2] == e[3].heap_stamp and e[3].is_evictable_leaf()]
        heapq.heapify(self._heap)
        self._compact_at = max(64, 2 * len(self._heap))
