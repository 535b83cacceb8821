"""SGLang's own frontend (the ``sglang`` package), installed once into a cached folder for the tests.

``pip install --no-deps sglang`` (its full dependency set is the whole SGLang server: CUDA torch,
kernels, ...), plus the few packages ``sglang.lang`` needs at import time that our environment does
not already have (found by importing it until nothing was missing; pyproject's ``sglang-client``
extra lists them, pinned). They go to
``$RADIXLM_CACHE/sglang-client-<version>/`` (default ``~/.cache/radixlm``), which a test puts on
the ``PYTHONPATH`` of a subprocess only, so nothing of it can shadow our own environment.

Pre-fetch (e.g. before going offline)::

    python tests/sglang_client.py
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

VERSION = "0.5.23"  # pinned: the client whose protocol the acceptance test checks (its wheel is cp311+)


def import_time_packages() -> list[str]:
    """What ``sglang.lang`` imports beyond our own dependencies: pyproject's ``sglang-client`` extra."""
    import tomllib  # Python 3.11+, as the sglang wheel itself

    pyproject = Path(__file__).resolve().parents[1] / "pyproject.toml"
    return tomllib.loads(pyproject.read_text())["project"]["optional-dependencies"]["sglang-client"]


FETCH_COMMAND = "python tests/sglang_client.py"
_PIP_TIMEOUT_S = 900


class ClientUnavailable(RuntimeError):
    """sglang could not be installed (offline, or the package index lacks it)."""


def cache_root() -> Path:
    """``$RADIXLM_CACHE/sglang-client-<version>``, the same root as our checkpoints."""
    base = os.environ.get("RADIXLM_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "radixlm")
    return Path(base) / f"sglang-client-{VERSION}"


def install() -> Path:
    """The folder holding ``sglang`` and its import-time packages, installing them first if needed.

    The install goes to a temporary folder beside the cache that is renamed into place, so a crash
    or a concurrent run never leaves a half-filled cache."""
    root = cache_root()
    if (root / "sglang").is_dir():
        return root
    if sys.version_info < (3, 11):
        raise ClientUnavailable(f"sglang {VERSION} needs Python 3.11 or newer")
    root.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=root.parent, prefix=f".{root.name}-") as tmp:
        staged = Path(tmp) / "site"
        cmd = [sys.executable, "-m", "pip", "install", "--no-deps", "--disable-pip-version-check",
               "--no-compile", "--retries", "1", "--timeout", "20", "--target", str(staged),
               f"sglang=={VERSION}", *import_time_packages()]
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=_PIP_TIMEOUT_S)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise ClientUnavailable(f"pip install failed: {exc}") from exc
        if done.returncode != 0 or not (staged / "sglang").is_dir():
            last = ((done.stderr or done.stdout).strip().splitlines() or ["no output"])[-1]
            raise ClientUnavailable(f"pip install sglang=={VERSION} exited {done.returncode}: {last}")
        try:
            staged.rename(root)
        except OSError:
            if not (root / "sglang").is_dir():  # not a lost race: a real failure
                raise
    return root


if __name__ == "__main__":
    print(install())
