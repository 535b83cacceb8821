"""Smoke test of ``benchmarks/bench_gguf_matmul.py``: a tiny shape at batches 1 and 2 writes one row per
type and baseline, each with the ISA path it ran and a positive speed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from radixlm.kernels import gguf_blocks_native

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_gguf_matmul.py"


@pytest.mark.skipif(not gguf_blocks_native.available(), reason="native CPU kernels unavailable here")
def test_bench_gguf_matmul_quick_run(tmp_path: Path) -> None:
    out = tmp_path / "gguf.json"
    cmd = [sys.executable, str(BENCH), "--shapes", "8x256", "--batches", "1", "2", "--types", "Q5_0", "Q4_K",
           "F16", "--threads", "1", "--min-time", "0", "--isa", "avx2", "--json", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = json.loads(out.read_text())["rows"]
    assert {(r["type"], r["batch"]) for r in rows} == {
        (t, m) for t in ("F32 torch", "int8 native", "Q5_0", "Q4_K", "F16") for m in (1, 2)}
    assert all(r["gflops"] > 0 for r in rows)
    assert {r["isa"] for r in rows if r["type"] in ("Q5_0", "Q4_K", "F16")} == {"avx2"}
