"""The dashboard's pure parts: percentiles from histogram growth, the sampler's rates, tenant labels,
and the token-origin bookkeeping a stream reader relies on."""

from __future__ import annotations

import pytest
from radixlm.runtime.scheduler.req_origins import TokenOrigins
from radixlm.runtime.server.auth import cache_namespace, tenant_id
from radixlm.runtime.server.dashboard.namespaces import namespace_view
from radixlm.runtime.server.dashboard.series import SeriesSampler, window_quantile
from radixlm.runtime.server.metrics import Histogram

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
    stats.update(timers={"prefill_tokens": 500, "decode_tokens": 40}, prompt_tokens=100, cached_tokens=75)
    for _ in range(4):
        ttft.observe(0.05)
        itl.observe(0.05)
    second = sampler.sample()
    assert second["prefill_tps"] > 0 and second["decode_tps"] > 0 and second["hit_rate"] == pytest.approx(0.75)
    assert 0 < second["ttft_p50"] <= 0.1 and 0.01 < second["itl_p99"] <= 0.1
    assert second["running"] == 2 and second["queued"] == 1 and second["kv_usage"] == 0.25
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
