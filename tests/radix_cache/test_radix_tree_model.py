"""Stateful property test: RadixCache against a naive model of every cached prefix.

The model maps ``(namespace, prefix)`` to the slots caching the prefix's last page (a 1-tuple
with ``page_size == 1``), so a key's cached slots are read off page by page. Insert adds the uncached tail of the page-aligned key,
evict forgets the prefixes whose slots were freed, and locks pin whole prefixes.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule
from radixlm.radix_cache import RadixCache, TreeNode

pytestmark = pytest.mark.unit  # pure Python: no engine, no server, no model forward

NAMESPACES = st.sampled_from([None, "a"])
KEYS = st.lists(st.integers(0, 2), max_size=12)


class RadixCacheMachine(RuleBasedStateMachine):
    page_size = 1

    def __init__(self) -> None:
        super().__init__()
        self.cached: dict[tuple[str | None, tuple[int, ...]], tuple[int, ...]] = {}
        self.locks: list[tuple[TreeNode, str | None, tuple[int, ...]]] = []
        self.history: list[tuple[str | None, tuple[int, ...]]] = []
        self.next_slot = 1

    @initialize(policy=st.sampled_from(["lru", "lfu"]))
    def setup(self, policy: str) -> None:
        self.cache = RadixCache(page_size=self.page_size, eviction_policy=policy)

    # ---------------------------------------------------------------- model helpers

    def model_match(self, ns: str | None, key: tuple[int, ...]) -> list[int]:
        found: list[int] = []
        ps = self.page_size
        for end in range(ps, len(key) + 1, ps):
            page_slots = self.cached.get((ns, key[:end]))
            if page_slots is None:
                break
            found.extend(page_slots)
        return found

    def protected_prefixes(self) -> set[tuple[str | None, tuple[int, ...]]]:
        ps = self.page_size
        return {(ns, p[:end]) for _, ns, p in self.locks for end in range(ps, len(p) + 1, ps)}

    def do_insert(self, ns: str | None, key: tuple[int, ...]) -> None:
        value = list(range(self.next_slot, self.next_slot + len(key)))
        self.next_slot += len(key)
        aligned = len(key) - len(key) % self.page_size
        expected = len(self.model_match(ns, key[:aligned]))
        assert self.cache.insert(list(key), value, extra_key=ns) == expected
        for end in range(expected + self.page_size, aligned + 1, self.page_size):
            self.cached[(ns, key[:end])] = tuple(value[end - self.page_size : end])
        self.history.append((ns, key))

    # ---------------------------------------------------------------- rules

    @rule(ns=NAMESPACES, key=KEYS)
    def insert(self, ns: str | None, key: list[int]) -> None:
        self.do_insert(ns, tuple(key))

    @precondition(lambda self: self.history)
    @rule(data=st.data(), suffix=KEYS)
    def insert_extension(self, data: st.DataObject, suffix: list[int]) -> None:
        ns, base = data.draw(st.sampled_from(self.history))
        cut = data.draw(st.integers(0, len(base)))
        self.do_insert(ns, base[:cut] + tuple(suffix))

    @rule(ns=NAMESPACES, key=KEYS)
    def match(self, ns: str | None, key: list[int]) -> None:
        total = self.cache.total_size()
        result = self.cache.match_prefix(key, extra_key=ns)
        assert result.value == self.model_match(ns, tuple(key))
        assert path_tokens(result.last_node) == tuple(key[: len(result.value)])
        assert self.cache.total_size() == total

    @rule(ns=NAMESPACES, key=KEYS)
    def lock(self, ns: str | None, key: list[int]) -> None:
        result = self.cache.match_prefix(key, extra_key=ns)
        self.cache.lock(result.last_node)
        self.locks.append((result.last_node, ns, tuple(key[: len(result.value)])))

    @precondition(lambda self: self.locks)
    @rule(data=st.data())
    def unlock(self, data: st.DataObject) -> None:
        index = data.draw(st.integers(0, len(self.locks) - 1))
        node, _, _ = self.locks.pop(index)
        self.cache.unlock(node)

    @rule(num_tokens=st.integers(0, 12))
    def evict(self, num_tokens: int) -> None:
        evictable = self.cache.evictable_size()
        freed = self.cache.evict(num_tokens)
        assert len(freed) == len(set(freed)), "a slot was freed twice"
        assert len(freed) >= min(num_tokens, evictable)
        if len(freed) < num_tokens:
            assert len(freed) == evictable and self.cache.evictable_size() == 0
        protected = {s for p in self.protected_prefixes() for s in self.cached[p]}
        assert not protected.intersection(freed), "a locked prefix was evicted"
        freed_set = set(freed)
        gone = [p for p, page in self.cached.items() if freed_set.intersection(page)]
        assert all(freed_set.issuperset(self.cached[p]) for p in gone), "evict freed part of a page"
        assert len(gone) * self.page_size == len(freed), "evict returned slots that were not cached"
        for p in gone:
            del self.cached[p]

    # ---------------------------------------------------------------- invariants

    @invariant()
    def tree_is_consistent(self) -> None:
        if not hasattr(self, "cache"):
            return
        self.cache.check_integrity()
        cache = self.cache
        assert cache.evictable_size() + cache.protected_size() == cache.total_size()
        ps = self.page_size
        assert cache.total_size() == ps * len(self.cached)
        assert cache.protected_size() == ps * len(self.protected_prefixes())
        for ns, prefix in self.cached:
            assert len(prefix) == ps or (ns, prefix[:-ps]) in self.cached, "model lost prefix closure"

    @invariant()
    def tree_holds_exactly_the_model(self) -> None:
        if not hasattr(self, "cache"):
            return
        seen = {}
        ps = self.page_size
        for ns in (None, "a"):
            root = self.cache.match_prefix([], extra_key=ns).last_node
            stack = [(root, ())]
            while stack:
                node, prefix = stack.pop()
                for child in node.children.values():
                    full = prefix + child.key
                    for j in range(0, len(child.value), ps):
                        seen[(ns, full[: len(prefix) + j + ps])] = tuple(child.value[j : j + ps])
                    stack.append((child, full))
        assert seen == self.cached


def path_tokens(node: TreeNode) -> tuple[int, ...]:
    parts = []
    while node is not None:
        parts.append(node.key)
        node = node.parent
    return tuple(t for part in reversed(parts) for t in part)


class PagedRadixCacheMachine(RadixCacheMachine):
    page_size = 4


_SETTINGS = settings(
    max_examples=150,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)

TestRadixCachePageSize1 = RadixCacheMachine.TestCase
TestRadixCachePageSize1.settings = _SETTINGS
TestRadixCachePageSize4 = PagedRadixCacheMachine.TestCase
TestRadixCachePageSize4.settings = _SETTINGS
