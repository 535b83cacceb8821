"""What ``radixlm serve`` says when it starts, and ``--log-level`` deciding what else it says."""

from __future__ import annotations

import subprocess
import sys

import pytest
from radixlm.runtime import free_port
from radixlm.runtime.engine.inspection import EngineSummary, count
from radixlm.runtime.router.launcher import stop_replicas, wait_ready


def _serve(*flags: str) -> tuple[int, str]:
    """Start ``radixlm serve``, wait until it answers, stop it; (exit code, its stderr)."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "radixlm", "serve", "--port", str(port),
                             "--max-total-tokens", "4096", *flags], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    try:
        wait_ready(f"http://127.0.0.1:{port}", proc, timeout_s=300)
    finally:
        stop_replicas([proc])
    return proc.returncode, proc.stderr.read()


def test_the_start_up_line_says_what_was_loaded_and_where():
    _, err = _serve()
    line = next(ln for ln in err.splitlines() if "radixlm serving" in ln)
    for part in ("(LlamaForCausalLM, 7.1M parameters, float32 weights)", "on cpu with ",
                 "KV cache 4,095 tokens (float16)", "up to 256 running requests", "grammar backend radixlm",
                 "listening on http://127.0.0.1:", "RANDOM weights",
                 "sampling defaults temperature=1.0 top_p=1.0 top_k=-1 (built-in: generation_config.json sets none)"):
        assert part in line, (part, line)


def test_log_level_warning_keeps_info_lines_out():
    _, err = _serve("--log-level", "warning")
    assert " INFO " not in err and "radixlm serving" not in err, err


@pytest.mark.unit
def test_summary_line_and_counts():
    s = EngineSummary("Qwen/Qwen2.5-0.5B-Instruct", "Qwen2ForCausalLM", 494_032_768, "int8 (weight-only)", "cpu",
                      1, 100_000, 64, "radixlm")
    assert s.line() == ("Qwen/Qwen2.5-0.5B-Instruct (Qwen2ForCausalLM, 494M parameters, int8 (weight-only) "
                        "weights) on cpu with 1 thread; KV cache 100,000 tokens; up to 64 running requests; "
                        "grammar backend radixlm")
    kv16 = EngineSummary("m", "LlamaForCausalLM", 1, "float32", "cpu", 2, 8_191, 8, "radixlm", kv_dtype="float16")
    assert "; KV cache 8,191 tokens (float16); " in kv16.line()
    assert [count(n) for n in (999, 8_500, 7_100_000, 1_235_814_400)] == ["999", "8.5K", "7.1M", "1.24B"]
