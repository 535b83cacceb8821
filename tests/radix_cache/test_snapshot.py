"""The dashboard's read-only views of the radix tree: largest branches, namespaces, evictions."""

import pytest
from radixlm.radix_cache import RadixCache

pytestmark = pytest.mark.unit


def _filled() -> RadixCache:
    cache = RadixCache()
    shared = list(range(100, 140))  # 40 shared tokens, then three different tails
    slot = iter(range(1, 10_000))
    for tail in ([1, 2, 3], [4, 5], [6]):
        key = shared + tail
        cache.insert(key, [next(slot) for _ in key])
    cache.insert([7, 8, 9], [next(slot) for _ in range(3)], extra_key="tenant-b")
    return cache


def test_snapshot_shows_the_shared_prefix_as_the_heaviest_node() -> None:
    snap = _filled().snapshot(max_nodes=8)
    spaces = {ns["namespace"]: ns for ns in snap["namespaces"]}
    assert set(spaces) == {None, "tenant-b"}
    top = spaces[None]["nodes"][0]
    assert top["parent"] is None and top["tokens"] == 40 and top["subtree_tokens"] == 46
    assert top["children"] == 3 and top["token_ids"][:3] == [100, 101, 102]
    assert top["hits"] >= 3 and top["locks"] == 0 and top["age_s"] >= 0
    kids = [n for n in spaces[None]["nodes"] if n["parent"] == top["id"]]
    assert sorted(n["tokens"] for n in kids) == [1, 2, 3] and all(n["depth"] == 40 for n in kids)
    assert spaces["tenant-b"]["tokens"] == 3 and spaces[None]["tokens"] == 46
    assert snap["nodes_total"] == 5 and snap["nodes_shown"] == 5 and not snap["truncated"]


def test_every_namespace_gets_its_heaviest_branch_before_the_rest() -> None:
    snap = _filled().snapshot(max_nodes=2)
    spaces = {ns["namespace"]: [n["tokens"] for n in ns["nodes"]] for ns in snap["namespaces"]}
    assert spaces == {None: [40], "tenant-b": [3]}
    assert snap["nodes_shown"] == 2


def test_shown_nodes_are_connected_and_bounded() -> None:
    cache = RadixCache()
    for i in range(50):
        key = [i, 1000 + i, 2000 + i]
        cache.insert(key, [3 * i + 1, 3 * i + 2, 3 * i + 3])
    snap = cache.snapshot(max_nodes=10, shown_ids=2)
    nodes = snap["namespaces"][0]["nodes"]
    assert len(nodes) == 10 and all(len(n["token_ids"]) == 2 for n in nodes)
    ids = {n["id"] for n in nodes}
    assert all(n["parent"] is None or n["parent"] in ids for n in nodes)
    with pytest.raises(ValueError):
        cache.snapshot(max_nodes=0)


def test_evictions_are_recorded_with_namespace_and_sequence() -> None:
    cache = _filled()
    assert cache.evictions.since(0) == []
    freed = cache.evict(2)
    assert freed
    events = cache.evictions.since(0)
    assert events and all(e["namespace"] in (None, "tenant-b") for e in events)
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    assert sum(e["tokens"] for e in events) == len(freed)
    assert cache.evictions.since(events[-1]["seq"]) == []
    cache.evict(10_000)
    later = cache.evictions.since(events[-1]["seq"])
    assert {e["namespace"] for e in later} >= {"tenant-b"}
    cache.check_integrity()
