"""RadixAttention's prefix cache: a radix tree from token ids to the KV slots caching them.

A node split (inserting or matching ``1 2 3 7`` where the edge ``1 2 3 4 5`` is cached)::

    before                      after
    root                        root
     └── [1 2 3 4 5]             └── [1 2 3]        <- new parent, inherits lock_ref and stats
           slots a b c d e             slots a b c
                                       ├── [4 5]    <- the original node object, same children
                                       │     slots d e
                                       └── [7]      <- new leaf (insert only)
                                             slots z

Each edge stores its tokens as a tuple and its slots as a list of the same length; a path from a
root spells a cached prefix. Children are found by their first token (``page_size == 1``) or
first page tuple (``page_size > 1``), and edges are compared by slicing whole edges at once.

Design choice: like SGLang, ``match_prefix`` splits a node when the match ends inside its edge,
so that ``last_node`` covers exactly the matched prefix and locking it protects exactly that.
The split changes the tree's shape only: the set of cached tokens, their slots and every size
stay the same, so "match_prefix does not change what is cached" holds.

With ``page_size > 1`` only whole pages are cached and matched: ``insert`` ignores the trailing
``len(key) % page_size`` tokens (their slots stay the caller's to free) and ``match_prefix``
returns a multiple of ``page_size`` slots.

Here too: ``TreeNode`` (one edge and the node it leads to), ``MatchResult``, the token-key
helpers (``as_tokens``, ``common_prefix_len``: an edge compared with a key by slices), and
``EvictionQueue``, the eviction order (a lazy min-heap of evictable leaves, ``lru`` or ``lfu``).
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from radixlm.radix_cache.inspection import (
    EvictionLog,
    check_tree,
    child_key_of,
    namespace_of,
    render_tree,
    snapshot_tree,
)

# Tokens compared per slice when an edge does not match whole.
_SCAN_CHUNK = 64


class RadixCache:
    """A radix tree over token ids mapping every cached prefix to its KV slots.

    Not thread-safe: the scheduler owns it. No torch, no globals; ``last_access`` ticks come from
    a per-instance counter. Keys under different ``extra_key`` values live under separate roots
    and never share nodes (tenant / adapter isolation); a namespace's root is created on first use
    and forgotten again once it has no children and no lock.
    """

    def __init__(self, page_size: int = 1, eviction_policy: str = "lru") -> None:
        if isinstance(page_size, bool) or not isinstance(page_size, int) or page_size < 1:
            raise ValueError(f"page_size must be a positive int, got {page_size!r}")
        if eviction_policy not in EVICTION_POLICIES:
            raise ValueError(f"eviction_policy must be one of {EVICTION_POLICIES}, got {eviction_policy!r}")
        self.page_size = page_size
        self.eviction_policy = eviction_policy
        self._queue = EvictionQueue(eviction_policy)
        self.evictions = EvictionLog()  # the last evictions, for the dashboard
        self.reset()

    # ------------------------------------------------------------------ lookup and insertion

    def match_prefix(self, key: Sequence[int], extra_key: str | None = None) -> MatchResult:
        """Find the longest cached prefix of ``key`` in namespace ``extra_key``.

        Returns its slots (page-aligned when ``page_size > 1``) and the node ending exactly at it
        (the namespace root when nothing matches). Does not change what is cached; it may split a
        node (see the module docstring), refreshes the access time (LRU) and hit count (LFU) of
        every node on the matched path, and counts the query in :meth:`stats`.
        """
        key = as_tokens(key, "key")
        self._queries += 1
        self._queried_tokens += len(key)
        if self.page_size > 1:
            key = key[: len(key) - len(key) % self.page_size]
        node = self._root(extra_key)
        value: list[int] = []
        i, n = 0, len(key)
        while i < n:
            child = node.children.get(self._child_key(key, i))
            if child is None:
                break
            m = common_prefix_len(child.key, key, i, self.page_size)
            if m < len(child.key):
                child = self._split(child, m)
            self._touch(child)
            value.extend(child.value)
            node = child
            i += m  # after a split the loop ends: no child of `node` starts with key[i:]
        if node.is_evictable_leaf():
            self._queue.push(node)
        self._hit_tokens += i
        return MatchResult(value, node)

    def continuation(self, key: Sequence[int], extra_key: str | None = None, max_tokens: int = 8) -> list[int]:
        """The tokens cached right after ``key`` (at most ``max_tokens``), following the most
        recently used branch at each fork: what earlier requests with this prefix went on with.

        Empty when ``key`` is not cached whole, or with ``page_size > 1`` (a key that ends inside a
        page has no child to follow). Read-only: no split, no access-time change, not counted in
        :meth:`stats` (a draft proposal is not a cache hit).
        """
        root = self._roots.get(extra_key)
        if root is None or max_tokens <= 0 or self.page_size > 1:
            return []
        key = as_tokens(key, "key")  # edges are tuples: slices compare only with tuples
        node, i, n = root, 0, len(key)
        out: list[int] = []
        while i < n:
            child = node.children.get(key[i])
            if child is None:
                return []
            m = common_prefix_len(child.key, key, i)
            if m < len(child.key):
                if i + m < n:
                    return []  # the key leaves the tree inside this edge
                out = list(child.key[m:m + max_tokens])
            node, i = child, i + m
        while len(out) < max_tokens and node.children:
            node = max(node.children.values(), key=lambda c: c.last_access)
            out.extend(node.key[:max_tokens - len(out)])
        return out

    def insert(self, key: Sequence[int], value: Sequence[int], extra_key: str | None = None) -> int:
        """Cache ``key -> value`` in namespace ``extra_key``; return how many leading tokens were cached already.

        ``value`` holds one KV slot per token of ``key`` (``ValueError`` otherwise). For the
        returned prefix the tree keeps its own slots: the caller frees ``value[:returned]``. With
        ``page_size > 1`` only the page-aligned part is cached and the caller also keeps (frees)
        the slots past ``len(key) // page_size * page_size``. Splits nodes as needed and refreshes
        the access time and hit count of the path.
        """
        key = as_tokens(key, "key")
        value = list(value)
        if len(value) != len(key):
            raise ValueError(f"value has {len(value)} slots but key has {len(key)} tokens")
        n = len(key) - len(key) % self.page_size
        key = key[:n]
        node = self._root(extra_key)
        i = 0
        while i < n:
            child = node.children.get(self._child_key(key, i))
            if child is None:
                self._add_leaf(node, key[i:], value[i:n])
                return i
            m = common_prefix_len(child.key, key, i, self.page_size)
            if m < len(child.key):
                child = self._split(child, m)
            self._touch(child)
            node = child
            i += m
        if node.is_evictable_leaf():
            self._queue.push(node)
        return i

    # ------------------------------------------------------------------ locking

    def lock(self, node: TreeNode) -> None:
        """Protect ``node`` and its ancestors from eviction (one more reference on each).

        ``ValueError`` if ``node`` is no longer in this cache (evicted, or from before :meth:`reset`).
        """
        for n in self._path_to_root(node):
            if n.lock_ref == 0 and not n.is_root:
                self._evictable -= len(n.key)
                self._protected += len(n.key)
            n.lock_ref += 1

    def unlock(self, node: TreeNode) -> None:
        """Drop one reference taken by :meth:`lock`; ``RuntimeError`` if ``node`` holds none."""
        path = self._path_to_root(node)
        if node.lock_ref <= 0:
            raise RuntimeError(f"unlock without a matching lock: {node!r} has lock_ref 0")
        for n in path:
            n.lock_ref -= 1
            if n.lock_ref == 0 and not n.is_root:
                self._protected -= len(n.key)
                self._evictable += len(n.key)
                if not n.children:
                    self._queue.push(n)
        self._maybe_drop_root(path[-1])

    # ------------------------------------------------------------------ eviction

    def evict(self, num_tokens: int) -> list[int]:
        """Free at least ``num_tokens`` slots, or every evictable one if fewer exist.

        Removes whole unlocked leaves, least recently used first (``"lfu"``: fewest hits, i.e.
        visits by ``match_prefix``/``insert``, first, then least recent); a parent becomes a candidate once its last child is gone. Returns the
        freed slots, each exactly once; the caller returns them to its allocator. Costs
        O(k log n) for k evicted nodes.
        """
        if isinstance(num_tokens, bool) or not isinstance(num_tokens, int) or num_tokens < 0:
            raise ValueError(f"num_tokens must be a non-negative int, got {num_tokens!r}")
        freed: list[int] = []
        while len(freed) < num_tokens:
            leaf = self._queue.pop()
            if leaf is None:
                break
            parent = leaf.parent
            self.evictions.record(leaf, namespace_of(parent), leaf.depth_tokens())
            del parent.children[child_key_of(leaf.key, self.page_size)]
            leaf.parent = None
            freed.extend(leaf.value)
            self._evictable -= len(leaf.key)
            if parent.is_root:
                self._maybe_drop_root(parent)
            elif parent.is_evictable_leaf():
                self._queue.push(parent)
        return freed

    # ------------------------------------------------------------------ accounting

    def evictable_size(self) -> int:
        """Tokens cached by unlocked nodes."""
        return self._evictable

    def protected_size(self) -> int:
        """Tokens cached by locked nodes (a lock also covers every ancestor)."""
        return self._protected

    def total_size(self) -> int:
        """All cached tokens: ``evictable_size() + protected_size()``."""
        return self._evictable + self._protected

    def stats(self) -> dict[str, float]:
        """Lookup counters since construction or :meth:`reset`.

        ``queries`` (match_prefix calls), ``queried_tokens`` (their key lengths as passed),
        ``hit_tokens`` (tokens matched) and ``hit_rate`` (hit / queried, 0.0 before any query).
        """
        rate = self._hit_tokens / self._queried_tokens if self._queried_tokens else 0.0
        return {
            "queries": self._queries,
            "queried_tokens": self._queried_tokens,
            "hit_tokens": self._hit_tokens,
            "hit_rate": rate,
        }

    def snapshot(self, max_nodes: int = 64, shown_ids: int = 32) -> dict[str, Any]:
        """The largest branches of every namespace, read-only (``snapshot.snapshot_tree``)."""
        return snapshot_tree(self._roots, max_nodes, shown_ids)

    def reset(self) -> None:
        """Forget every cached prefix, lock and statistic. Nodes handed out before are invalid."""
        self._roots: dict[str | None, TreeNode] = {None: TreeNode.new_root(None)}
        self._queue.clear()
        self._clock = 0
        self._evictable = 0
        self._protected = 0
        self._queries = 0
        self._queried_tokens = 0
        self._hit_tokens = 0

    def check_integrity(self) -> None:
        """Raise ``AssertionError`` describing the first broken invariant.

        Checked: sizes match the locked/unlocked nodes, no empty non-root edge, edges as long as
        their slot lists and page-aligned, children registered under their first token/page,
        parent pointers, ``lock_ref >= 0`` and at least the sum of the children's, every
        evictable leaf queued, and no slot cached twice. O(total tokens): for tests.
        """
        check_tree(self._roots, self.page_size, self._evictable, self._protected, self._queue.live_nodes())

    def pretty(self) -> str:
        """A readable picture of the tree: token count, first tokens and lock count per edge."""
        header = (
            f"RadixCache(page_size={self.page_size}, eviction_policy={self.eviction_policy!r}) "
            f"total={self.total_size()} evictable={self._evictable} protected={self._protected}"
        )
        return render_tree(self._roots, header)

    def __repr__(self) -> str:
        return (
            f"RadixCache(page_size={self.page_size}, eviction_policy={self.eviction_policy!r}, "
            f"total_size={self.total_size()})"
        )

    # ------------------------------------------------------------------ internals

    def _root(self, extra_key: str | None) -> TreeNode:
        if extra_key is not None and not isinstance(extra_key, str):
            raise TypeError(f"extra_key must be a str or None, got {type(extra_key).__name__}")
        root = self._roots.get(extra_key)
        if root is None:
            root = self._roots[extra_key] = TreeNode.new_root(extra_key)
        return root

    def _maybe_drop_root(self, root: TreeNode) -> None:
        # Empty namespaces are forgotten so that many short-lived tenants do not pile up roots.
        if root.extra_key is not None and not root.children and root.lock_ref == 0:
            if self._roots.get(root.extra_key) is root:
                del self._roots[root.extra_key]

    def _child_key(self, key: tuple[int, ...], i: int) -> object:
        return key[i] if self.page_size == 1 else key[i : i + self.page_size]

    def _split(self, node: TreeNode, m: int) -> TreeNode:
        """Cut ``node``'s edge after ``m`` tokens; return the new upper node (see module picture)."""
        parent = node.parent
        upper = TreeNode(node.key[:m], node.value[:m], parent)
        upper.lock_ref = node.lock_ref
        upper.last_access = node.last_access
        upper.last_access_time = node.last_access_time
        upper.hit_count = node.hit_count
        parent.children[child_key_of(upper.key, self.page_size)] = upper
        node.key = node.key[m:]
        node.value = node.value[m:]
        node.parent = upper
        upper.children[child_key_of(node.key, self.page_size)] = node
        return upper

    def _add_leaf(self, parent: TreeNode, key: tuple[int, ...], value: list[int]) -> None:
        leaf = TreeNode(key, value, parent)
        parent.children[child_key_of(key, self.page_size)] = leaf
        self._evictable += len(key)
        self._touch(leaf)
        self._queue.push(leaf)

    def _touch(self, node: TreeNode) -> None:
        self._clock += 1
        node.last_access = self._clock
        node.last_access_time = time.monotonic()
        node.hit_count += 1

    def _path_to_root(self, node: TreeNode) -> list[TreeNode]:
        if not isinstance(node, TreeNode):
            raise TypeError(f"node must be a TreeNode, got {type(node).__name__}")
        path = [node]
        while path[-1].parent is not None:
            path.append(path[-1].parent)
        root = path[-1]
        if not root.is_root or self._roots.get(root.extra_key) is not root:
            raise ValueError(
                f"node {node!r} is not in this cache (evicted, reset, or from another RadixCache)"
            )
        return path


