"""``CompileSlots``: what the two compile pools share: a job queue served by slot threads.

``CompileJob`` is one compile in flight; ``CompilePool`` (worker processes) and
``ThreadCompilePool`` (the in-process fallback) differ only in how a slot runs a job.
"""

from __future__ import annotations

import queue
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from radixlm.constrained.compile.fair_queue import FairQueue
from radixlm.constrained.compile.job import CompiledParts, CompileRequest
from radixlm.constrained.errors import CompileUnavailable, ConstraintError


@dataclass(eq=False)
class CompileJob:
    """One compile in flight. ``on_done(job)`` is called once (from a slot thread, or from
    ``submit``/``shutdown`` once the pool is closed) with ``outcome`` ``ok`` (``parts`` set) or
    ``error``/``timeout``/``memory``/``crash``/``shutdown`` (``error`` set); never for a job that
    was cancelled. ``caller``: whose compile it is (the queue is round-robin between callers);
    ``submitted``: when it was queued (``time.monotonic()``): its wall budget runs from then."""

    request: CompileRequest
    on_done: Callable[[CompileJob], None]
    outcome: str = "pending"
    parts: CompiledParts | None = None
    error: ConstraintError | None = None
    wall_s: float = 0.0  # from sending the job to having its result in this process
    cancelled: bool = False
    worker: Any = field(default=None, repr=False)  # the _Worker running it (pool-internal)
    caller: Any = None
    submitted: float = field(default_factory=time.monotonic)

    def budget_left(self, timeout_s: float) -> float:
        """Seconds left of its wall budget, time waiting in the queue included (<= 0: spent)."""
        return timeout_s - (time.monotonic() - self.submitted)


def job_error(job: CompileJob, outcome: str, detail: Any, timeout_s: float, max_memory_mb: int) -> ConstraintError:
    """The ``ConstraintError`` a failed job reports, by outcome (shared with the thread pool)."""
    kind = job.request.kind
    if outcome == "timeout":
        return ConstraintError(f"grammar compilation exceeded the {timeout_s:g} s budget "
                               "(time waiting in the compile queue included)")
    if outcome == "memory":
        return ConstraintError(f"{kind}: grammar compilation exceeded the {max_memory_mb} MB memory budget")
    if outcome == "shutdown":
        return CompileUnavailable("grammar compilation stopped: the grammar backend shut down; retry")
    return CompileUnavailable(f"{kind}: the grammar compile worker failed ({detail}); a server fault, retry")


class CompileSlots(ABC):
    """Up to ``num_workers`` slot threads serving one queue of ``CompileJob``; subclasses implement
    ``_serve``. The first slot starts with the pool; each further one starts on demand, when a job
    is queued and no started slot is waiting for one or starting (a worker process holds some
    60-80 MB at a 152k vocabulary, and most servers rarely compile two grammars at once). Once
    started, a slot stays."""

    def __init__(self, num_workers: int, timeout_s: float, max_memory_mb: int, thread_name: str) -> None:
        self.timeout_s = timeout_s
        self.max_memory_mb = max_memory_mb
        self.num_workers = num_workers
        self._queue = FairQueue()  # CompileJob, or None: a slot thread's stop sentinel
        self._lock = threading.Lock()
        self._closed = False
        self._threads = [threading.Thread(target=self._serve, name=f"{thread_name}-{i}", daemon=True)
                         for i in range(num_workers)]
        self._started = 0  # slot threads started (the first at ``_start``, the others on demand)
        self._warming = 0  # started slots not yet ready for a job (starting their worker)

    def _start(self) -> None:
        with self._lock:
            self._start_slot()

    def _start_slot(self) -> None:
        """Start the next slot thread (the caller holds ``_lock``; no-op once all have started)."""
        if self._started < len(self._threads):
            self._threads[self._started].start()
            self._started += 1
            self._warming += 1

    def _slot_ready(self) -> None:
        """Called once by each slot thread when it can take jobs (its worker started or not)."""
        with self._lock:
            self._warming -= 1

    @property
    def started_slots(self) -> int:
        """Slot threads started so far (at most ``num_workers``)."""
        with self._lock:
            return self._started

    @abstractmethod
    def _serve(self) -> None:
        """A slot thread's loop: take jobs from the queue until a None sentinel."""

    def submit(self, job: CompileJob) -> None:
        """Queue ``job`` in its caller's lane; a free slot runs it (after ``shutdown`` it fails at once)."""
        with self._lock:
            if not self._closed:
                self._queue.put(job, job.caller)
                if self._queue.unserved() > self._warming:  # every started slot is busy: one more
                    self._start_slot()
                return
        self._report(job, "shutdown", None)

    def _close_queue(self) -> list[CompileJob]:
        """Mark the pool closed, stop the slot threads after their job; return the queued jobs."""
        with self._lock:
            self._closed = True
        pending = []
        while True:
            try:
                job = self._queue.get_nowait()
            except queue.Empty:
                break
            if job is not None and not job.cancelled:
                pending.append(job)
        for _ in range(self._started):  # closed: no slot starts after this
            self._queue.put(None)
        return pending

    def _report(self, job: CompileJob, outcome: str, value: Any) -> None:
        """Give ``job`` its outcome (the parts, or the error it reports) and call ``on_done``."""
        job.outcome = outcome
        if outcome == "ok":
            job.parts = value
        else:
            job.error = value if isinstance(value, ConstraintError) else job_error(
                job, outcome, value, self.timeout_s, self.max_memory_mb)
        job.on_done(job)
