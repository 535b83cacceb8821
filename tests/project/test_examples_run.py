"""Smoke test: every example in ``examples/`` runs on the embedded default model and prints its result."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

# example -> text its output must contain
EXPECTED = {
    "batch_offline.py": "6 prompts, 96 tokens",
    "few_shot_select.py": "cache hit rate",
    "tree_of_thought.py": "verdict:",
    "tool_agent.py": "answer:",
    "json_extraction.py": "-> Invoice(vendor=",
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_example_runs(name: str, tiny_llama: str) -> None:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.run([sys.executable, str(EXAMPLES / name)], capture_output=True, text=True,
                          timeout=150, env=env, cwd=EXAMPLES.parent)
    assert proc.returncode == 0, f"{name} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
    assert EXPECTED[name] in proc.stdout, proc.stdout[-2000:]
    rate = re.search(r"cache hit rate ([\d.]+)%", proc.stdout)
    if rate:  # an example that reports its cache hits shows the prefix sharing it is about
        assert float(rate.group(1)) > 0, proc.stdout[-2000:]
