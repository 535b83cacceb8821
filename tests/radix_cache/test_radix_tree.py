"""Unit tests for the radix tree: splitting, eviction order, namespaces, locks, pages."""

from __future__ import annotations

import subprocess
import sys

import pytest
from radixlm.radix_cache import MatchResult, RadixCache, TreeNode

pytestmark = pytest.mark.unit  # pure Python: no engine, no server, no model forward


def slots(start: int, n: int) -> list[int]:
    return list(range(start, start + n))


def test_insert_returns_cached_prefix_length_and_keeps_tree_slots():
    cache = RadixCache()
    assert cache.insert([1, 2, 3, 4], [10, 11, 12, 13]) == 0
    assert cache.insert([1, 2, 3, 4], [20, 21, 22, 23]) == 4
    assert cache.insert([1, 2, 9], [30, 31, 32]) == 2
    assert cache.insert((1, 2, 3, 4, 5, 6), [40, 41, 42, 43, 44, 45]) == 4
    assert cache.insert([], []) == 0
    # The tree keeps the first slots it saw for each prefix; the caller frees its duplicates.
    assert cache.match_prefix([1, 2, 3, 4, 5, 6]).value == [10, 11, 12, 13, 44, 45]
    assert cache.match_prefix([1, 2, 9, 9]).value == [10, 11, 32]
    assert cache.total_size() == 7
    cache.check_integrity()


def test_match_splits_node_and_keeps_contents():
    cache = RadixCache()
    cache.insert([1, 2, 3, 4, 5], [10, 11, 12, 13, 14])
    before = cache.total_size()
    result = cache.match_prefix([1, 2, 3, 7, 8])
    assert isinstance(result, MatchResult)
    assert result.value == [10, 11, 12]
    node = result.last_node
    assert isinstance(node, TreeNode)
    assert node.key == (1, 2, 3) and node.value == [10, 11, 12]
    assert [c.key for c in node.children.values()] == [(4, 5)]
    assert cache.total_size() == before
    assert cache.match_prefix([1, 2, 3, 4, 5, 6]).value == [10, 11, 12, 13, 14]
    cache.check_integrity()


def test_insert_splits_node_into_three_edges():
    cache = RadixCache()
    cache.insert([1, 2, 3, 4, 5], slots(0, 5))
    assert cache.insert([1, 2, 3, 7], [100, 101, 102, 103]) == 3
    text = cache.pretty()
    assert "[3] 1 2 3" in text and "[2] 4 5" in text and "[1] 7" in text
    assert cache.match_prefix([1, 2, 3, 7]).value == [0, 1, 2, 103]
    cache.check_integrity()


def test_split_keeps_lock_on_original_node():
    cache = RadixCache()
    cache.insert([1, 2, 3, 4], slots(0, 4))
    full = cache.match_prefix([1, 2, 3, 4]).last_node
    cache.lock(full)
    cache.insert([1, 2, 5], slots(10, 3))  # splits the locked edge
    assert cache.protected_size() == 4
    assert sorted(cache.evict(100)) == [12]
    cache.unlock(full)
    assert sorted(cache.evict(100)) == [0, 1, 2, 3]
    cache.check_integrity()


def test_match_is_longest_prefix_and_counts_stats():
    cache = RadixCache()
    cache.insert([5, 6, 7], [1, 2, 3])
    assert cache.match_prefix([5, 6, 7, 8]).value == [1, 2, 3]
    assert cache.match_prefix([6]).value == []
    assert cache.match_prefix([]).value == []
    stats = cache.stats()
    assert stats == {"queries": 3, "queried_tokens": 5, "hit_tokens": 3, "hit_rate": 3 / 5}


def test_lru_evicts_least_recently_used_leaf_first():
    cache = RadixCache(eviction_policy="lru")
    cache.insert([1, 1], [10, 11])
    cache.insert([2, 2], [20, 21])
    cache.insert([3, 3], [30, 31])
    cache.match_prefix([1, 1])  # [2,2] is now the oldest
    assert cache.evict(1) == [20, 21]
    assert cache.evict(1) == [30, 31]
    assert cache.evict(1) == [10, 11]
    assert cache.evict(1) == []


