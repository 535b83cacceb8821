"""Smoke test of ``benchmarks/bench_speculative.py`` on the tiny checkpoint: every workload runs with
and without drafts, the outputs are token-identical, and the table says so."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_speculative.py"


def test_bench_speculative_runs_and_outputs_agree(tiny_llama: str) -> None:
    cmd = [sys.executable, str(BENCH), "--model-path", tiny_llama, "--reps", "1", "--no-llamacpp",
           "--parts", "extraction,code_edit,chat,agent", "--agent-requests", "4", "--agent-new-tokens", "8"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [line for line in proc.stdout.splitlines() if line.startswith(("| extraction", "| code_edit", "| chat"))]
    assert len(rows) == 3, proc.stdout
    for row in rows:
        assert row.split("|")[5].strip() == "yes", row  # the "identical" column
    assert any(line.startswith("| agent") for line in proc.stdout.splitlines())
