"""Smoke test of the ``quant`` benchmark suite (``benchmarks/suites/quant.py``): it runs on tiny, writes
its JSON and table, and its accuracy figures are those of a quantized model (non-zero, in tolerance)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

RUN = Path(__file__).resolve().parents[2] / "benchmarks" / "run.py"


def test_quant_suite_quick_run(tmp_path: Path, tiny_llama: str) -> None:
    out = tmp_path / "results"
    cmd = [sys.executable, str(RUN), "--suite", "quant", "--quick", "--size", "tiny", "--reps", "1",
           "--systems", "radixlm", "--out", str(out)]  # radixlm only: no llama.cpp rows
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads((out / "quant.json").read_text())
    assert set(result["systems"]) == {"radixlm", "radixlm-int8", "radixlm-int8-bf16"}
    for row in result["systems"].values():
        assert row["status"] == "ok" and row["median"]["decode_tok_per_s"] > 0
    for name in ("radixlm-int8", "radixlm-int8-bf16"):
        acc = result["accuracy"][name]
        assert 0 < acc["worst_row_rel_l2"] <= 0.06 and 0.8 <= acc["top1_agreement"] <= 1
        assert result["greedy_agreement"][name]["prompts"] == result["workload"]["accuracy_prompts"]
    assert {r["linear"] for r in result["matmul"]} == {"qkv_proj", "o_proj", "gate_up_proj", "down_proj", "lm_head"}
    table = (out / "quant.md").read_text()
    assert "| radixlm-int8 |" in table and "CPU int8 matmul paths" in table
    assert [t["value"] for t in result["targets"]] == [None, None]  # no llama.cpp-q8 row to compare with