class TreeNode:
    """One edge of the radix tree together with the node it leads to.

    ``key`` holds the edge's token ids (a tuple, never empty except on a root) and ``value`` the
    KV slots caching them (same length). ``children`` maps a child's first token (``page_size ==
    1``) or its first page as a tuple (``page_size > 1``) to the child. ``lock_ref`` counts the
    locks held on this node or any descendant: a node with ``lock_ref > 0`` is never evicted.
    ``last_access`` (a tick of the owning cache's counter) and ``hit_count`` drive LRU and LFU.

    A root has ``parent is None`` and ``is_root`` set; it carries the ``extra_key`` of its
    namespace. An evicted node also has ``parent is None`` (but is no root), which is how
    :meth:`RadixCache.lock` recognises a stale node.
    """

    __slots__ = (
        "key",
        "value",
        "parent",
        "children",
        "lock_ref",
        "last_access",
        "last_access_time",
        "hit_count",
        "heap_stamp",
        "is_root",
        "extra_key",
    )

    def __init__(self, key: tuple[int, ...], value: list[int], parent: TreeNode | None) -> None:
        self.key = key
        self.value = value
        self.parent = parent
        self.children: dict[object, TreeNode] = {}
        self.lock_ref = 0
        self.last_access = 0
        self.last_access_time = 0.0  # time.monotonic() of the last access (the dashboard's age)
        self.hit_count = 0
        # Stamp of this node's one valid entry in the eviction heap (0: none).
        self.heap_stamp = 0
        self.is_root = False
        self.extra_key: str | None = None

    @classmethod
    def new_root(cls, extra_key: str | None) -> TreeNode:
        """An empty root for the namespace ``extra_key``."""
        root = cls((), [], None)
        root.is_root = True
        root.extra_key = extra_key
        return root

    def is_evictable_leaf(self) -> bool:
        """True for an attached, unlocked, childless non-root node."""
        return self.parent is not None and not self.children and self.lock_ref == 0

    def depth_tokens(self) -> int:
        """Number of tokens on the path from the root to this node (inclusive)."""
        total = 0
        node: TreeNode | None = self
        while node is not None:
            total += len(node.key)
            node = node.parent
        return total

    def __repr__(self) -> str:
        kind = "root" if self.is_root else f"{len(self.key)} tokens"
        return f"TreeNode({kind}, lock_ref={self.lock_ref}, children={len(self.children)})"


@dataclass(frozen=True, slots=True)
class MatchResult:
    """What :meth:`RadixCache.match_prefix` found.

    ``value`` holds the KV slots of the longest cached prefix of the query (page-aligned when
    ``page_size > 1``); ``last_node`` is the node whose root path is exactly that prefix (the
    namespace root on a miss). Lock ``last_node`` to keep the prefix from being evicted.
    """

    value: list[int]
    last_node: TreeNode


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
