"""``CompilePool``: grammar compiles in persistent worker processes, where they can be stopped.

Python threads cannot be stopped: a front-end compile that runs away (a pathological schema)
keeps its CPU and memory until it ends, whatever budget said. Here each
of ``num_workers`` slots owns one worker process (``compile.worker``), given the vocabulary once
at start-up. A job runs in one worker; the slot's thread in this process only waits on the
socket. Past the wall budget (``timeout_s``, counted from the job's submission: time in the
queue included, and a job whose budget ran out there fails without running) the worker is
SIGKILLed and replaced, and so is a
worker that ran out of its memory budget (``max_memory_mb`` of address space, ``RLIMIT_AS``)
or whose job was cancelled. ``shutdown()`` kills the workers and returns at once.

Results come back as ``CompiledParts`` (the Lark grammar and the relaxed keywords).
"""

from __future__ import annotations

import logging
import os
import pickle
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from multiprocessing.connection import Connection
from typing import Any

from radixlm.constrained.compile.job import CompileRequest
from radixlm.constrained.compile.slots import CompileJob, CompileSlots
from radixlm.constrained.compile.worker import DEFAULT_COMPILE_FN
from radixlm.constrained.errors import ConstraintError
from radixlm.constrained.vocab import TokenizerVocab

logger = logging.getLogger(__name__)
WORKER_START_TIMEOUT_S = 60.0  # imports and the vocabulary; generous for loaded CI machines
# Secrets a compile never needs (RADIXLM_API_KEY, RADIXLM_ADMIN_API_KEY, HF_TOKEN, ...): a worker runs
# untrusted schemas, so it does not inherit them.
_SECRET_NAME = re.compile(r"API_?KEY|TOKEN|SECRET|PASSWORD|CREDENTIAL", re.IGNORECASE)


def worker_environ(environ: Mapping[str, str]) -> dict[str, str]:
    """``environ`` without the variables whose names say they hold a secret (``_SECRET_NAME``)."""
    return {k: v for k, v in environ.items() if not _SECRET_NAME.search(k)}


