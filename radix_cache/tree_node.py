"""The node of the radix tree and the result of a prefix match."""

from __future__ import annotations

from dataclasses import dataclass


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
