"""``EngineLoop``: the step loop in its own thread, and the thread-safe doors into it.

Callers (any thread) ``submit`` requests, ``abort`` them and ``call`` functions that must run
between steps (flush, leak checks). The loop thread alone touches the scheduler, the runner and
the requests' state. One step::

    drain inbox (constrained requests wait in the GrammarCompiler until their grammar compiled)
    batch = scheduler.schedule()                     -> None: sleep until woken
    result = runner.run(batch)                       forward + masks + sample
    scheduler.process_batch_result(batch, result)    append, ask the constraint, stop, jump-forward,
                                                     cache, release
    emit stream chunks / final results

A request's own failure fails only that request, with its exception: a grammar that does not
compile, its sampling (logit processors, grammar mask, generator: ``BatchResult.errors``), its
post-processing (detokenizer, constraint, stop checks) or building its output. An exception in
the step itself (the forward) fails every in-flight request with a ``RuntimeError`` naming the
cause and resets the scheduler; the loop keeps serving.

``overlap=True`` (``--disable-overlap-schedule`` off, on a verified CUDA device) runs the steps
through ``OverlapStepper`` (below): step N+1 is scheduled and launched before step
N's result is processed, with the same results.

Once the engine has been idle ``IDLE_RELEASE_S`` after running a batch, the loop hands the heap's
free pages back to the OS, once per idle period (``memory_placement.release_free_memory``): the malloc
tuning keeps a burst's freed temporaries (prefill activations, the int8 fallback's dequantized
weight rows) resident for the next step, which an idle server does not need. It does the same
after a step that extended at least ``RELEASE_AFTER_EXTEND_TOKENS`` tokens (on the CPU): a long
prefill's activations (~70 KB a token on a 0.5B model, hundreds of MB for a long prompt) are not
what the decode steps after it reuse; the next long prefill faults its pages in again, ~1% of
its time.

Overlap scheduling: the CPU schedules step N+1 and post-processes step N while the device works.

The non-overlapped step is ``schedule -> run -> process -> emit``: the device idles while the CPU
processes and schedules. ``OverlapStepper`` keeps the device's queue full instead. With decode
step N in flight on the ``DeviceWorker`` (one thread that runs ``ModelRunner.run`` in submission
order, i.e. the device's queue)::

    ahead = scheduler.schedule_decode_ahead(batch_n)     # step N+1, input tokens are futures
    worker.launch(ahead, depends_on=result_n)            # queued behind N; futures resolved there
    scheduler.process_batch_result(batch_n, result_n)    # waits for N, runs while N+1 computes
    emit N's chunks and results; apply aborts that came meanwhile
    batch_n1 = scheduler.commit_decode_ahead(ahead)      # drop rows of requests N finished

Results are token-for-token those of the non-overlapped loop (``tests/engine/test_overlap_loop.py``):
the scheduler offers a batch ahead only when it is the one the plain loop would run next (see
``runtime/scheduler/decode_ahead.py``), rows of requests that finish in step N (EOS, stop
strings, length, aborts, errors) are computed and thrown away, and every other step (prefill,
new requests or calls waiting at the doors, grammar compiles pending) runs as in the plain loop.

Constrained requests: a grammar's mask for step N+1 needs the matcher to have accepted step N's
token, so a batch holding one is not scheduled ahead (as SGLang did before it resolved masks
after the fact); the same holds for penalties and ``min_new_tokens``, which count the output.
Unseeded sampling draws from the engine's shared generator, and thrown-away rows consume draws
too, so only greedy and seeded requests are reproducible between the two loops.

The device worker resolves future tokens on the host from step N's result (the tokens are
already on the host by then: ``ModelRunner.run`` returns lists); on CUDA this leaves the launch
of step N+1 between the two forwards, which CUDA graphs make one replay.
"""

from __future__ import annotations

import dataclasses
import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Protocol

from radixlm.runtime.engine.delivery import final_output, stream_chunk
from radixlm.runtime.engine.grammar_compiler import GrammarCompiler
from radixlm.runtime.engine.inspection import RequestLog
from radixlm.runtime.model.memory_placement import release_free_memory
from radixlm.runtime.model.model_runner import ModelRunner
from radixlm.runtime.scheduler.batch import BatchResult, ScheduledBatch
from radixlm.runtime.scheduler.decode_ahead import resolve_future_tokens
from radixlm.runtime.scheduler.req import Req
from radixlm.runtime.scheduler.scheduler import Scheduler

