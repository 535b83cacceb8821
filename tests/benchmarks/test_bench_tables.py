"""``radixlm bench`` prints each suite's table; the json suite's jump-forward ratio reads the right way."""

from __future__ import annotations

import importlib.util
from pathlib import Path

RUN = Path(__file__).resolve().parents[2] / "benchmarks" / "run.py"


def _run_module():
    spec = importlib.util.spec_from_file_location("bench_run_for_tables", RUN)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _row(tok_per_s: float, passes: float, speedup: float, base: str = "jump-forward") -> dict:
    return {"status": "ok", "median": {"output_tok_per_s": tok_per_s, "seconds": 1.0},
            "forward_passes_median": passes, f"{base}_speedup": speedup}


def test_json_suite_prints_its_table_and_the_jump_forward_ratio(capsys):
    result = {"suite": "json", "description": "jump-forward on vs off", "metric": "output_tok_per_s",
              "systems": {"jump-forward": _row(3000.0, 10, 1.0), "no-jump-forward": _row(1500.0, 121, 2.0)},
              "targets": []}
    _run_module().print_table(result)
    out = capsys.readouterr().out
    assert "| jump-forward / system |" in out  # the ratio's direction is in its header
    assert "| no-jump-forward | 1,500.00 | 1.00 | 2.00x |" in out
    assert "jump-forward: 2.00x the output_tok_per_s of no-jump-forward (10 vs 121 forward passes" in out


def test_other_suites_print_their_table_only(capsys):
    result = {"suite": "agent", "description": "", "metric": "output_tok_per_s",
              "systems": {"radixlm": _row(100.0, 1, 1.0, "radixlm"), "radixlm-nocache": _row(10.0, 1, 10.0, "radixlm")}, "targets": []}
    _run_module().print_table(result)
    out = capsys.readouterr().out
    assert "| radixlm-nocache | 10.00 | 1.00 | 10.00x |" in out and "jump-forward:" not in out


def test_quick_run_says_what_ran_and_judges_no_target(capsys):
    target = {"name": "radixlm / hf output tok/s", "value": 2.0, "unit": "x", "threshold": 6.0, "met": False}
    result = {"suite": "agent", "description": "64 tool-calling requests sharing a ~1,500-token prompt.",
              "metric": "output_tok_per_s", "quick": True, "targets": [target],
              "workload": {"requests": 8, "shared_system_tokens": 400, "new_tokens": 8},
              "systems": {"radixlm": _row(90.0, 8, 1.0, "radixlm")}}
    _run_module().print_table(result)
    out = capsys.readouterr().out
    assert "QUICK smoke run, a reduced workload: requests 8, shared system tokens 400, new tokens 8." in out
    assert "MISSED" not in out and "not judged (--quick" in out
    result["quick"] = False
    _run_module().print_table(result)
    assert "**MISSED**" in capsys.readouterr().out
