"""``ThreadCompilePool``: the in-process fallback of ``CompilePool``, for where no worker process
can be started (no ``sys.executable``, as in an embedded interpreter, or a vocabulary that does
not pickle).

Same interface and the same job outcomes, but weaker budgets: a job that passes its wall budget
fails at the deadline while its thread runs on to the end (Python threads cannot be stopped and
the automaton is built in native code), and there is no memory budget (``RLIMIT_AS`` would cap
the whole server). The threads are daemons, so a stuck compile never holds up interpreter exit.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from typing import Any

from radixlm.constrained.compile_job import compile_parts
from radixlm.constrained.compile_pool import CompileJob, job_error
from radixlm.constrained.errors import ConstraintError
from radixlm.constrained.vocab import TokenizerVocab

logger = logging.getLogger("radixlm.grammar")


class ThreadCompilePool:
    """``num_workers`` daemon threads compiling in this process; see the module docstring."""

    def __init__(self, vocab: TokenizerVocab, num_workers: int = 2, timeout_s: float = 10.0,
                 max_memory_mb: int = 0) -> None:
        self.vocab = vocab
        self.timeout_s = timeout_s
        self.max_memory_mb = max_memory_mb  # reported in errors only: not enforceable in process
        self._queue: queue.SimpleQueue[CompileJob | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._closed = False
        self.stats: dict[str, int] = {}
        self._threads = [threading.Thread(target=self._serve, name=f"grammar-{i}", daemon=True)
                         for i in range(num_workers)]
        for t in self._threads:
            t.start()

    def submit(self, job: CompileJob) -> None:
        with self._lock:
            if not self._closed:
                self._queue.put(job)
                return
        self._settle(job, "shutdown", None)

    def cancel(self, job: CompileJob) -> None:
        """Mark ``job`` cancelled; a running compile ends on its own and its result is dropped."""
        job.cancelled = True

    def worker_pids(self) -> list[int]:
        return []

    def shutdown(self) -> None:
        """Fail the queued jobs and stop the threads after their current compile (not waited for)."""
        with self._lock:
            self._closed = True
        while True:
            try:
                job = self._queue.get_nowait()
            except queue.Empty:
                break
            if job is not None:
                self._settle(job, "shutdown", None)
        for _ in self._threads:
            self._queue.put(None)

    def _serve(self) -> None:
        while True:
            job = self._queue.get()
            if job is None:
                return
            if not job.cancelled:
                self._run(job)

    def _run(self, job: CompileJob) -> None:
        timer = threading.Timer(self.timeout_s, self._settle, (job, "timeout", None))
        timer.daemon = True
        timer.start()
        start = time.perf_counter()
        try:
            outcome, value = "ok", compile_parts(self.vocab, job.request)
        except ConstraintError as e:
            outcome, value = "error", e
        except MemoryError:
            outcome, value = "memory", None
        except Exception:  # a bug must fail only this request; its details go to the log, not the client
            logger.exception("compiling a %s constraint failed", job.request.kind)
            outcome, value = "error", ConstraintError(f"{job.request.kind}: the constraint could not be compiled "
                                                      "(internal error, logged by the server)")
        finally:
            timer.cancel()
        job.wall_s = time.perf_counter() - start
        self._settle(job, outcome, value)

    def _settle(self, job: CompileJob, outcome: str, value: Any) -> None:
        """Report ``job`` once: the first of its result, its deadline and shutdown wins."""
        with self._lock:
            if job.outcome != "pending" or job.cancelled:
                return
            job.outcome = outcome
        if outcome == "ok":
            job.parts = value
        else:
            job.error = value if isinstance(value, ConstraintError) else job_error(
                job, outcome, value, self.timeout_s, self.max_memory_mb)
        job.on_done(job)