IDLE_RELEASE_S = 1.0  # idle this long after a batch: the heap's free pages go back to the OS, once
RELEASE_AFTER_EXTEND_TOKENS = 256  # a step that extended this many tokens hands its freed pages back
logger = logging.getLogger("radixlm.engine")


class StepTimers:
    """Counters for the per-step engine overhead (time outside the model forward)."""

    def __init__(self) -> None:
        self.steps = self.decode_steps = 0
        self.step_s = self.forward_s = self.decode_step_s = self.decode_forward_s = 0.0
        self.decode_tokens = 0
        self.prefill_tokens = 0  # prompt (and spliced) tokens computed by extend steps

    def add(self, is_decode: bool, bs: int, step_s: float, forward_s: float, prefill_tokens: int = 0,
            mixed_decode: int = 0) -> None:
        """Count one step: ``bs`` decoded tokens (a request each, and a verify step's kept drafts); an extend
        step's ``prefill_tokens`` and decode rows."""
        self.steps += 1
        self.prefill_tokens += prefill_tokens
        self.decode_tokens += mixed_decode
        self.step_s += step_s
        self.forward_s += forward_s
        if is_decode:
            self.decode_steps += 1
            self.decode_step_s += step_s
            self.decode_forward_s += forward_s
            self.decode_tokens += bs

    def as_dict(self) -> dict[str, float]:
        return dict(self.__dict__)


