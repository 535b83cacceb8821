"""A compile worker's faults are the server's, and its secrets stay out of it (issue 47, item 10):
a worker killed mid-compile is a retryable 503 (not the client's 400) and the next compile works;
the API keys never reach a worker's environment."""

from __future__ import annotations

import contextlib
import os
import signal
import time

from radixlm.constrained import CompileUnavailable, ConstraintError
from radixlm.constrained.compile.pool import CompileJob, CompilePool, worker_environ
from radixlm.constrained.compile.worker import CompileRequest
from radixlm.runtime.server.transport.body import from_exception

SPIN = "radixlm.constrained.testing.compile_hooks:spin"
HANG_GUARD_S = 60.0  # guards only: every wait ends on an event


def wait_for(cond, timeout: float = HANG_GUARD_S) -> None:
    end = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < end, "timed out waiting"
        time.sleep(0.02)


def test_a_killed_worker_is_a_retryable_server_fault(vocab):
    done = []
    pool = CompilePool(vocab, num_workers=1, timeout_s=HANG_GUARD_S, compile_fn=SPIN)
    try:
        wait_for(lambda: len(pool.worker_pids()) == 1)
        job = CompileJob(CompileRequest("regex", 30), done.append)  # spins 30 s: killed long before
        pool.submit(job)
        killed = set()
        end = time.monotonic() + HANG_GUARD_S
        while not done:  # kill whichever worker holds the job (the OOM killer, an operator), until it fails
            assert time.monotonic() < end, "the job never finished"
            worker = job.worker
            if worker is not None and worker.pid not in killed:
                killed.add(worker.pid)
                with contextlib.suppress(ProcessLookupError):
                    os.kill(worker.pid, signal.SIGKILL)
            time.sleep(0.01)
        assert done[0].outcome == "crash"
        err = done[0].error
        assert isinstance(err, CompileUnavailable) and isinstance(err, ConstraintError)
        api = from_exception(err)
        assert api.status == 503 and api.code == "server_fault" and "retry" in api.message, api.to_dict()
        assert api.headers().get("Retry-After")
        # the next compile gets a fresh worker and works
        again = []
        wait_for(lambda: len(pool.worker_pids()) == 1 and not killed & set(pool.worker_pids()))
        pool.submit(CompileJob(CompileRequest("regex", 0), again.append))
        wait_for(lambda: again)
        assert again[0].outcome == "ok", again[0].error
    finally:
        pool.shutdown()


def test_a_bad_constraint_stays_the_clients_400():
    api = from_exception(ConstraintError("regex: unbalanced parenthesis"))
    assert api.status == 400 and api.code == "unsupported_schema"


def test_api_keys_never_reach_a_worker(vocab, monkeypatch):
    secrets = {"RADIXLM_API_KEY": "sk-tenant-secret", "RADIXLM_ADMIN_API_KEY": "sk-admin-secret",
               "HF_TOKEN": "hf-secret", "OPENAI_API_KEY": "sk-openai-secret"}
    for name, value in secrets.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("RADIXLM_HARMLESS", "kept")
    pool = CompilePool(vocab, num_workers=1, compile_fn=SPIN)
    try:
        wait_for(lambda: len(pool.worker_pids()) == 1)
        with open(f"/proc/{pool.worker_pids()[0]}/environ", "rb") as f:
            environ = f.read()
    finally:
        pool.shutdown()
    leaked = [name for name, value in secrets.items() if value.encode() in environ]
    assert leaked == [], leaked
    assert b"RADIXLM_HARMLESS=kept" in environ  # only the secrets go
    assert worker_environ({"PATH": "/bin", "my_api_key": "x", "DB_PASSWORD": "y"}) == {"PATH": "/bin"}
