"""The llama.cpp parallel-sequence adapter's token layout and sweep, without llama.cpp installed.

``benchmarks/suites/parallel_plan.py`` decides positions, sequence ids and logits rows; a fake
decoder here replays its plan the way llama.cpp evaluates a batch (causal per sequence, shared
prefix cells visible to every sequence it was copied to) and checks each sequence sees exactly its
own prompt. ``sweep_parallel`` keeps the fastest setting.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

from suites.measure import sweep_parallel  # noqa: E402
from suites.parallel_plan import (  # noqa: E402
    Entry,
    SeqWork,
    best_setting,
    common_prefix_len,
    decode_step,
    mean_logprob,
    pack,
    shared_prefix_len,
    waves,
)


def test_common_and_shared_prefix():
    prompts = [[1, 2, 3, 4], [1, 2, 3, 5, 6], [1, 2, 3, 4, 7]]
    assert common_prefix_len(prompts) == 3
    assert shared_prefix_len(prompts) == 3
    # every sequence keeps one token of its own, for the logits of its first new token
    assert shared_prefix_len([[1, 2, 3], [1, 2, 3, 4]]) == 2
    assert shared_prefix_len([[1, 2, 3, 4], [1, 2, 3, 4]], limit=1) == 1
    assert shared_prefix_len([[1, 2, 3]]) == 0  # one prompt: nothing to share
    assert common_prefix_len([]) == 0 and shared_prefix_len([[9, 1], [8, 1]]) == 0


def test_waves_cover_every_request_once():
    assert [list(w) for w in waves(10, 4)] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert [list(w) for w in waves(3, 64)] == [[0, 1, 2]]
    with pytest.raises(ValueError, match="n_parallel"):
        waves(3, 0)


def test_pack_splits_at_n_batch_and_keeps_logits_order():
    work = [SeqWork(0, [10, 11, 12], 5, (2,)), SeqWork(1, [20, 21], 5, (0, 1))]
    calls = pack(work, n_batch=4)
    assert [len(entries) for entries, _ in calls] == [4, 1]
    first, out1 = calls[0]
    assert first[:3] == [Entry(10, 5, 0, False), Entry(11, 6, 0, False), Entry(12, 7, 0, True)]
    assert first[3] == Entry(20, 5, 1, True)
    assert out1 == [(0, 2), (1, 0)]  # llama.cpp returns logits rows in batch order
    assert calls[1] == ([Entry(21, 6, 1, True)], [(1, 1)])
    with pytest.raises(ValueError, match="n_batch"):
        pack(work, 0)


def test_decode_step_entries():
    assert decode_step([7, 8], [30, 41], range(2)) == [Entry(7, 30, 0, True), Entry(8, 41, 1, True)]


class FakeKV:
    """A unified KV cache as llama.cpp keeps it: cells (pos, token) each tagged with a set of sequences."""

    def __init__(self):
        self.cells: list[tuple[int, int, set[int]]] = []

    def decode(self, entries: list[Entry]) -> list[tuple[int, ...]]:
        """Add the batch; for every logits entry, the tokens its sequence attends to (in position order)."""
        seen = []
        for e in entries:
            self.cells.append((e.pos, e.token, {e.seq}))
            if e.logits:
                visible = sorted((p, t) for p, t, seqs in self.cells if e.seq in seqs and p <= e.pos)
                assert [p for p, _ in visible] == list(range(e.pos + 1)), "a hole or duplicate position"
                seen.append(tuple(t for _, t in visible))
        return seen

    def seq_cp(self, src: int, dst: int) -> None:
        for _, _, seqs in self.cells:
            if src in seqs:
                seqs.add(dst)


@pytest.mark.parametrize("n_batch", [1, 3, 512])
def test_plan_gives_every_sequence_exactly_its_prompt(n_batch):
    prompts = [[1, 2, 3, 4, 10 + i, 20 + i][: 5 + i % 2] for i in range(5)]
    shared = shared_prefix_len(prompts)
    assert shared == 4
    kv = FakeKV()
    for entries, _ in pack([SeqWork(0, prompts[0][:shared], 0, ())], n_batch):
        assert kv.decode(entries) == []  # the prefix outputs no logits
    for s in range(1, len(prompts)):
        kv.seq_cp(0, s)
    work = [SeqWork(s, p[shared:], shared, (len(p) - shared - 1,)) for s, p in enumerate(prompts)]
    got = {}
    for entries, outputs in pack(work, n_batch):
        for key, visible in zip(outputs, kv.decode(entries)):
            got[key] = visible
    assert {s: got[(s, w.want[0])] for s, w in enumerate(work)} == {s: tuple(p) for s, p in enumerate(prompts)}
    # one decode step continues every sequence at its own next position
    step = kv.decode(decode_step([99] * len(prompts), [len(p) for p in prompts], range(len(prompts))))
    assert step == [tuple(p) + (99,) for p in prompts]


def test_mean_logprob_matches_log_softmax():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(3, 11)) * 5
    targets = [4, 0, 10]
    logp = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
    assert mean_logprob(logits, targets) == pytest.approx(np.mean([logp[i, t] for i, t in enumerate(targets)]))
    assert mean_logprob(np.array([[1000.0, 0.0]]), [0]) == pytest.approx(0.0)  # no overflow


def test_best_setting_prefers_fastest_then_smallest():
    assert best_setting({8: 1.0, 16: 3.0, 32: 2.0}) == 16
    assert best_setting({64: 2.0, 8: 2.0}) == 8
    with pytest.raises(ValueError):
        best_setting({})


class FakeParallel:
    """A parallel system whose speed depends on ``n_parallel`` (fastest at 16)."""

    sweep = (8, 16, 32, 64)

    def __init__(self):
        self.n_parallel, self.resets, self.seen = 64, 0, []

    def reset(self):
        self.resets += 1

    def trial(self):
        self.seen.append(self.n_parallel)
        return {"items": {8: 2, 16: 9, 20: 4}[self.n_parallel]}


def test_sweep_parallel_keeps_the_best_and_caps_at_the_workload(monkeypatch):
    from suites import measure

    fake, other = FakeParallel(), object()
    monkeypatch.setattr(measure, "timed", lambda trial: {"items_per_s": float(trial()["items"])})
    swept = sweep_parallel({"llama.cpp": fake, "hf": other}, {"llama.cpp": fake.trial, "hf": lambda: {}},
                           "items_per_s", count=20, log=lambda _: None)
    assert swept == {"llama.cpp": {"rates": {8: 2.0, 16: 9.0, 20: 4.0}, "best": 16}}
    assert fake.seen == [8, 16, 20] and fake.resets == 3  # 32 and 64 both mean all 20 requests
    assert fake.n_parallel == 16  # left set for the timed repetitions


def test_llamacpp_parallel_flag_is_validated():
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_run_for_plan", BENCHMARKS / "run.py")
    run = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(run)
    assert run.parse_parallel("8,16,32,64") == (8, 16, 32, 64)
    for bad in ("", "8,x", "0,8", "512"):
        with pytest.raises(ValueError, match="--llamacpp-parallel"):
            run.parse_parallel(bad)


def test_report_prints_the_sweep_and_the_streamed_bandwidth():
    from suites.report import markdown

    row = {"status": "ok", "median": {"output_tok_per_s": 50.0, "seconds": 2.0}, "radixlm_speedup": 2.0}
    agent = {"suite": "agent", "metric": "output_tok_per_s", "systems": {"llama.cpp": row}, "targets": [],
             "parallel_sweep": {"llama.cpp": {"rates": {8: 40.0, 16: 50.0}, "best": 16}}}
    assert "llama.cpp: parallel sequences swept (output tok/s) 8: 40.00, 16: 50.00; best 16" in markdown(agent)
    decode = {"status": "ok", "median": {"decode_tok_per_s": 20.0}, "roofline_tok_per_s": 40.0,
              "roofline_fraction": 0.5, "streamed_gb_per_s": 8.25}
    raw = {"suite": "raw", "metric": "roofline_fraction", "machine": {"read_gb_per_s": 16.5},
           "systems": {"llama.cpp-decode-b1": decode}, "targets": []}
    text = markdown(raw)
    assert "Read bandwidth measured in the same run: 16.5 GB/s" in text
    assert "| llama.cpp-decode-b1 | 20.0 | 40.0 | 50.0% | 8.2 |" in text


def test_sweep_with_one_setting_times_nothing(monkeypatch):
    from suites import measure

    fake = FakeParallel()
    fake.sweep = (64,)
    monkeypatch.setattr(measure, "timed", lambda trial: pytest.fail("a one-setting sweep must not time a pass"))
    swept = sweep_parallel({"llama.cpp": fake}, {"llama.cpp": fake.trial}, "items_per_s", count=20,
                           log=lambda _: None)
    assert swept == {"llama.cpp": {"rates": {}, "best": 20}} and fake.n_parallel == 20 and not fake.seen


def test_flop_floor_counts_the_shared_prefix_once_and_bounds_each_system():
    from types import SimpleNamespace

    from suites import flop_floor
    from suites.report import markdown

    cfg = SimpleNamespace(hidden_size=8, head_dim=2, num_heads=4, num_kv_heads=2, intermediate_size=16,
                          num_layers=3, vocab_size=100)
    prompts = [[1, 2, 3, 4, 5], [1, 2, 3, 9]]  # 3 shared, then 2 and 1 of their own
    got = flop_floor.workload_flops(cfg, prompts, new_tokens=3)
    per_token = 3 * (8 * 8 * 2 + 8 * 4 * 2 + 3 * 8 * 16)  # q/o, k/v, gate/up/down per layer
    assert got["shared_prefix_tokens"] == 3 and got["prefill_tokens"] == 6 and got["decoded_tokens"] == 4
    assert got["linear_gflop"] * 1e9 == pytest.approx(2 * per_token * (6 + 4))
    assert got["lm_head_gflop"] * 1e9 == pytest.approx(2 * 8 * 100 * (2 + 4))
    # (query, key) pairs: prefix 1+2+3; prompt 0: 4+5 then 6+7 decoding; prompt 1: 4 then 5+6
    pairs = 6 + (4 + 5) + (6 + 7) + 4 + (5 + 6)
    assert got["attention_gflop"] * 1e9 == pytest.approx(2 * 3 * 4 * (2 * 2) * pairs)  # q.k and p.v per head dim
    need = flop_floor.floor(cfg, prompts, 3, matmul_gflop_per_s=got["total_gflop"] / 2.0)  # 2 s floor
    systems = {"radixlm": {"status": "ok", "median": {"seconds": 3.0}},
               "llama.cpp": {"status": "ok", "median": {"seconds": 5.0}}, "hf": {"status": "not installed"}}
    bound = flop_floor.bound(need, systems)
    assert bound["floor_seconds"] == pytest.approx(2.0) and set(bound["systems"]) == {"radixlm", "llama.cpp"}
    assert bound["systems"]["llama.cpp"]["bound"] == pytest.approx(2.5)
    # a system faster than the measured rate moves the floor to its own rate: the bound is never optimistic
    systems["radixlm"]["median"]["seconds"] = 1.0
    assert flop_floor.bound(need, systems)["systems"]["llama.cpp"]["bound"] == pytest.approx(5.0)
    result = {"suite": "agent", "metric": "output_tok_per_s", "systems": systems, "targets": [],
              "flop_floor": {**need, **flop_floor.bound(need, systems)}}
    assert "llama.cpp 0.0 GFLOP/s, at most 5.00x faster possible" in markdown(result)


def test_flop_floor_splits_prefill_and_decode_parts_that_sum_to_the_totals():
    from types import SimpleNamespace

    from suites import flop_floor

    cfg = SimpleNamespace(hidden_size=8, head_dim=2, num_heads=4, num_kv_heads=2, intermediate_size=16,
                          num_layers=3, vocab_size=100)
    got = flop_floor.workload_flops(cfg, [[1, 2, 3, 4, 5], [1, 2, 3, 9]], new_tokens=3)
    per_token = 3 * (8 * 8 * 2 + 8 * 4 * 2 + 3 * 8 * 16)
    assert got["linear_prefill_gflop"] * 1e9 == pytest.approx(2 * per_token * 6)
    assert got["linear_decode_gflop"] * 1e9 == pytest.approx(2 * per_token * 4)
    per_pair = 2 * 3 * 4 * (2 * 2)
    assert got["attention_prefill_gflop"] * 1e9 == pytest.approx(per_pair * (6 + 9 + 4))
    assert got["attention_decode_gflop"] * 1e9 == pytest.approx(per_pair * (13 + 11))
    assert got["linear_prefill_gflop"] + got["linear_decode_gflop"] == pytest.approx(got["linear_gflop"])
    assert got["attention_prefill_gflop"] + got["attention_decode_gflop"] == pytest.approx(got["attention_gflop"])


def test_kernel_floor_times_each_part_at_its_own_shapes_and_bounds_each_system():
    from types import SimpleNamespace

    from suites import flop_floor, kernel_floor
    from suites.report import markdown

    cfg = SimpleNamespace(hidden_size=64, head_dim=16, num_heads=4, num_kv_heads=2, intermediate_size=128,
                          num_layers=2, vocab_size=500)
    rates = kernel_floor.rates(cfg, requests=4, prefix=40, suffix=6, new_tokens=4, repeats=1)
    parts = kernel_floor.PARTS
    assert all(0 < rates[p] < float("inf") for p in parts)
    assert set(rates["paths"]["linear_decode"]) == {"qkv", "o", "gate_up", "down"}
    assert rates["paths"]["attention_decode"] in ("native", "flash")
    assert rates["paths"]["attention_prefill"] in ("native", "flash")
    slower = {**{p: rates[p] / 2 for p in parts}, "attention_decode": rates["attention_decode"] * 2, "paths": {}}
    best = kernel_floor.best_of(rates, slower)  # each part's best of two measurements
    assert best["linear_prefill"] == rates["linear_prefill"]
    assert best["attention_decode"] == 2 * rates["attention_decode"]
    # the arithmetic: each part's GFLOP over its own rate, and each system's seconds over the sum
    need = flop_floor.workload_flops(cfg, [[1] * 40 + [2] * 6, [1] * 40 + [3] * 6], new_tokens=4)
    fixed = {p: need[f"{p}_gflop"] / (i + 1) for i, p in enumerate(parts)}  # part i takes i + 1 seconds
    systems = {"llama.cpp": {"status": "ok", "median": {"seconds": 30.0}}, "hf": {"status": "not installed"}}
    got = kernel_floor.bound(need, fixed, systems)
    assert got["kernel_seconds"] == pytest.approx(15.0) and set(got["systems"]) == {"llama.cpp"}
    assert got["systems"]["llama.cpp"]["bound"] == pytest.approx(2.0)
    floor = {**flop_floor.floor(cfg, [[1, 2]], 2, 1.0), "floor_seconds": 1.0, "floor_rate_gflop_per_s": 1.0,
             "systems": {}, "kernel_floor": got}
    text = markdown({"suite": "agent", "metric": "output_tok_per_s", "systems": systems, "targets": [],
                     "flop_floor": floor})
    assert "Kernel floor: 15.0 s" in text and "llama.cpp at most 2.00x faster possible" in text
