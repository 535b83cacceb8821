"""``radixlm serve`` as a subprocess for tests: started on a free port, stopped (SIGTERM) afterwards."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import openai
from radixlm.runtime import free_port
from radixlm.runtime.router.launcher import stop_replicas, wait_ready


@contextmanager
def serve(model_path: str | Path, log_dir: Path, *flags: str, timeout_s: float = 300) -> Iterator[openai.OpenAI]:
    """An OpenAI client of ``radixlm serve --model-path model_path *flags`` (its log in ``log_dir``)."""
    port = free_port()
    with open(log_dir / f"server-{port}.log", "wb") as log:
        proc = subprocess.Popen([sys.executable, "-m", "radixlm", "serve", "--model-path", str(model_path),
                                 "--port", str(port), *flags], cwd=log_dir, stdout=log, stderr=subprocess.STDOUT)
        url = f"http://127.0.0.1:{port}"
        try:
            wait_ready(url, proc, timeout_s=timeout_s)
            yield openai.OpenAI(base_url=url + "/v1", api_key="x", max_retries=0, timeout=timeout_s)
        finally:
            stop_replicas([proc])
