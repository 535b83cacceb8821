"""glibc malloc tuning: applied once on Linux, and the opt-out variable really opts out."""

from __future__ import annotations

import subprocess
import sys

from radixlm.runtime.model import cpu_malloc


def test_opt_out_changes_nothing(monkeypatch):
    monkeypatch.setenv(cpu_malloc.DISABLE_ENV, "1")
    assert cpu_malloc._apply() is False


def test_tuning_applies_on_glibc_and_is_done_once():
    # CI and development machines are Linux/glibc, where tuning must succeed
    code = ("from radixlm.runtime.model import cpu_malloc as m\n"
            "first = m.tune_malloc()\n"
            "m._apply = lambda: (_ for _ in ()).throw(AssertionError('applied twice'))\n"
            "print(first, m.tune_malloc())\n")
    env = {k: v for k, v in __import__("os").environ.items() if k != cpu_malloc.DISABLE_ENV}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True", "True"]
