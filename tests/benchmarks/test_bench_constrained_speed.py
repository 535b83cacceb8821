"""``benchmarks/bench_constrained_speed.py`` end to end on ``tiny`` (one repetition, a few tokens): both
parts run, every mode and batch is reported, and the constrained outputs' token counts are real."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))


@pytest.mark.slow
def test_the_benchmark_runs_and_reports_both_parts(tmp_path, capsys):
    from bench_constrained_speed import main

    out = tmp_path / "result.json"
    assert main(["--size", "tiny", "--first-reps", "1", "--reps", "1", "--batches", "1,4",
                 "--max-new-tokens", "8", "--first-max-new-tokens", "8", "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    first = result["first_request"]
    assert {r["mode"] for r in first["rows"]} == {"warmup", "no-warmup", "at-once"}
    assert first["rows"][0]["ready"]["state"] == "ready"
    assert all(r["tokens"] == [8, 8, 8] for r in first["rows"])
    for bs in (1, 4):
        row = result["throughput"][f"batch_{bs}"]
        assert bs < row["constrained"]["tokens"] <= 8 * bs and bs < row["unconstrained"]["tokens"] <= 8 * bs
        assert row["ratio"] == pytest.approx(row["constrained"]["tok_s"] / row["unconstrained"]["tok_s"])
        assert row["constrained"]["step_tok_s"] > 0 and row["unconstrained"]["step_tok_s"] > 0
        assert 0 < row["constrained"]["mask_share"] < 1 and row["unconstrained"]["mask_share"] == 0
    assert "first request [warmup" in capsys.readouterr().out
