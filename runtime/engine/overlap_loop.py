"""Overlap scheduling: the CPU schedules step N+1 and post-processes step N while the device works.

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
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Protocol

from radixlm.runtime.scheduler.batch import BatchResult, ScheduledBatch
from radixlm.runtime.scheduler.decode_ahead import resolve_future_tokens
from radixlm.runtime.scheduler.req import Req
from radixlm.runtime.scheduler.scheduler import Scheduler

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
