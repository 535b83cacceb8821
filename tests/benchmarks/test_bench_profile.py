"""The profile benchmark mode (``benchmarks/run.py --suite profile``): one prefill and one decode step
through the real engine, timed per part, on the tiny checkpoint in quick mode."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

RUN = Path(__file__).resolve().parents[2] / "benchmarks" / "run.py"


def _quick_run(suite: str, tmp_path: Path) -> tuple[dict, str]:
    """``suite`` in quick mode on the tiny checkpoint: its JSON result and its Markdown."""
    out = tmp_path / "results"
    cmd = [sys.executable, str(RUN), "--suite", suite, "--quick", "--size", "tiny", "--reps", "1", "--out", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=170)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads((out / f"{suite}.json").read_text()), (out / f"{suite}.md").read_text()


def test_profile_suite_times_every_part_of_a_step(tmp_path: Path, tiny_llama: str) -> None:
    result, text = _quick_run("profile", tmp_path)
    assert set(result["systems"]) == {"prefill-b1", "decode-b1"}
    for name, row in result["systems"].items():
        prof = row["profile"]
        parts = prof["parts_s"]
        for part in ("qkv matmul", "o matmul", "gate_up matmul + SiLU", "down matmul", "attention", "lm head",
                     "norms", "other (in forward)", "sampler", "engine outside the runner"):
            assert part in parts, (name, part)
        assert all(v >= 0 for k, v in parts.items() if k != "other (in forward)")
        # the parts add up to the whole step (the remainders are derived, never double counted)
        assert sum(parts.values()) == pytest.approx(prof["step_s"], rel=0.05)
        assert 0 < prof["flops"]["qkv matmul"] and 0 < prof["bytes"]["lm head"]
    assert "| gate_up matmul + SiLU |" in text


def test_profile_agent_suite_times_the_agent_workloads_prefill_and_decode_steps(tmp_path: Path,
                                                                                 tiny_llama: str) -> None:
    result, text = _quick_run("profile_agent", tmp_path)
    assert set(result["systems"]) == {"agent-prefill", "agent-decode"}
    for name, row in result["systems"].items():
        prof = row["profile"]
        assert prof["steps"] >= 1 and row["total_s"] == pytest.approx(prof["step_s"] * prof["steps"])
        assert sum(prof["parts_s"].values()) == pytest.approx(prof["step_s"], rel=0.05), name
        assert prof["flops"]["gate_up matmul + SiLU"] > 0 and prof["parts_s"]["attention"] >= 0
    decode = result["systems"]["agent-decode"]["profile"]
    assert decode["batch_size"] == 4  # the quick workload's requests, decoded together
    assert "All prefill steps:" in text and "#### agent-decode:" in text
