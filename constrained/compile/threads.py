"""``ThreadCompilePool``: the in-process fallback of ``CompilePool``, for where no worker process
can be started (no ``sys.executable``, as in an embedded interpreter, or a vocabulary that does
not pickle).

Same interface and the same job outcomes, but weaker budgets: a job that passes its wall budget
fails at the deadline while its thread runs on to the end (Python threads cannot be stopped and
the automaton is built in native code), and there is no memory budget (``RLIMIT_AS`` would cap
the whole server). The threads are daemons, so a stuck compile never holds up interpreter exit.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from radixlm.constrained.compile.slots import CompileJob, CompileSlots
from radixlm.constrained.compile.worker import DEFAULT_COMPILE_FN, resolve_compile_fn, run_compile
from radixlm.constrained.vocab import TokenizerVocab


class ThreadCompilePool(CompileSlots):
    """``num_workers`` daemon threads compiling in this process; see the module docstring."""

    def __init__(self, vocab: TokenizerVocab, num_workers: int = 2, timeout_s: float = 10.0,
                 max_memory_mb: int = 0, compile_fn: str = DEFAULT_COMPILE_FN) -> None:
        # max_memory_mb is reported in errors only: it cannot be enforced inside this process
        super().__init__(num_workers, timeout_s, max_memory_mb, "grammar")
        self.vocab = vocab
        self.compile_fn = resolve_compile_fn(compile_fn)
        self.stats: dict[str, int] = {}
        self._start()

    def cancel(self, job: CompileJob) -> None:
        """Mark ``job`` cancelled; a running compile ends on its own and its result is dropped."""
        job.cancelled = True

    def worker_pids(self) -> list[int]:
        return []

    def shutdown(self) -> None:
        """Fail the queued jobs and stop the threads after their current compile (not waited for)."""
        for job in self._close_queue():
            self._settle(job, "shutdown", None)

    def _serve(self) -> None:
        self._slot_ready()
        while True:
            job = self._queue.get()
            if job is None:
                return
            if not job.cancelled:
                self._run(job)

    def _run(self, job: CompileJob) -> None:
        left = job.budget_left(self.timeout_s)  # time in the queue counts
        if left <= 0:
            self._settle(job, "timeout", None)
            return
        timer = threading.Timer(left, self._settle, (job, "timeout", None))
        timer.daemon = True
        timer.start()
        start = time.perf_counter()
        try:
            outcome, value = run_compile(self.compile_fn, self.vocab, job.request)
        finally:
            timer.cancel()
        job.wall_s = time.perf_counter() - start
        self._settle(job, outcome, value)

    def _settle(self, job: CompileJob, outcome: str, value: Any) -> None:
        """Report ``job`` once: the first of its result, its deadline and shutdown wins."""
        with self._lock:
            if job.outcome != "pending" or job.cancelled:
                return
            job.outcome = outcome  # claimed: a later deadline or result is ignored
        self._report(job, outcome, value)
