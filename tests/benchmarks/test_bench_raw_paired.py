"""The raw suite's batch-64 matmul-rate share paired with the rate measured next to each repetition
(``benchmarks/suites/raw.py``): the median of per-repetition shares, used by the issue-18 target."""

from __future__ import annotations

import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

from suites import raw  # noqa: E402

LIMITS = {"matmul_gflop_per_s": 200.0, "read_gb_per_s": 30.0}
PARAMS = 1e8  # 2e8 FLOPs per token


def _reps(rates, paired):
    return [{"decode_tok_per_s": r, "outside_forward": 0.03, **({"paired_matmul_gflop_per_s": p} if p else {})}
            for r, p in zip(rates, paired)]


def test_paired_share_is_the_median_of_per_repetition_shares():
    # shares against each repetition's own rate: 0.8, 0.5, 0.75 -> median 0.75
    row = raw._row(_reps([400.0, 250.0, 450.0], [100.0, 100.0, 120.0]), "decode", 64, 4e8, LIMITS, PARAMS, 0, 48)
    assert abs(row["paired_matmul_rate_fraction"] - 0.75) < 1e-9
    # the unpaired share compares the median rate with the run's best machine rate: 400 * 2e8 / 200e9
    assert abs(row["matmul_rate_fraction"] - 0.4) < 1e-9


def test_the_target_uses_the_paired_share_and_falls_back_without_it():
    paired = raw._row(_reps([400.0], [100.0]), "decode", 64, 4e8, LIMITS, PARAMS, 0, 48)
    plain = raw._row(_reps([400.0], [None]), "decode", 64, 4e8, LIMITS, PARAMS, 0, 48)
    assert "paired_matmul_rate_fraction" not in plain
    targets = {t["name"]: t for t in raw._targets({"decode-b64": paired, "prefill-b64": plain})}
    decode = next(t for n, t in targets.items() if n.startswith("decode-b64 fraction"))
    prefill = next(t for n, t in targets.items() if n.startswith("prefill-b64 fraction"))
    assert abs(decode["value"] - 0.8) < 1e-9 and decode["met"]
    assert abs(prefill["value"] - 0.4) < 1e-9 and not prefill["met"]


def test_only_the_target_batch_is_paired(monkeypatch):
    calls = []
    monkeypatch.setattr(raw.roofline, "matmul_flops", lambda: calls.append(1) or {"matmul_gflop_per_s": 150.0})
    row = raw._paired(lambda: {"decode_tok_per_s": 1.0}, True)
    assert row["paired_matmul_gflop_per_s"] == 150.0 and len(calls) == 2
    assert raw._paired(lambda: {"decode_tok_per_s": 1.0}, False) == {"decode_tok_per_s": 1.0} and len(calls) == 2
