"""An approximate, multi-tenant radix tree over request text, for cache-aware routing.

The router cannot see the replicas' real radix caches, so it keeps its own picture of what each
replica has seen: one character-level radix tree whose nodes remember, per replica ("tenant"),
when that replica last served text through the node. ``match`` answers "which replica has the
longest prefix of this text", ``insert`` records that a replica is about to serve it, and
``evict_tenant`` caps how much text is remembered per replica (least recently used first), which
mirrors the replicas' own LRU eviction only approximately — hence the name.

No torch, no I/O; the router calls it under its own lock.
"""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass, field

from radixlm.radix_cache.radix_cache import common_prefix_len


@dataclass
class _Node:
    edge: str = ""
    parent: _Node | None = None
    children: dict[str, _Node] = field(default_factory=dict)
    tenants: dict[str, int] = field(default_factory=dict)  # tenant -> last access tick


class ApproxPrefixTree:
    """Character radix tree recording which tenants (replicas) have served which text."""

    def __init__(self) -> None:
        self._root = _Node()
        self._tick = itertools.count(1)
        self._chars: dict[str, int] = {}  # tenant -> characters attributed to it

    def tenant_size(self, tenant: str) -> int:
        """How many characters of text are remembered for ``tenant``."""
        return self._chars.get(tenant, 0)

    def insert(self, text: str, tenant: str) -> None:
        """Record that ``tenant`` serves ``text`` (and so caches all its prefixes)."""
        tick = next(self._tick)
        node, i = self._root, 0
        while i < len(text):
            child = node.children.get(text[i])
            if child is None:
                child = _Node(edge=text[i:], parent=node)
                node.children[text[i]] = child
            else:
                common = common_prefix_len(child.edge, text, i)
                if common < len(child.edge):
                    child = self._split(child, common)
            node = child
            i += len(node.edge)
            if tenant not in node.tenants:
                self._chars[tenant] = self._chars.get(tenant, 0) + len(node.edge)
            node.tenants[tenant] = tick

    def match(self, text: str) -> dict[str, int]:
        """Per tenant, the length of the longest prefix of ``text`` that tenant has served."""
        best: dict[str, int] = {}
        node, i = self._root, 0
        while i < len(text):
            child = node.children.get(text[i])
            if child is None:
                break
            common = common_prefix_len(child.edge, text, i)
            for tenant in child.tenants:
                best[tenant] = i + common
            if common < len(child.edge):
                break
            node, i = child, i + common
        return best

    def remove_tenant(self, tenant: str) -> None:
        """Forget everything ``tenant`` served (a replica left the rotation or flushed its cache)."""
        stack = [self._root]
        while stack:
            node = stack.pop()
            node.tenants.pop(tenant, None)
            stack.extend(node.children.values())
        self._prune(self._root)
        self._chars.pop(tenant, None)

    def evict_tenant(self, tenant: str, max_chars: int) -> None:
        """Forget ``tenant``'s least recently used leaves until at most ``max_chars`` remain."""
        if self.tenant_size(tenant) <= max_chars:
            return
        heap = [(n.tenants[tenant], id(n), n) for n in self._tenant_leaves(tenant)]
        heapq.heapify(heap)
        while heap and self._chars[tenant] > max_chars:
            _, _, node = heapq.heappop(heap)
            del node.tenants[tenant]
            self._chars[tenant] -= len(node.edge)
            parent = node.parent
            if not node.tenants and not node.children and parent is not None:
                del parent.children[node.edge[0]]
            if parent is not None and parent is not self._root and self._is_tenant_leaf(parent, tenant):
                heapq.heappush(heap, (parent.tenants[tenant], id(parent), parent))

    def _split(self, child: _Node, at: int) -> _Node:
        # parent --"abcd"--> child   becomes   parent --"ab"--> mid --"cd"--> child
        parent = child.parent
        assert parent is not None
        mid = _Node(edge=child.edge[:at], parent=parent, tenants=dict(child.tenants))
        parent.children[mid.edge[0]] = mid
        child.edge = child.edge[at:]
        child.parent = mid
        mid.children[child.edge[0]] = child
        return mid

    def _tenant_leaves(self, tenant: str) -> list[_Node]:
        leaves, stack = [], [self._root]
        while stack:
            node = stack.pop()
            stack.extend(node.children.values())
            if node is not self._root and self._is_tenant_leaf(node, tenant):
                leaves.append(node)
        return leaves

    @staticmethod
    def _is_tenant_leaf(node: _Node, tenant: str) -> bool:
        return tenant in node.tenants and not any(tenant in c.tenants for c in node.children.values())

    def _prune(self, node: _Node) -> None:
        for key, child in list(node.children.items()):
            self._prune(child)
            if not child.tenants and not child.children:
                del node.children[key]
