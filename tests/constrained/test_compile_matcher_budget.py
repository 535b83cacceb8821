"""The matcher automaton stays inside the compile budgets: the worker probes each grammar's
matcher (``compile/worker.py``) and the engine's process builds only grammars under
``matcher_max_mb``; the grammar cache is bounded in bytes and ``flush_cache`` empties it; a build
in this process stops when its last waiter leaves."""

from __future__ import annotations

import os

import pytest
from polling import wait_for
from radixlm.constrained import ConstraintError, GrammarBackend
from radixlm.constrained import backend as backend_module
from radixlm.runtime.sampling_params import SamplingParams

HOOKED = "radixlm.constrained.testing.compile_hooks:slow_marked"
# Forces a 400,000-byte prefix: the engine-side warm-up walk added ~126 MB here before the probe.
PATHOLOGICAL = "x{400000}"


def started(vocab, **kwargs) -> GrammarBackend:
    b = GrammarBackend(vocab, num_workers=1, **kwargs)
    wait_for(lambda: len(b.pool.worker_pids()) == 1)
    return b


def resident_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / (1 << 20)


def test_pathological_regex_fails_in_the_worker_and_is_never_built_here(vocab):
    b = started(vocab)
    try:
        before = resident_mb()
        with pytest.raises(ConstraintError, match=r"regex: the grammar's matcher needs \d+ MB, over the 64 MB "
                                                  r"bound \(--grammar-matcher-max-mb\)"):
            b.submit(SamplingParams(regex=PATHOLOGICAL)).result(timeout=120)
        grown = resident_mb() - before
        assert b.stats["builds"] == 0, b.stats  # no server-side build ran
        assert b.stats["over_matcher_bound"] == 1
        assert grown < 40, f"this process grew {grown:.0f} MB"
        grammar = b.submit(SamplingParams(regex="[a-z]{1,8}")).result(timeout=120)  # a cheap one still builds
        assert grammar.matches("abc") and 0 < grammar.matcher_bytes < 8 << 20
        assert b.stats["builds"] == 1
    finally:
        b.shutdown()


def test_cache_is_bounded_in_bytes_and_flush_empties_it(vocab):
    b = started(vocab, cache_mb=1)
    try:
        sizes = []
        for i in range(24):
            sizes.append(b.submit(SamplingParams(regex=f"k{i}[a-z]{{1,4}}")).result(timeout=120).nbytes())
        info = b.cache_info()
        assert sum(sizes) > 1 << 20  # more than the cache holds
        assert info["bytes"] <= 1 << 20 and 0 < info["entries"] < 24, info
        assert b.stats["evicted"] == 24 - info["entries"]
        assert b.flush_cache() == info["entries"]
        assert b.cache_info() == {"entries": 0, "bytes": 0}
        b.submit(SamplingParams(regex="k0[a-z]{1,4}")).result(timeout=120)
        assert b.stats["misses"] == 25  # compiled again after the flush
    finally:
        b.shutdown()


def test_flush_keeps_compiles_in_flight(vocab):
    b = started(vocab, compile_fn=HOOKED, compile_timeout_s=120.0)
    try:
        first = b.submit(SamplingParams(regex="slow:100"))  # in flight for the whole test
        assert b.flush_cache() == 0 and b.cache_info()["entries"] == 1
        second = b.submit(SamplingParams(regex="slow:100"))  # joins the compile in flight
        assert b.stats["misses"] == 1 and b.stats["hits"] == 1
        assert not first.done() and not second.done()
    finally:
        b.shutdown()


def test_a_disconnect_during_the_server_side_build_stops_it(vocab, monkeypatch):
    """The last waiter leaves while the grammar is being built here: the warm-up never runs."""
    b = started(vocab)
    warmed, futures = [], []
    real_build = backend_module.build_grammar

    def build_then_disconnect(*args, **kwargs):
        grammar = real_build(*args, **kwargs)
        futures[0].cancel()  # the client goes away mid-build
        return grammar

    monkeypatch.setattr(backend_module, "build_grammar", build_then_disconnect)
    monkeypatch.setattr(backend_module, "warm_start", lambda g: warmed.append(g))
    try:
        futures.append(b.submit(SamplingParams(regex="[0-9]{2,5}")))
        wait_for(lambda: b.stats.get("builds_stopped") == 1)  # decided: no warm-up can follow
        assert futures[0].cancelled() and b.stats["cancelled"] == 1
        assert warmed == []
        assert b.cache_info()["entries"] == 0  # forgotten: the next request compiles afresh
    finally:
        b.shutdown()