def test_lru_parent_becomes_candidate_after_last_child():
    cache = RadixCache()
    cache.insert([1, 2, 3], [10, 11, 12])
    cache.insert([1, 2, 4], [10, 11, 14])
    cache.insert([9], [90])
    cache.match_prefix([9])
    # Leaves [3] and [4] go first, then their parent [1 2] (older than [9]), then [9].
    assert cache.evict(1) == [12]
    assert cache.evict(1) == [14]
    assert cache.evict(1) == [10, 11]
    assert cache.evict(1) == [90]
    cache.check_integrity()


def test_lfu_evicts_fewest_hits_then_oldest():
    cache = RadixCache(eviction_policy="lfu")
    cache.insert([1], [10])
    cache.insert([2], [20])
    cache.insert([3], [30])
    for _ in range(3):
        cache.match_prefix([1])
    cache.match_prefix([3])  # hits: [1]=4, [3]=2, [2]=1
    assert cache.evict(1) == [20]
    assert cache.evict(1) == [30]
    assert cache.evict(1) == [10]


def test_evict_frees_at_least_requested_and_each_slot_once():
    cache = RadixCache()
    cache.insert(list(range(10)), slots(100, 10))
    cache.insert([0, 1, 2, 50, 51], [100, 101, 102, 150, 151])
    cache.insert([7, 7, 7], slots(200, 3))
    freed = cache.evict(3)
    assert len(freed) >= 3
    freed += cache.evict(1000)
    assert sorted(freed) == sorted(slots(100, 10) + [150, 151] + slots(200, 3))
    assert len(set(freed)) == len(freed)
    assert cache.total_size() == 0 and cache.evict(5) == []
    cache.check_integrity()


def test_locked_prefix_survives_eviction():
    cache = RadixCache()
    cache.insert([1, 2, 3, 4], slots(0, 4))
    cache.insert([1, 2, 8], [0, 1, 8])
    node = cache.match_prefix([1, 2]).last_node
    cache.lock(node)
    assert cache.protected_size() == 2 and cache.evictable_size() == 3
    assert sorted(cache.evict(100)) == [2, 3, 8]
    assert cache.match_prefix([1, 2, 3]).value == [0, 1]
    cache.unlock(node)
    assert cache.evictable_size() == 2 and cache.protected_size() == 0
    assert cache.evict(1) == [0, 1]


def test_nested_locks_count_references():
    cache = RadixCache()
    cache.insert([1, 2, 3], slots(0, 3))
    node = cache.match_prefix([1, 2, 3]).last_node
    cache.lock(node)
    cache.lock(node)
    cache.unlock(node)
    assert cache.evict(10) == []
    cache.unlock(node)
    assert cache.evict(10) == [0, 1, 2]


def test_over_unlock_raises():
    cache = RadixCache()
    cache.insert([1, 2], [5, 6])
    node = cache.match_prefix([1, 2]).last_node
    with pytest.raises(RuntimeError, match="lock_ref 0"):
        cache.unlock(node)
    cache.lock(node)
    cache.unlock(node)
    with pytest.raises(RuntimeError, match="unlock without a matching lock"):
        cache.unlock(node)
    cache.check_integrity()


def test_lock_of_evicted_or_foreign_node_raises():
    cache = RadixCache()
    cache.insert([1, 2], [5, 6])
    node = cache.match_prefix([1, 2]).last_node
    cache.evict(2)
    with pytest.raises(ValueError, match="not in this cache"):
        cache.lock(node)
    other = RadixCache()
    other.insert([1], [1])
    with pytest.raises(ValueError, match="not in this cache"):
        cache.lock(other.match_prefix([1]).last_node)
    stale = cache.match_prefix([]).last_node
    cache.reset()
    with pytest.raises(ValueError, match="not in this cache"):
        cache.unlock(stale)
    with pytest.raises(TypeError, match="node must be a TreeNode"):
        cache.lock("node")


