"""The pools that run compile jobs: ``CompilePool`` (worker processes, for the radixlm and
llguidance cores) and ``ThreadCompilePool`` (threads, for the adapters), over the same job slots
(``CompileSlots``) and a queue fair between callers (``FairQueue``).

Processes: ``CompilePool``: grammar compiles in persistent worker processes, where they can be stopped.

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

Threads: ``ThreadCompilePool``: the in-process fallback of ``CompilePool``, for where no worker process
can be started (no ``sys.executable``, as in an embedded interpreter, or a vocabulary that does
not pickle).

Same interface and the same job outcomes, but weaker budgets: a job that passes its wall budget
fails at the deadline while its thread runs on to the end (Python threads cannot be stopped and
the automaton is built in native code), and there is no memory budget (``RLIMIT_AS`` would cap
the whole server). The threads are daemons, so a stuck compile never holds up interpreter exit.

Slots: ``CompileSlots``: what the two compile pools share: a job queue served by slot threads.

``CompileJob`` is one compile in flight; ``CompilePool`` (worker processes) and
``ThreadCompilePool`` (the in-process fallback) differ only in how a slot runs a job.

Queue: ``FairQueue``: the compile queue, round-robin between callers.

First come, first served let one caller's burst of slow compiles hold every later caller's
trivial one behind it. Here each caller (``CompileJob.caller``: the engine's per-call id, as the
scheduler's fair admission uses) has its own FIFO lane, and a slot takes the head of the lane
served least recently: a caller that arrives while another has N jobs queued waits for at most
one job per other caller, not N.
"""

from __future__ import annotations

import logging
import os
import pickle
import queue
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from abc import ABC, abstractmethod
from collections import OrderedDict, deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

from radixlm.constrained.compile.worker import (
    DEFAULT_COMPILE_FN,
    CompiledParts,
    CompileRequest,
    resolve_compile_fn,
    run_compile,
)
from radixlm.constrained.errors import CompileUnavailable, ConstraintError
from radixlm.constrained.vocab import TokenizerVocab


class FairQueue:
    """A blocking queue of items in per-caller lanes, served round-robin (thread-safe)."""

    def __init__(self) -> None:
        self._lanes: OrderedDict[Any, deque] = OrderedDict()  # rotation order: next served first
        self._cond = threading.Condition()
        self._waiting = 0  # getters blocked in ``get`` (counted until they pop)

    def put(self, item: Any, caller: Any = None) -> None:
        """Queue ``item`` at the end of ``caller``'s lane (a new caller joins the rotation last)."""
        with self._cond:
            lane = self._lanes.get(caller)
            if lane is None:
                lane = self._lanes[caller] = deque()
            lane.append(item)
            self._cond.notify()

    def get(self) -> Any:
        """The head of the next lane in the rotation, waiting for one; that lane goes last."""
        with self._cond:
            self._waiting += 1
            try:
                while not self._lanes:
                    self._cond.wait()
                return self._pop()
            finally:
                self._waiting -= 1

    def get_nowait(self) -> Any:
        """As ``get``, but ``queue.Empty`` when nothing is queued."""
        with self._cond:
            if not self._lanes:
                raise queue.Empty
            return self._pop()

    def unserved(self) -> int:
        """Items queued beyond the getters waiting for one (> 0: none is free to take the last)."""
        with self._cond:
            return sum(len(lane) for lane in self._lanes.values()) - self._waiting

    def __len__(self) -> int:
        with self._cond:
            return sum(len(lane) for lane in self._lanes.values())

    def _pop(self) -> Any:
        caller, lane = self._lanes.popitem(last=False)
        item = lane.popleft()
        if lane:
            self._lanes[caller] = lane
        return item


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