class EngineLoop:
    """Runs the scheduler/runner steps in a daemon thread."""

    def __init__(self, scheduler: Scheduler, runner: ModelRunner, grammar: GrammarCompiler,
                 overlap: bool = False) -> None:
        self.scheduler = scheduler
        self.runner = runner
        self.grammar = grammar
        self.timers = StepTimers()
        self.prompt_tokens = self.cached_tokens = self.finished_requests = 0
        self.request_log = RequestLog()  # the last finished requests (the dashboard's)
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._inbox: deque[Req] = deque()
        self._aborts: deque[str] = deque()
        self._calls: deque[tuple[Callable[[], Any], Future]] = deque()
        self._inflight: list[Req] = []
        self._stopped = False
        self.idle_releases = 0  # idle periods whose freed heap pages were handed back
        self.extend_releases = 0  # long extend steps whose freed heap pages were handed back
        # on the CPU only: a GPU's activations live in the device allocator, not this heap
        self.release_after_extend = getattr(getattr(runner, "device", None), "type", None) == "cpu"
        self._ran_since_release = False
        self.overlap = OverlapStepper(self, DeviceWorker(runner.run)) if overlap else None
        self._thread = threading.Thread(target=self._run, name="radixlm-engine", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------ doors (any thread)

    def submit(self, reqs: list[Req]) -> None:
        with self._wake:
            if self._stopped:
                raise RuntimeError("engine is shut down")
            self._inbox.extend(reqs)
            self._wake.notify()

    def abort(self, rid: str) -> None:
        with self._wake:
            self._aborts.append(rid)
            self._wake.notify()

    def num_queued(self) -> int:
        """Requests not yet admitted (submitted, compiling a grammar, or waiting)."""
        return len(self._inbox) + len(self.grammar) + len(self.scheduler.waiting)

    def call(self, fn: Callable[[], Any]) -> Any:
        """Run ``fn`` in the loop thread between steps and return its result."""
        future: Future = Future()
        with self._wake:
            if self._stopped:
                raise RuntimeError("engine is shut down")
            self._calls.append((fn, future))
            self._wake.notify()
        return future.result()

    def stop(self) -> None:
        with self._wake:
            self._stopped = True
            self._wake.notify()
        self._thread.join(timeout=30)
        if self.overlap is not None:
            self.overlap.worker.stop()

    # ------------------------------------------------------------------ the loop

    def _run(self) -> None:
        progress = True
        while True:
            with self._wake:
                if self._stopped:
                    break
                release = False
                if not self._has_ready_work(progress):
                    # pending grammars are polled; otherwise sleep until a door is used (or, after
                    # a batch ran, until the idle period is long enough to release memory)
                    busy = bool(len(self.grammar) or self.scheduler.has_work())
                    idle_wait = IDLE_RELEASE_S if self._ran_since_release else None
                    woken = self._wake.wait(timeout=0.005 if busy else idle_wait)
                    if self._stopped:
                        break
                    release = not busy and not woken and self._ran_since_release
            if release and not self._has_ready_work(progress):
                self._release_idle_memory()
                continue
            try:
                progress = self._step()
                self._ran_since_release |= progress
            except Exception as e:  # noqa: BLE001 - a failed step must not hang callers
                logger.exception("engine step failed")
                progress = True
                self._fail_all(RuntimeError(f"engine step failed: {type(e).__name__}: {e}"))
        self._fail_all(RuntimeError("engine is shut down"))

    def _release_idle_memory(self) -> None:
        """Hand the heap's free pages back once for this idle period (the loop thread, no lock held)."""
        self._ran_since_release = False
        if release_free_memory():
            self.idle_releases += 1

    def _has_ready_work(self, progress: bool) -> bool:
        """New doors were used, or the scheduler has work and the last step ran a batch."""
        in_flight = self.overlap is not None and self.overlap.inflight is not None
        return bool(self._inbox or self._aborts or self._calls or in_flight
                    or (progress and self.scheduler.has_work()))

    def _step(self) -> bool:
        """One step; False when no batch could run."""
        if self.overlap is not None:
            return self.overlap.step()
        start = time.perf_counter()
        batch = self.next_batch()
        if batch is None:
            return False
        self._inflight = batch.reqs
        result = self.runner.run(batch)
        self.finish_step(batch, result, start)
        return True

    # ------------------------------------------------------------------ step parts (the loop thread)

    def next_batch(self) -> ScheduledBatch | None:
        """Use the doors, take compiled grammars, and schedule the next batch."""
        self._drain_doors()
        ready, failed = self.grammar.poll()
        for req in ready:
            self._enqueue(req)
        for req in failed:
            self._emit_final(req)
        batch = self.scheduler.schedule()
        if batch is not None and not batch.is_decode:
            now = time.perf_counter()
            for req in batch.reqs:
                if req.queue_time is None and req.queued_at is not None:
                    req.queue_time = now - req.queued_at
        return batch

    def _enqueue(self, req: Req) -> None:
        """Into the scheduler's waiting queue (a constrained request once its grammar compiled)."""
        req.queued_at = time.perf_counter()
        self.scheduler.add(req)

    def finish_step(self, batch: ScheduledBatch, result: BatchResult, start: float) -> None:
        """Apply a step's result, emit finished results and stream chunks, count the step."""
        self._inflight = batch.reqs
        finished = self.scheduler.process_batch_result(batch, result)
        self._inflight = []
        for req in finished:
            self._emit_final(req)
        for req in batch.reqs:
            if req.stream and not req.finished:
                self._emit_chunk(req)
        mixed = 0 if batch.is_decode else len(batch.decode_reqs)
        extended = 0 if batch.is_decode else batch.num_tokens - mixed
        produced = len(batch.reqs) + sum(result.accepted)  # a verify step's kept drafts are decoded tokens too
        step_s = time.perf_counter() - start
        self.timers.add(batch.is_decode, produced, step_s, result.forward_s, extended, mixed)
        self.scheduler.observe_step(batch, step_s)
        if extended >= RELEASE_AFTER_EXTEND_TOKENS and self.release_after_extend and release_free_memory():
            self.extend_releases += 1

    def doors_idle(self) -> bool:
        """Nothing waits at the doors but aborts (which apply between two steps either way)."""
        return not (self._inbox or self._calls or len(self.grammar))

    def drain_aborts(self) -> None:
        with self._wake:
            aborts, self._aborts = list(self._aborts), deque()
        for rid in aborts:
            self._abort(rid)

    def _drain_doors(self) -> None:
        with self._wake:
            new, self._inbox = list(self._inbox), deque()
            aborts, self._aborts = list(self._aborts), deque()
            calls, self._calls = list(self._calls), deque()
        for req in new:
            if req.params.constraint_kind is not None:
                self.grammar.start(req)
            else:
                self._enqueue(req)
        for rid in aborts:
            self._abort(rid)
        for fn, future in calls:
            try:
                future.set_result(fn())
            except Exception as e:  # noqa: BLE001 - handed to the caller
                future.set_exception(e)

    def _abort(self, rid: str) -> None:
        for req in self.grammar.cancel(rid) + self.scheduler.abort(rid):
            self._emit_final(req)

    def _emit_final(self, req: Req) -> None:
        self.finished_requests += 1
        try:
            self.request_log.record(req)
        except Exception:  # noqa: BLE001 - the record is for the dashboard; the result must still go out
            logger.exception("recording %s for the dashboard failed", req.rid)
        self.prompt_tokens += req.prompt_len
        self.cached_tokens += req.cached_tokens
        if req.error is None:
            try:
                payload = stream_chunk(req) if req.stream else final_output(req)
            except Exception as e:  # noqa: BLE001 - building this result failed: this request only
                logger.exception("building the result of %s failed", req.rid)
                req.error = e
        if req.error is not None:
            req.delivery.put("error", req.error)
        else:
            req.delivery.put("done", payload)

    def _emit_chunk(self, req: Req) -> None:
        """Send a running request's new output; a failure to build it fails that request alone."""
        try:
            chunk = stream_chunk(req)
        except Exception as e:  # noqa: BLE001 - e.g. its detokenizer raised
            logger.exception("streaming %s failed", req.rid)
            self.scheduler.fail(req, e)
            self._emit_final(req)
            return
        if chunk is not None:
            req.delivery.put("chunk", chunk)

    def _fail_all(self, error: Exception) -> None:
        with self._wake:
            inbox, self._inbox = list(self._inbox), deque()
        ahead = self.overlap.inflight_reqs() if self.overlap is not None else []
        if self.overlap is not None:
            self.overlap.reset()
        dropped = {id(r): r for r in inbox + self.grammar.drop_all() + self._inflight + ahead
                   + self.scheduler.reset()}
        self._inflight = []
        for req in dropped.values():
            req.delivery.put("error", error)


ResultFn = Callable[[], BatchResult]


class DeviceWorker:
    """Runs batches one after another in its own thread; ``launch`` returns at once."""

    def __init__(self, run: Callable[[ScheduledBatch], BatchResult]) -> None:
        self._run = run
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._serve, name="radixlm-device", daemon=True)
        self._thread.start()

    def launch(self, batch: ScheduledBatch, depends_on: ResultFn | None = None) -> Future:
        """Queue ``batch``; its future tokens are resolved from ``depends_on()`` (the batch before)."""
        future: Future = Future()
        self._jobs.put((batch, depends_on, future))
        return future

    def stop(self) -> None:
        self._jobs.put(None)
        self._thread.join(timeout=30)

    def _serve(self) -> None:
        while (job := self._jobs.get()) is not None:
            batch, depends_on, future = job
            try:
                if depends_on is not None:
                    batch = _with_tokens(batch, depends_on().next_token_ids)
                future.set_result(self._run(batch))
            except BaseException as e:  # noqa: BLE001 - handed to whoever waits for the step
                future.set_exception(e)


