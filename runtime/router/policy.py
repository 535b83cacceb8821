"""Which replica serves a request: cache-aware (longest cached prefix) or round-robin.

Cache-aware routing follows SGLang's router: while the replicas' loads are balanced, send a
request to the replica whose approximate radix tree holds the longest prefix of its text, if that
prefix covers at least ``cache_threshold`` of it; otherwise to the replica remembering the least
text (it has the most room to cache a new prefix family). When the loads are out of balance, send it
to the least-loaded replica regardless. No I/O here, so the policy is testable on its own.
"""

from __future__ import annotations

import itertools
import threading
from dataclasses import dataclass

from radixlm.runtime.router.approx_prefix_tree import ApproxPrefixTree

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
