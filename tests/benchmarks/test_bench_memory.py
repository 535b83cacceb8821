"""Smoke test of ``benchmarks/bench_memory.py`` on tiny: radixlm's row counts its compile worker
(one, started with the grammar backend), totals at least the engine's own resident memory, and
its idle figure is taken after the engine's idle release."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_memory.py"


def _row(tiny_llama: str, *flags: str) -> list[str]:
    cmd = [sys.executable, str(BENCH), "--model-path", tiny_llama, "--systems", "radixlm", "--context", "512",
           "--prompt-tokens", "32", "--new-tokens", "2", *flags]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [line for line in proc.stdout.splitlines() if line.startswith("| radixlm |")]
    assert len(rows) == 1, proc.stdout
    return [cell.strip() for cell in rows[0].strip("|").split("|")]


@pytest.mark.slow
def test_radixlm_row_counts_the_worker_and_the_idle_release(tiny_llama):
    cells = _row(tiny_llama)
    number = lambda text: int(text.replace(",", ""))  # noqa: E731
    loaded, after, grammar, workers = number(cells[1]), number(cells[2]), cells[5], cells[6]
    assert grammar == "ready" and workers.startswith("1 (")  # one worker: the second starts on demand
    private = number(workers.split("/")[1].rstrip(")"))
    assert private > 0
    assert number(cells[7]) >= loaded + private - 1 and number(cells[8]) >= after  # totals: engine + worker
    assert number(cells[11]) >= number(cells[10])  # idle total >= the engine's idle RSS


@pytest.mark.slow
def test_without_grammar_warmup_no_worker_runs(tiny_llama):
    cells = _row(tiny_llama, "--no-grammar-warmup")
    assert cells[5] == "not started" and cells[6].startswith("0 (")


@pytest.mark.slow
def test_agent_workload_row(tiny_llama):
    """``--workload agent`` runs the agent prompts through the engine and reports the same columns."""
    cells = _row(tiny_llama, "--workload", "agent", "--agent-requests", "3", "--context", "8192",
                 "--no-grammar-warmup")
    number = lambda text: int(text.replace(",", ""))  # noqa: E731
    assert number(cells[2]) >= number(cells[1]) > 0 and cells[5] == "not started"