def test_namespaces_never_share_nodes():
    cache = RadixCache()
    cache.insert([1, 2, 3], [10, 11, 12], extra_key="tenant-a")
    assert cache.match_prefix([1, 2, 3]).value == []
    assert cache.match_prefix([1, 2, 3], extra_key="tenant-b").value == []
    assert cache.insert([1, 2, 3], [20, 21, 22], extra_key="tenant-b") == 0
    assert cache.insert([1, 2, 3], [30, 31, 32]) == 0
    assert cache.match_prefix([1, 2, 3], extra_key="tenant-a").value == [10, 11, 12]
    assert cache.match_prefix([1, 2, 3], extra_key="tenant-b").value == [20, 21, 22]
    assert cache.match_prefix([1, 2, 3]).value == [30, 31, 32]
    assert cache.total_size() == 9
    a = cache.match_prefix([1, 2, 3], extra_key="tenant-a").last_node
    cache.lock(a)
    assert sorted(cache.evict(100)) == [20, 21, 22, 30, 31, 32]
    assert cache.match_prefix([1, 2, 3], extra_key="tenant-a").value == [10, 11, 12]
    cache.unlock(a)
    cache.check_integrity()
    with pytest.raises(TypeError, match="extra_key"):
        cache.match_prefix([1], extra_key=7)


def test_page_alignment():
    cache = RadixCache(page_size=4)
    # Only the two whole pages are cached; the last 2 slots stay the caller's.
    assert cache.insert(list(range(10)), slots(100, 10)) == 0
    assert cache.total_size() == 8
    assert cache.match_prefix(list(range(10))).value == slots(100, 8)
    assert cache.match_prefix(list(range(7))).value == slots(100, 4)
    assert cache.match_prefix([0, 1, 2]).value == []
    # A mismatch inside the second page matches only the first page.
    assert cache.match_prefix([0, 1, 2, 3, 4, 5, 99, 7]).value == slots(100, 4)
    assert cache.insert([0, 1, 2, 3, 4, 5, 99, 7, 1], slots(200, 9)) == 4
    assert cache.match_prefix([0, 1, 2, 3, 4, 5, 99, 7]).value == slots(100, 4) + slots(204, 4)
    assert cache.insert([0, 1, 2], [1, 2, 3]) == 0 and cache.total_size() == 12
    cache.check_integrity()
    assert sorted(cache.evict(1)) in (slots(104, 4), slots(204, 4))


def test_sizes_and_reset():
    cache = RadixCache()
    cache.insert([1, 2, 3], slots(0, 3))
    cache.insert([1, 2, 4, 5], [0, 1, 7, 8])
    cache.lock(cache.match_prefix([1, 2, 4]).last_node)
    assert (cache.evictable_size(), cache.protected_size(), cache.total_size()) == (2, 3, 5)
    cache.reset()
    assert (cache.evictable_size(), cache.protected_size(), cache.total_size()) == (0, 0, 0)
    assert cache.stats()["queries"] == 0
    assert cache.match_prefix([1, 2]).value == []
    cache.check_integrity()


def test_bad_inputs_raise_precise_errors():
    with pytest.raises(ValueError, match="page_size"):
        RadixCache(page_size=0)
    with pytest.raises(ValueError, match="eviction_policy"):
        RadixCache(eviction_policy="fifo")
    cache = RadixCache()
    with pytest.raises(ValueError, match="value has 2 slots but key has 3"):
        cache.insert([1, 2, 3], [1, 2])
    with pytest.raises(TypeError, match="key must be a sequence"):
        cache.match_prefix("abc")
    with pytest.raises(ValueError, match="num_tokens"):
        cache.evict(-1)


def test_check_integrity_reports_first_broken_invariant():
    cache = RadixCache()
    cache.insert([1, 2, 3], slots(0, 3))
    node = cache.match_prefix([1, 2, 3]).last_node
    node.lock_ref = -1
    with pytest.raises(AssertionError, match="negative lock_ref"):
        cache.check_integrity()
    node.lock_ref = 0
    node.value = [0, 1]
    with pytest.raises(AssertionError, match="3 tokens but 2 slots"):
        cache.check_integrity()
    node.value = [0, 1, 2]
    cache._evictable += 1
    with pytest.raises(AssertionError, match="evictable_size"):
        cache.check_integrity()


def test_pretty_shows_counts_and_locks():
    cache = RadixCache()
    cache.insert(list(range(20)), slots(0, 20))
    cache.lock(cache.match_prefix(list(range(20))).last_node)
    text = cache.pretty()
    assert "[20] 0 1 2 3 4 5 6 7 ..." in text and "lock_ref=1" in text and "protected=20" in text


def test_import_does_not_pull_in_torch():
    code = "import sys, radixlm.radix_cache; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True)
