"""Test support: run Triton kernel tests on the CPU interpreter, whatever else shares the process.

Triton picks interpreter-or-compiled once per process, when ``triton.language`` is imported. A
test decorated with ``@interpreted`` therefore runs in-process when this process can be (and may
be) put in interpreter mode — no CUDA device, triton not yet imported compiled — and otherwise
looks up its outcome from one child ``pytest`` run of all the module's ``@interpreted`` tests
with ``TRITON_INTERPRET=1`` and CUDA hidden, started on first need. Either way each test passes
or fails on its own, and CUDA tests in the parent process keep compiled kernels.
"""

from __future__ import annotations

import functools
import inspect
import os
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from collections.abc import Callable
from typing import Any

import torch
from radixlm.kernels.triton_mode import prepare_interpreter

_CHILD_ENV = "RADIXLM_TRITON_INTERPRET_CHILD"
_names: dict[str, set[str]] = {}  # test file -> names of its @interpreted tests
_outcomes: dict[str, dict[str, str | None]] = {}  # test file -> {test id: failure text or None}


def _current_test_id() -> str:
    # "tests/kernels/test_attention_kernels.py::test_x[1-32] (call)" -> "test_x[1-32]"
    return os.environ["PYTEST_CURRENT_TEST"].rsplit(" (", 1)[0].split("::")[-1]


def _run_child(path: str) -> dict[str, str | None]:
    """Run the file's @interpreted tests in a child pytest under the interpreter; outcomes by test id."""
    if path in _outcomes:
        return _outcomes[path]
    env = {**os.environ, "TRITON_INTERPRET": "1", "CUDA_VISIBLE_DEVICES": "", _CHILD_ENV: "1"}
    env.pop("PYTEST_CURRENT_TEST", None)
    with tempfile.TemporaryDirectory() as tmp:
        report = os.path.join(tmp, "report.xml")
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", path,
               "-k", " or ".join(sorted(_names[path])), f"--junitxml={report}"]
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
        outcomes: dict[str, str | None] = {}
        if os.path.exists(report):
            for case in ET.parse(report).getroot().iter("testcase"):
                bad = [c for c in case if c.tag in ("failure", "error", "skipped")]
                outcomes[case.get("name", "")] = (bad[0].text or bad[0].get("message", "")) if bad else None
    outcomes["<output>"] = proc.stdout[-4000:] + proc.stderr[-2000:]
    _outcomes[path] = outcomes
    return outcomes


def interpreted(test: Callable[..., Any]) -> Callable[..., Any]:
    """Decorator for a pytest test that launches Triton kernels on CPU tensors (see module doc)."""
    path = inspect.getfile(test)
    _names.setdefault(path, set()).add(test.__name__)

    @functools.wraps(test)
    def run(*args: Any, **kwargs: Any) -> Any:
        in_child = os.environ.get(_CHILD_ENV) == "1"
        if in_child or (not torch.cuda.is_available() and prepare_interpreter()):
            if not prepare_interpreter():
                raise RuntimeError("triton was imported before TRITON_INTERPRET=1 could take effect")
            return test(*args, **kwargs)
        outcomes = _run_child(path)
        test_id = _current_test_id()
        if test_id not in outcomes:
            raise AssertionError(f"{test_id} did not run in the interpreter subprocess:\n{outcomes['<output>']}")
        if outcomes[test_id] is not None:
            raise AssertionError(f"{test_id} failed under the Triton interpreter (subprocess):\n{outcomes[test_id]}")
        return None

    return run
