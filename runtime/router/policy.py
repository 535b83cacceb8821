"""Which replica serves a request: cache-aware (longest cached prefix) or round-robin.

Cache-aware routing follows SGLang's router: while the replicas' loads are balanced, send a
request to the replica whose approximate radix tree holds the longest prefix of its text, if that
prefix covers at least ``cache_threshold`` of it; otherwise to the replica remembering the least
text (it has the most room to cache a new prefix family). When the loads are out of balance, send it
to the least-loaded replica regardless. No I/O here, so the policy is testable on its own.

The router cannot see the replicas' real radix caches, so it keeps its own picture of what each
replica has seen (:class:`ApproxPrefixTree`): one character-level radix tree whose nodes remember,
per replica ("tenant"), when that replica last served text through the node. ``match`` answers
"which replica has the longest prefix of this text", ``insert`` records that a replica is about to
serve it, and ``evict_tenant`` caps how much text is remembered per replica (least recently used
first), which mirrors the replicas' own LRU eviction only approximately, hence the name.
"""

from __future__ import annotations

import heapq
import itertools
import threading
from dataclasses import dataclass, field

from radixlm.radix_cache.radix_cache import common_prefix_len

POLICIES = ("cache_aware", "round_robin")


@dataclass
class ReplicaState:
    """What the router knows of one replica."""

    url: str
    healthy: bool = True
    in_flight: int = 0
    routed: int = 0
    failures: int = 0


@dataclass(frozen=True)
class RoutingConfig:
    """Knobs of the routing policy."""

    policy: str = "cache_aware"
    cache_threshold: float = 0.5
    balance_abs_threshold: int = 16
    balance_rel_threshold: float = 1.5
    max_tree_chars_per_replica: int = 4_000_000

    def __post_init__(self) -> None:
        if self.policy not in POLICIES:
            raise ValueError(f"policy must be one of {', '.join(POLICIES)}, got {self.policy!r}")
        if not 0.0 <= self.cache_threshold <= 1.0:
            raise ValueError(f"cache_threshold must be in [0, 1], got {self.cache_threshold}")
        if self.balance_abs_threshold < 0 or self.balance_rel_threshold < 1.0:
            raise ValueError("balance_abs_threshold must be >= 0 and balance_rel_threshold >= 1")


class NoHealthyReplica(RuntimeError):
    """Every replica is out of rotation."""


class RoutingPolicy:
    """Thread-safe choice of a replica per request, with in-flight accounting."""

    def __init__(self, urls: list[str], config: RoutingConfig | None = None) -> None:
        if not urls:
            raise ValueError("at least one replica URL is required")
        if len(set(urls)) != len(urls):
            raise ValueError("replica URLs must be distinct")
        self.config = config or RoutingConfig()
        self.replicas = {u: ReplicaState(u) for u in urls}
        self._tree = ApproxPrefixTree()
        self._rr = itertools.cycle(urls)
        self._lock = threading.Lock()

    def acquire(self, text: str) -> ReplicaState:
        """Choose the replica for ``text`` and count the request as in flight there."""
        with self._lock:
            healthy = [r for r in self.replicas.values() if r.healthy]
            if not healthy:
                raise NoHealthyReplica("no healthy replica is available")
            chosen = self._choose(text, healthy)
            chosen.in_flight += 1
            chosen.routed += 1
            if self.config.policy == "cache_aware" and text:
                self._tree.insert(text, chosen.url)
                self._tree.evict_tenant(chosen.url, self.config.max_tree_chars_per_replica)
            return chosen

    def release(self, replica: ReplicaState) -> None:
        """The request sent to ``replica`` finished (successfully or not)."""
        with self._lock:
            replica.in_flight -= 1

    def set_health(self, url: str, healthy: bool) -> None:
        """Take a replica out of rotation (forgetting what it cached) or put it back."""
        with self._lock:
            replica = self.replicas[url]
            if replica.healthy and not healthy:
                self._tree.remove_tenant(url)
                replica.failures += 1
            replica.healthy = healthy

    def forget(self, url: str | None = None) -> None:
        """Forget the cached-prefix picture of one replica (or all), e.g. after a cache flush."""
        with self._lock:
            for u in [url] if url else list(self.replicas):
                self._tree.remove_tenant(u)

    def _choose(self, text: str, healthy: list[ReplicaState]) -> ReplicaState:
        if self.config.policy == "round_robin":
            while True:
                replica = self.replicas[next(self._rr)]
                if replica.healthy:
                    return replica
        loads = [r.in_flight for r in healthy]
        least = min(healthy, key=lambda r: (r.in_flight, r.routed))
        imbalanced = (max(loads) - min(loads) > self.config.balance_abs_threshold
                      and max(loads) > min(loads) * self.config.balance_rel_threshold)
        if imbalanced or not text:
            return least
        matches = self._tree.match(text)
        best = max(healthy, key=lambda r: (matches.get(r.url, 0), -r.in_flight))
        if matches.get(best.url, 0) >= self.config.cache_threshold * len(text):
            return best
        return min(healthy, key=lambda r: (self._tree.tenant_size(r.url), r.in_flight))


# ---- the approximate prefix tree -----------------------------------------------------------------


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