def _with_tokens(batch: ScheduledBatch, prev_token_ids: list[int]) -> ScheduledBatch:
    spec = dataclasses.replace(batch.spec, input_ids=resolve_future_tokens(batch.spec.input_ids, prev_token_ids))
    return dataclasses.replace(batch, spec=spec)


class LoopSide(Protocol):
    """What the stepper needs of ``EngineLoop``: the doors and the post-processing."""

    scheduler: Scheduler

    def doors_idle(self) -> bool: ...

    def next_batch(self) -> ScheduledBatch | None: ...

    def finish_step(self, batch: ScheduledBatch, result: BatchResult, start: float) -> None: ...

    def drain_aborts(self) -> None: ...


@dataclass
class Inflight:
    """A batch on the device: ``result()`` waits for its rows (those of its requests)."""

    batch: ScheduledBatch
    result: ResultFn
    start: float


class OverlapStepper:
    """The overlapped step of ``EngineLoop`` (module docstring)."""

    def __init__(self, loop: LoopSide, worker: DeviceWorker) -> None:
        self.loop = loop
        self.worker = worker
        self.inflight: Inflight | None = None
        self.num_ahead = 0  # steps scheduled while the previous one ran (for tests and stats)

    def inflight_reqs(self) -> list[Req]:
        return list(self.inflight.batch.reqs) if self.inflight is not None else []

    def reset(self) -> None:
        """Forget the batch in flight (after a failed step; the scheduler was reset)."""
        self.inflight = None

    def step(self) -> bool:
        """Launch a batch, or finish the one in flight (scheduling the next ahead when it may)."""
        if self.inflight is None:
            batch = self.loop.next_batch()
            if batch is None:
                return False
            self.inflight = Inflight(batch, self.worker.launch(batch).result, time.perf_counter())
            return True
        cur = self.inflight
        ahead = self.loop.scheduler.schedule_decode_ahead(cur.batch) if self.loop.doors_idle() else None
        ahead_future = self.worker.launch(ahead.batch, cur.result) if ahead is not None else None
        result = cur.result()
        self.inflight = None
        self.loop.finish_step(cur.batch, result, cur.start)
        if ahead is not None:
            self.num_ahead += 1
            self.loop.drain_aborts()
            live = self.loop.scheduler.commit_decode_ahead(ahead)
            if live is not None:
                self.inflight = Inflight(live, lambda: ahead.select(ahead_future.result()), time.perf_counter())
        return True
