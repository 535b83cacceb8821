"""Greedy outputs do not depend on how the engine schedules: radix cache on/off, chunk sizes
16/64/unlimited, a tiny KV pool that forces retraction, dfs-weight / fcfs policies (tiny Llama,
float32). Every engine ends with the leak check."""

from __future__ import annotations

import pytest

from radixlm import Engine

PARAMS = {"temperature": 0.0, "max_new_tokens": 10}
SHARED = "System: you are a helpful agent with tools for search and math. " * 3


def prompts() -> list[str]:
    return [f"{SHARED}Task {i}: compute {i} plus {i * 3} and explain." for i in range(8)]


@pytest.fixture(scope="module")
def reference(tiny_llama):
    with Engine(tiny_llama, max_total_tokens=8192) as engine:
        outs = engine.generate(prompts(), PARAMS)
        assert sum(o["meta_info"]["cached_tokens"] > 0 for o in outs) >= 7
        engine.check_no_leak()
        return [o["output_ids"] for o in outs]


@pytest.mark.parametrize("server_args", [
    {"disable_radix_cache": True},
    {"chunked_prefill_size": 16},
    {"chunked_prefill_size": 64, "schedule_policy": "dfs-weight"},
    {"chunked_prefill_size": -1, "schedule_policy": "fcfs"},
    {"page_size": 4},
], ids=["no-radix", "chunk16", "chunk64-dfs", "unchunked-fcfs", "page4"])
def test_greedy_outputs_identical(tiny_llama, reference, server_args):
    with Engine(tiny_llama, max_total_tokens=8192, **server_args) as engine:
        outs = engine.generate(prompts(), PARAMS)
        assert [o["output_ids"] for o in outs] == reference
        if server_args.get("disable_radix_cache"):
            assert all(o["meta_info"]["cached_tokens"] == 0 for o in outs)
        engine.check_no_leak()


def test_retraction_under_tiny_pool(tiny_llama, reference):
    # each request needs ~45 + 10 slots; 8 of them do not fit in 200 at once
    with Engine(tiny_llama, max_total_tokens=200, chunked_prefill_size=32) as engine:
        engine.scheduler.new_token_ratio = 0.05  # optimistic admission, so decode runs short
        outs = engine.generate(prompts(), PARAMS)
        assert [o["output_ids"] for o in outs] == reference
        assert engine.get_stats()["num_retractions"] > 0
        # each retraction is reported once, on the request it sent back (SGLang's total_retractions)
        assert sum(o["meta_info"]["total_retractions"] for o in outs) == engine.get_stats()["num_retractions"]
        engine.check_no_leak()
