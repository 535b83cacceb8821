"""Unit tests of the router's approximate prefix tree and routing policy (no servers)."""

from __future__ import annotations

import random

import pytest
from radixlm.runtime.router.policy import ApproxPrefixTree, NoHealthyReplica, RoutingConfig, RoutingPolicy
from radixlm.runtime.router.router import routing_text

pytestmark = pytest.mark.unit  # pure Python: no engine, no server, no model forward


def test_tree_match_reports_longest_prefix_per_tenant():
    tree = ApproxPrefixTree()
    tree.insert("system prompt A: be terse. user: hi", "r0")
    tree.insert("system prompt B: be verbose. user: yo", "r1")
    tree.insert("system prompt A: be terse. user: bye", "r1")
    m = tree.match("system prompt A: be terse. user: hi there")
    assert m["r0"] == len("system prompt A: be terse. user: hi")
    assert m["r1"] == len("system prompt A: be terse. user: ")
    assert tree.match("unrelated") == {}


def test_tree_sizes_and_lru_eviction_per_tenant():
    tree = ApproxPrefixTree()
    tree.insert("aaaa1111", "r0")
    tree.insert("aaaa2222", "r0")
    tree.insert("bbbb", "r1")
    assert tree.tenant_size("r0") == 12  # "aaaa" shared + two 4-char leaves
    tree.match("aaaa2222")  # matching does not refresh: only routing (insert) does
    tree.insert("aaaa2222", "r0")  # refresh 2222: 1111 is now least recently used
    tree.evict_tenant("r0", 8)
    assert tree.match("aaaa1111").get("r0") == 4
    assert tree.match("aaaa2222")["r0"] == 8
    assert tree.match("bbbb")["r1"] == 4  # other tenants untouched
    tree.remove_tenant("r0")
    assert tree.tenant_size("r0") == 0 and "r0" not in tree.match("aaaa2222")


def test_tree_matches_naive_model_on_random_strings():
    rng = random.Random(0)
    tree, seen = ApproxPrefixTree(), {"r0": [], "r1": []}
    for _ in range(300):
        text = "".join(rng.choice("ab") for _ in range(rng.randint(1, 12)))
        tenant = rng.choice(["r0", "r1"])
        tree.insert(text, tenant)
        seen[tenant].append(text)
        probe = "".join(rng.choice("ab") for _ in range(rng.randint(1, 12)))
        got = tree.match(probe)
        for t, texts in seen.items():
            want = max((_lcp(probe, s) for s in texts), default=0)
            assert got.get(t, 0) == want


def _lcp(a: str, b: str) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def test_cache_aware_keeps_families_together_and_round_robin_does_not():
    families = [f"family {k} system prompt " * 20 for k in range(2)]
    rng = random.Random(1)
    order = [rng.randrange(2) for _ in range(40)]
    for policy, want_pure in (("cache_aware", True), ("round_robin", False)):
        p = RoutingPolicy(["http://a", "http://b"], RoutingConfig(policy=policy))
        where: dict[int, set[str]] = {0: set(), 1: set()}
        for i, fam in enumerate(order):
            r = p.acquire(families[fam] + f"user turn {i}")
            where[fam].add(r.url)
            p.release(r)
        pure = all(len(urls) == 1 for urls in where.values()) and where[0] != where[1]
        assert pure == want_pure, (policy, where)


def test_load_imbalance_overrides_prefix_and_unhealthy_replicas_are_skipped():
    p = RoutingPolicy(["http://a", "http://b"], RoutingConfig(balance_abs_threshold=2, balance_rel_threshold=1.5))
    first = p.acquire("shared prefix " * 10)
    held = [p.acquire("shared prefix " * 10 + str(i)) for i in range(2)]
    assert all(r.url == first.url for r in held)  # cache affinity while balanced
    other = p.acquire("shared prefix " * 10 + "x")  # 3 in flight vs 0: imbalanced
    assert other.url != first.url
    p.set_health(first.url, False)
    assert p.acquire("shared prefix " * 10).url == other.url
    p.set_health(other.url, False)
    with pytest.raises(NoHealthyReplica):
        p.acquire("anything")


def test_config_and_routing_text_validation():
    with pytest.raises(ValueError, match="policy"):
        RoutingConfig(policy="random")
    with pytest.raises(ValueError, match="distinct"):
        RoutingPolicy(["http://a", "http://a"])
    assert routing_text("/generate", {"text": ["abc", "d"]}) == "abc"
    assert routing_text("/generate", {"input_ids": [1, 2]}) == "1 2"
    assert routing_text("/v1/completions", {"prompt": "p"}) == "p"
    chat = routing_text("/v1/chat/completions", {"messages": [{"role": "system", "content": "S"},
                                                              {"role": "user", "content": "U"}]})
    assert chat == "<system>S<user>U"
    assert routing_text("/generate", ["not", "a", "dict"]) == ""


@pytest.mark.unit
def test_routing_text_of_the_other_apis():
    chat = routing_text("/v1/chat/completions", {"messages": [{"role": "system", "content": "S"},
                                                              {"role": "user", "content": "U"}]})
    # the same conversation routes alike whatever API carries it
    assert routing_text("/v1/messages", {"system": "S", "messages": [{"role": "user", "content": "U"}]}) == chat
    assert routing_text("/v1/responses", {"instructions": "S", "input": [{"role": "user", "content": "U"}]}) == chat
    assert routing_text("/v1/responses", {"input": "U"}) == "<user>U"
    assert routing_text("/api/chat", {"messages": [{"role": "user", "content": "U"}]}) == "<user>U"
    assert routing_text("/api/generate", {"prompt": "p"}) == "p"
