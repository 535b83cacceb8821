"""docs/DESIGN.md's request table is what the trace records: a schema chat request is traced in a
fresh process (``benchmarks/layout_stats.py``'s ``trace_request``) and the table generated from it
must equal the one between DESIGN.md's markers, files, counts and functions alike.

``slow``: the trace starts an engine and waits for its grammar backend under a profiler (63 s on 2
busy cores, about 10 s of CPU); ``python -m pytest -q -m slow tests/project/test_request_trace.py``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
import layout_stats  # noqa: E402

pytestmark = pytest.mark.slow

REGENERATE = "python benchmarks/layout_stats.py --trace --write-design"
_TRACE = ("import json, layout_stats; "
          "print(json.dumps([[sorted(t.files), sorted(t.functions)] for t in layout_stats.trace_request()]))")


def _trace() -> list[layout_stats.Trace]:
    proc = subprocess.run([sys.executable, "-c", _TRACE], cwd=ROOT / "benchmarks", capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return [layout_stats.Trace(frozenset(files), frozenset(functions))
            for files, functions in json.loads(proc.stdout.splitlines()[-1])]


def _documented_files(table: str) -> set[str]:
    files = set()
    for row in table.splitlines():
        cells = [c.strip() for c in row.split("|")]
        if len(cells) == 6 and cells[1].startswith("`"):
            folder = cells[1].strip("`")
            files |= {f"{folder}{name.strip()}.py" for name in cells[4].split(",")}
    return files


def test_the_design_request_table_is_the_trace():
    first, later = _trace()
    documented = layout_stats.design_table()
    traced = layout_stats.trace_table(first, later)
    assert later.files, "the trace recorded no file: the profiler saw nothing"
    assert _documented_files(traced) == set(later.files)  # the table round-trips what it lists
    extra = sorted(later.files - _documented_files(documented))
    missing = sorted(_documented_files(documented) - later.files)
    assert traced == documented, (
        f"docs/DESIGN.md's request table is stale (files run but not listed: {extra}; "
        f"listed but not run: {missing}); regenerate it with: {REGENERATE}\n"
        f"--- documented\n{documented}\n--- traced\n{traced}")