class _Worker:
    """One worker process and this process's end of its socket."""

    def __init__(self, max_memory_mb: int) -> None:
        ours, theirs = socket.socketpair()
        cmd = [sys.executable, "-m", "radixlm.constrained.compile.worker",
               str(theirs.fileno()), str(os.getpid()), str(max_memory_mb)]
        # The child imports radixlm the way this process did (a source tree, an editable install).
        env = {**worker_environ(os.environ), "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
        try:
            self.proc = subprocess.Popen(cmd, pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL, env=env)
        finally:
            theirs.close()
        self.conn = Connection(ours.detach())
        self.pid = self.proc.pid
        self.ready = False

    def handshake(self, init_blob: bytes) -> None:
        """Send the vocabulary; wait until the worker is ready (OSError if it is not)."""
        self.conn.send_bytes(init_blob)
        if not self.conn.poll(WORKER_START_TIMEOUT_S):
            raise OSError(f"compile worker {self.pid} did not start within {WORKER_START_TIMEOUT_S:g} s")
        try:
            self.conn.recv()
        except EOFError:
            raise OSError(f"compile worker {self.pid} exited at start-up ({self.proc.wait()})") from None
        self.ready = True

    def compile(self, request: CompileRequest, timeout_s: float) -> tuple[str, Any]:
        """``(outcome, value)`` of one job; ``timeout`` leaves the worker running (kill it)."""
        self.conn.send(request)
        if not self.conn.poll(timeout_s):
            return "timeout", None
        try:
            return self.conn.recv()
        except (EOFError, OSError):
            code = self.proc.wait()
            # A native allocation failing under RLIMIT_AS aborts the process.
            return ("memory" if code == -signal.SIGABRT else "crash"), f"exit status {code}"
        except Exception:  # the result could not be unpickled here (MemoryError included)
            logger.exception("loading a compiled %s grammar failed", request.kind)
            return "error", ConstraintError(f"{request.kind}: the compiled grammar could not be loaded "
                                            "(internal error, logged by the server)")

    def kill(self) -> None:
        """SIGKILL (does not wait); safe to call from any thread, any number of times."""
        try:
            self.proc.kill()
        except OSError:
            pass

    def close(self) -> None:
        """Kill, reap and close the socket (the slot thread's job)."""
        self.kill()
        self.proc.wait()
        self.conn.close()


class CompilePool(CompileSlots):
    """``num_workers`` worker processes; ``submit``, ``cancel`` and ``shutdown`` never block.

    ``compile_fn`` (``"module:function"``, called as ``fn(vocab, request)`` in the worker) is
    the compile itself; tests swap it for slow or memory-hungry stand-ins.
    """

    def __init__(self, vocab: TokenizerVocab, num_workers: int = 2, timeout_s: float = 10.0,
                 max_memory_mb: int = 4096, compile_fn: str = DEFAULT_COMPILE_FN) -> None:
        super().__init__(num_workers, timeout_s, max_memory_mb, "grammar-slot")
        self._init_blob = pickle.dumps((vocab, compile_fn))  # fails here if the vocab cannot travel
        self._workers: set[_Worker] = set()
        self.stats = {"worker_starts": 0, "workers_replaced": 0, "expired_in_queue": 0}
        self._start()

    def cancel(self, job: CompileJob) -> None:
        """Drop ``job``: skipped if still queued, its worker killed (and replaced) if running."""
        with self._lock:
            job.cancelled = True
            worker = job.worker
        if worker is not None:
            worker.kill()

    def worker_pids(self) -> list[int]:
        """Pids of the started workers, ready for a job (for tests and diagnostics)."""
        with self._lock:
            return sorted(w.pid for w in self._workers if w.ready)

    def shutdown(self) -> None:
        """Kill every worker and fail the queued and running jobs; returns without waiting."""
        with self._lock:
            if self._closed:
                return
        pending = self._close_queue()
        with self._lock:  # closed now: no worker starts after this copy
            workers = list(self._workers)
        for w in workers:
            w.kill()
        for job in pending:
            self._report(job, "shutdown", None)

    # ---- slot threads ------------------------------------------------------------------------
    def _serve(self) -> None:
        """A slot: keep one worker warm, run queued jobs on it, replace it when it is killed."""
        worker = self._start_worker()
        self._slot_ready()
        try:
            while True:
                job = self._queue.get()
                if job is None:
                    return
                worker = self._run(worker, job)
        finally:
            if worker is not None:
                self._retire(worker)

    def _run(self, worker: _Worker | None, job: CompileJob) -> _Worker | None:
        """Run ``job``; return the worker to keep (a fresh one when this one had to go)."""
        outcome, value = "crash", "no worker could be started"
        if job.budget_left(self.timeout_s) <= 0:  # spent waiting in the queue: fails without running
            with self._lock:
                self.stats["expired_in_queue"] += 1
            if not job.cancelled:
                self._report(job, "timeout", None)
            return worker
        for _ in range(2):  # a worker that died while idle costs a fresh start, not the request
            worker = worker or self._start_worker()
            if worker is None:
                break
            with self._lock:
                if job.cancelled or self._closed:
                    outcome = "shutdown"
                    break
                job.worker = worker
            outcome, value = self._attempt(worker, job)
            with self._lock:
                job.worker = None
            if outcome in ("ok", "error"):
                break
            self._retire(worker, replaced=True)  # timed out, out of memory, killed or dead
            worker = None
            if outcome != "resend":
                break
        if worker is None:
            worker = self._start_worker()
        if outcome == "resend":
            outcome = "crash"
        if not job.cancelled:
            self._report(job, "shutdown" if self._closed and outcome != "ok" else outcome, value)
        return worker

    def _attempt(self, worker: _Worker, job: CompileJob) -> tuple[str, Any]:
        start = time.perf_counter()
        try:
            outcome, value = worker.compile(job.request, max(job.budget_left(self.timeout_s), 0.0))
        except OSError as e:  # the job never reached the worker: it was gone already
            return "resend", f"{type(e).__name__}: {e}"
        job.wall_s = time.perf_counter() - start
        return outcome, value

    def _start_worker(self) -> _Worker | None:
        """A ready worker, or None (logged) when none can be started or the pool is closed."""
        if self._closed:
            return None
        try:
            worker = _Worker(self.max_memory_mb)
        except OSError as e:
            logger.error("grammar compile worker could not be started: %s", e)
            return None
        with self._lock:
            self._workers.add(worker)
            closed = self._closed
        try:
            if closed:
                raise OSError("the pool shut down")
            worker.handshake(self._init_blob)
        except OSError as e:
            if not self._closed:
                logger.error("grammar compile worker failed to start: %s", e)
            self._retire(worker)
            return None
        with self._lock:
            self.stats["worker_starts"] += 1
        return worker

    def _retire(self, worker: _Worker, replaced: bool = False) -> None:
        with self._lock:
            self._workers.discard(worker)
            self.stats["workers_replaced"] += replaced
        worker.close()
