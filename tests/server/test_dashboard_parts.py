"""The dashboard's pure parts: percentiles from histogram growth, the sampler's rates, tenant labels,
and the token-origin bookkeeping a stream reader relies on."""

from __future__ import annotations

import pytest
from radixlm.runtime.scheduler.req import TokenOrigins
from radixlm.runtime.server.dashboard.feed import SeriesSampler, window_quantile
from radixlm.runtime.server.dashboard.views import namespace_view
from radixlm.runtime.server.metrics import Histogram
from radixlm.runtime.server.transport.access import tenant_id
from radixlm.runtime.server.transport.state import cache_namespace

pytestmark = pytest.mark.unit


def test_window_quantile_interpolates_inside_the_bucket():
    bounds = (0.1, 0.2, 0.4)
    assert window_quantile(bounds, [0, 0, 0, 0], 0.5) is None
    assert window_quantile(bounds, [10, 0, 0, 0], 0.5) == pytest.approx(0.05)
    assert window_quantile(bounds, [0, 4, 4, 0], 0.5) == pytest.approx(0.2)
    assert window_quantile(bounds, [0, 4, 4, 0], 0.75) == pytest.approx(0.3)
    assert window_quantile(bounds, [0, 0, 0, 3], 0.99) == 0.4  # +Inf: its lower bound, never more


def test_sampler_rates_and_windowed_percentiles():
    stats = {"timers": {"prefill_tokens": 0, "decode_tokens": 0}, "prompt_tokens": 0, "cached_tokens": 0,
             "num_running_reqs": 2, "num_queued_reqs": 1, "kv_usage": 0.25}
    ttft, itl = Histogram((0.1, 1.0)), Histogram((0.01, 0.1))
    sampler = SeriesSampler(lambda: stats, ttft, itl)
    first = sampler.sample()
    assert first["prefill_tps"] == 0 and first["hit_rate"] is None and first["ttft_p50"] is None
    stats.update(timers={"prefill_tokens": 500, "decode_tokens": 40}, prompt_tokens=100, cached_tokens=75,
                 speculative={"spec_verify_steps": 4, "spec_accepted_tokens": 10})
    for _ in range(4):
        ttft.observe(0.05)
        itl.observe(0.05)
    second = sampler.sample()
    assert second["prefill_tps"] > 0 and second["decode_tps"] > 0 and second["hit_rate"] == pytest.approx(0.75)
    assert 0 < second["ttft_p50"] <= 0.1 and 0.01 < second["itl_p99"] <= 0.1
    assert second["running"] == 2 and second["queued"] == 1 and second["kv_usage"] == 0.25
    assert first["spec_kept"] is None and second["spec_kept"] == pytest.approx(2.5)  # drafts kept per verify step
    assert sampler.since(0) == [first, second] and sampler.since(2) == []


def test_namespace_labels_name_tenant_and_salt_never_the_key():
    a = tenant_id("secret-a")
    assert namespace_view(None) == {"tenant": None, "salt": None, "label": "shared"}
    view = namespace_view(cache_namespace(a, '{"cache_salt": "s1"}'))
    assert view["tenant"] == a and view["salt"] == "cache_salt=s1" and view["label"].startswith("tenant ")
    assert "secret" not in view["label"]
    assert namespace_view(a)["salt"] is None
    assert namespace_view(cache_namespace(None, None, "per-request"))["salt"] == "per-request"
    assert namespace_view(cache_namespace(tenant_id("b"), None))["label"] != namespace_view(a)["label"]


def test_token_origins_hand_a_stream_reader_what_came_since_its_last_read():
    origins = TokenOrigins()
    for code in ("masked", "masked", "masked"):
        origins.append(code)
    assert origins.take() == 0
    origins.append("forced")  # a grammar draft the model accepted
    origins.append("drafted")
    assert origins.codes == ["masked", "masked", "masked", "forced", "drafted"]
    assert origins.take() == 3 and origins.take() == 5
    origins.append("closed")
    assert origins.codes[-1] == "closed" and origins.take() == 5


def _feed(max_subscribers: int):
    import asyncio

    from radixlm.runtime.server.dashboard.feed import DashboardFeed

    stats = {"timers": {}, "num_running_reqs": 0}
    sampler = SeriesSampler(lambda: stats, Histogram((0.1,)), Histogram((0.1,)), period_s=3600)  # ticks: step()
    calls: list[int] = []
    seq = {"n": 0}

    async def inspect(max_nodes: int, events_since: int, requests_since: int) -> dict:
        calls.append(max_nodes)
        seq["n"] += 1
        await asyncio.sleep(0)
        return {"tree": None, "grammars": [], "eviction_seq": 0, "evictions": [], "request_seq": seq["n"],
                "requests": [{"seq": i} for i in range(1, seq["n"] + 1)]}

    return DashboardFeed(sampler, inspect, lambda: False, max_subscribers=max_subscribers), sampler, calls


def test_dashboard_feed_computes_once_for_every_subscriber_and_caps_them():
    """500 subscribers: the first events are the history and a whole inspection, computed once; each
    broadcast inspection is computed once per tick and sent as the same bytes to all; over the cap a
    subscriber is refused."""
    import asyncio
    import json

    from radixlm.runtime.server.dashboard.feed import INSPECT_EVERY, FeedFull

    async def scenario():
        feed, sampler, calls = _feed(max_subscribers=500)
        sampler.sample()
        subs = await asyncio.gather(*(feed.subscribe(64) for _ in range(500)))
        assert len(calls) == 1  # 500 first paints, one inspection
        firsts = {tuple(first) for _, first in subs}
        assert len(firsts) == 1  # the same encoded events for everyone
        series, inspect = (json.loads(b[len(b"data: "):]) for b in next(iter(firsts)))
        assert series["type"] == "series" and len(series["samples"]) == 1
        assert inspect["type"] == "inspect" and inspect["requests"] == [{"seq": 1}]
        with pytest.raises(FeedFull, match="500 dashboard streams"):
            await feed.subscribe(64)
        sampler.sample()
        await feed.step()  # tick 1: the new sample
        got = [sub.queue.get_nowait() for sub, _ in subs]
        assert len(set(got)) == 1 and json.loads(got[0][6:])["type"] == "samples"
        await feed.step()  # tick 2: an inspection
        ticks = [sub.queue.get_nowait() for sub, _ in subs]
        inspected = json.loads(ticks[0][6:])
        assert len(set(ticks)) == 1 and inspected["type"] == "inspect"
        assert [r["seq"] for r in inspected["requests"]] == [2]  # only what is new since the first paint
        assert len(calls) == 2 and INSPECT_EVERY == 2  # one per inspection tick, never per subscriber
        for sub, _ in subs[:10]:
            feed.unsubscribe(sub)
        assert (await feed.subscribe(8))[0].max_nodes == 8
        await feed.stop()
        assert all(sub.queue.get_nowait() is None for sub, _ in subs[10:])  # every stream ends

    asyncio.run(scenario())


def test_dashboard_feed_drops_a_reader_that_stopped_reading():
    import asyncio

    from radixlm.runtime.server.dashboard.feed import QUEUE_EVENTS

    async def scenario():
        feed, sampler, _ = _feed(max_subscribers=4)
        stuck, _ = await feed.subscribe(64)
        for _ in range(QUEUE_EVENTS + 2):
            feed._broadcast(lambda sub: b"data: {}\n\n")
        assert stuck not in feed.subscribers
        drained = [stuck.queue.get_nowait() for _ in range(stuck.queue.qsize())]
        assert drained[-1] is None  # its stream ends
        await feed.stop()

    asyncio.run(scenario())
