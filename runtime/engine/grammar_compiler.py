"""``GrammarCompiler``: the engine side of constrained decoding: start, poll and cancel compiles.

A constrained request's grammar compiles in a backend worker process while the request waits
here, outside the scheduler (other requests keep running). ``poll`` hands back the requests whose
compile finished: each ready one carries its ``RequestMatcher`` in ``req.constraint`` and goes to the
scheduler, which from then on asks the matcher for its decisions itself. A compile error or
timeout fails just that request with the ``ConstraintError`` message. Cancelling a request (or
dropping them all) cancels its compile: the worker stops unless another request shares it.
A request whose params carry ``reasoning_end`` (the text that closes the model's reasoning) gets
its matcher behind a ``ReasoningGate``: the grammar applies only after that marker.

The backend itself is built in a background thread (``GrammarBackendStart``), at engine start-up
(``start_backend``, ``--grammar-warmup``) or on the first constrained request; a request that
arrives before it is ready waits here (``AWAITING_BACKEND``) and is submitted by ``poll``.

``GrammarBackendStart``: the backend built once, in a background thread. Building a ``GrammarBackend`` costs seconds at a 152k-token vocabulary (the token table, the mask
filters' per-vocabulary tables, the compile workers' start, the native tokenizer): paid by the
first constrained request, and on the engine's thread, it stalled every request. Here one daemon
thread builds it, then warms it up (``warm_up_backend``: one compile through the pool and a
matcher walk); ``future`` resolves to the backend as soon as it can take compiles (before the
warm-up walk, which only fills caches the first request would otherwise fill). The engine starts
it at start-up (``--grammar-warmup``, the default) or on its first constrained request; either
way there is one backend, and a request that arrives early waits for what is still missing.

``close()`` never waits: a backend finished after it is shut down by the thread itself, and no
warm-up follows it. At interpreter exit the builds still running are closed and waited for
(``CLOSE_WAIT_S`` at most): a process that exits while the thread is inside native code (torch,
the tokenizer) aborts ("terminate called without an active exception").
"""

from __future__ import annotations

import atexit
import logging
import threading
import time
import weakref
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from radixlm.runtime.engine.constraints import ReasoningGate, RequestMatcher
from radixlm.runtime.scheduler.req import Req

logger = logging.getLogger(__name__)

AWAITING_BACKEND = "awaiting-backend"  # a pending request's entry while the backend is still starting
CLOSE_WAIT_S = 60.0  # the longest exit waits for a build still running (a 152k vocabulary: seconds)
_RUNNING: weakref.WeakSet = weakref.WeakSet()  # every start whose thread may still run


@atexit.register
def _finish_running_starts() -> None:
    """Close every start and wait for its thread, so none is inside native code as the process ends."""
    for start in list(_RUNNING):
        start.close()
        start.join(CLOSE_WAIT_S)


class GrammarCompiler:
    """Owns the ``GrammarBackend`` (built in the background: see the module docstring) and the
    compiling requests."""

    def __init__(self, tokenizer: Any, vocab_size: int, compile_timeout_s: float,
                 max_memory_mb: int | None = None,
                 grammar_backend: str = "radixlm", cache_mb: int | None = None,
                 matcher_max_mb: int | None = None) -> None:
        self.tokenizer = tokenizer
        self.vocab_size = vocab_size
        self.compile_timeout_s = compile_timeout_s
        self.grammar_backend = grammar_backend  # radixlm | xgrammar | llguidance (ServerArgs.grammar_backend)
        self.max_memory_mb = max_memory_mb  # None: the backend's default (ServerArgs.grammar_compile_max_memory_mb)
        # None: the backend's defaults (ServerArgs.grammar_cache_mb, grammar_matcher_max_mb)
        self.cache_options = {k: v for k, v in (("cache_mb", cache_mb), ("matcher_max_mb", matcher_max_mb))
                              if v is not None}
        self.eos_token_ids = frozenset(tokenizer.eos_token_ids)
        self._start: GrammarBackendStart | None = None
        self._closed = False
        # None: the submit itself failed (req.error); AWAITING_BACKEND: not submitted yet
        self._pending: dict[Req, Future | str | None] = {}
        self.num_requests = 0  # constrained requests submitted
        self.num_failed = 0  # of them, those whose grammar failed (error, timeout, over a bound)
        self._marker_ids: dict[str, list[int]] = {}  # reasoning_end text -> its token ids

    def __len__(self) -> int:
        return len(self._pending)

    def start_backend(self, warm_up: bool = True) -> GrammarBackendStart:
        """Start building the backend in the background unless it is built or being built (a
        failed start is tried again); with ``warm_up``, then fill its first-use caches."""
        if self._closed:
            raise RuntimeError("the engine is shut down: no grammar backend starts")
        if self._start is None or self._start.failed():
            self._start = GrammarBackendStart(self._build_backend, _warm_up if warm_up else None)
        return self._start

    def _build_backend(self) -> Any:
        from radixlm.constrained import DEFAULT_MAX_MEMORY_MB, GrammarBackend, TokenizerVocab

        vocab = TokenizerVocab.from_tokenizer(self.tokenizer, vocab_size=self.vocab_size)
        memory = DEFAULT_MAX_MEMORY_MB if self.max_memory_mb is None else self.max_memory_mb
        return GrammarBackend(vocab, compile_timeout_s=self.compile_timeout_s, max_memory_mb=memory,
                              core=self.grammar_backend, **self.cache_options)

    def backend(self) -> Any:
        """The backend, waiting for its start if needed (never from the engine thread: it blocks)."""
        return self.start_backend(warm_up=False).future.result()

    def backend_state(self) -> dict[str, Any]:
        """Where the backend's start stands (``GrammarBackendStart.state``; ``not started`` before)."""
        if self._start is None:
            return {"state": "not started", "ready_s": None, "warm_up": None, "error": None}
        return self._start.state()

    def counts(self) -> dict[str, int]:
        """Grammar requests so far: submitted, failed, served from the compile cache, timed out."""
        backend = self._ready_backend()
        stats = backend.stats if backend is not None else {}
        return {"requests": self.num_requests, "failed": self.num_failed, "cache_hits": stats.get("hits", 0),
                "timeouts": stats.get("timeouts", 0)}

    def _ready_backend(self) -> Any | None:
        start = self._start
        if start is None or not start.future.done() or start.future.exception() is not None:
            return None
        return start.future.result()

    def close(self) -> None:
        self._closed = True
        if self._start is not None:
            self._start.close()

    def cache_entries(self) -> list[dict[str, Any]]:
        """The compiled-grammar cache's entries (empty before the first constrained request)."""
        backend = self._ready_backend()
        return backend.cache_entries() if backend is not None else []

    def flush_cache(self) -> int:
        """Empty the compiled-grammar cache (compiles in flight go on); how many entries went."""
        backend = self._ready_backend()
        return backend.flush_cache() if backend is not None else 0

    def start(self, req: Req) -> None:
        """Submit ``req``'s constraint for compilation; it waits here until ``poll`` returns it."""
        if not self.start_backend(warm_up=False).future.done():  # its own compile warms it
            self._pending[req] = AWAITING_BACKEND
            return
        self._submit(req)

    def _submit(self, req: Req) -> None:
        future = None
        started = time.perf_counter()
        self.num_requests += 1
        try:
            future = self._start.future.result().submit(req.params, caller=req.caller)  # fair between callers
        except Exception as e:  # noqa: BLE001 - the request fails, the engine goes on
            req.error = _as_value_error(e)
        # cached: the grammar was ready at submission (a compile-cache hit)
        req.constraint_stats = {"kind": req.params.constraint_kind, "started": started,
                                "cached": future is not None and future.done()}
        self._pending[req] = future

    def poll(self) -> tuple[list[Req], list[Req]]:
        """``(ready, failed)``: requests whose compile finished; failed ones are finished as ``abort``."""
        ready, failed = [], []
        if self._start is not None and self._start.future.done():
            for req in [r for r, f in self._pending.items() if f is AWAITING_BACKEND]:
                self._submit(req)
        for req, future in list(self._pending.items()):
            if future is AWAITING_BACKEND or (future is not None and not future.done()):
                continue
            del self._pending[req]
            if req.error is None:
                try:
                    compiled = future.result()
                    stats = req.constraint_stats
                    stats["wait_s"] = time.perf_counter() - stats.pop("started")
                    stats["compile_s"] = getattr(compiled, "compile_s", None)
                    req.constraint = self._matcher(req, compiled)
                except Exception as e:  # noqa: BLE001 - ConstraintError, timeout: this request only
                    req.error = _as_value_error(e)
            if req.error is None:
                ready.append(req)
            else:
                self.num_failed += 1
                req.finish("abort", message=str(req.error))
                failed.append(req)
        return ready, failed

    def _matcher(self, req: Req, compiled: Any) -> Any:
        """The request's constraint: its grammar's matcher, gated behind its reasoning marker if any."""
        matcher = RequestMatcher(compiled.matcher(), self.tokenizer, self.eos_token_ids,
                                 req.params.budget_aware_completion)
        end = req.params.reasoning_end
        if not end:
            return matcher
        if end not in self._marker_ids:
            self._marker_ids[end] = self.tokenizer.encode(end, add_special_tokens=False)
        return ReasoningGate(matcher, self.tokenizer, end, self._marker_ids[end])

    def cancel(self, rid: str) -> list[Req]:
        """Stop compiling for the requests with this rid (or group rid); they finish as ``abort``."""
        cancelled = []
        for req, future in list(self._pending.items()):
            if rid in (req.rid, req.group_rid):
                del self._pending[req]
                if isinstance(future, Future):
                    future.cancel()
                req.finish("abort", message="aborted")
                cancelled.append(req)
        return cancelled

    def drop_all(self) -> list[Req]:
        """Forget every compiling request (the engine is failing them all) and cancel their
        compiles; return them."""
        dropped, self._pending = self._pending, {}
        for future in dropped.values():
            if isinstance(future, Future):
                future.cancel()
        return list(dropped)


def _warm_up(backend: Any) -> dict[str, Any]:
    """The backend's warm-up, then the heap's free pages handed back once: building the
    per-vocabulary tables frees as much again in temporaries, which the engine's malloc tuning
    would otherwise keep resident (``memory_placement.release_free_memory``)."""
    from radixlm.constrained import warm_up_backend
    from radixlm.runtime.model.memory_placement import release_free_memory

    done = warm_up_backend(backend)
    release_free_memory()
    return done


def _as_value_error(e: Exception) -> ValueError:
    return e if isinstance(e, ValueError) else ValueError(f"constraint: {e}")


class GrammarBackendStart:
    """One background build of a grammar backend; ``state()`` says where it stands."""

    def __init__(self, build: Callable[[], Any], warm_up: Callable[[Any], dict[str, Any]] | None) -> None:
        self.future: Future = Future()
        self.builds = 0  # backends built: at most one per start
        self._build = build
        self._warm_up = warm_up
        self._lock = threading.Lock()
        self._closed = False
        self._started_at = time.perf_counter()
        self._ready_s: float | None = None
        self._warm: dict[str, Any] | None = None
        self._thread = threading.Thread(target=self._run, name="grammar-backend-start", daemon=True)
        _RUNNING.add(self)
        self._thread.start()

    def _run(self) -> None:
        try:
            backend = self._build()
        except BaseException as e:  # noqa: BLE001 - reported to the waiting requests and in state()
            logger.exception("the grammar backend failed to start")
            self.future.set_exception(e)
            return
        with self._lock:  # close() reads the future under this lock: the backend is shut down once
            self.builds += 1
            closed = self._closed
            if not closed:
                self.future.set_result(backend)
        if closed:
            backend.shutdown()
            self.future.set_exception(RuntimeError("the engine shut down while the grammar backend started"))
            return
        if self._warm_up is not None and not self._closed:
            try:
                self._warm = self._warm_up(backend)
            except Exception:  # noqa: BLE001 - an optimisation: requests compile and mask regardless
                logger.exception("the grammar backend's warm-up failed")
                self._warm = {"compile": "error"}
        self._ready_s = time.perf_counter() - self._started_at
        logger.info("grammar backend ready in %.2f s (warm-up: %s)", self._ready_s, self._warm)

    def state(self) -> dict[str, Any]:
        """``state`` (``starting``, ``ready`` or ``failed``), ``ready_s`` (from start to ready,
        warm-up included), ``warm_up`` (what the warm-up did; None without one) and ``error``."""
        future = self.future
        if future.done() and future.exception() is not None:
            return {"state": "failed", "ready_s": None, "warm_up": None, "error": str(future.exception())}
        ready = self._ready_s
        return {"state": "starting" if ready is None else "ready",
                "ready_s": None if ready is None else round(ready, 3), "warm_up": self._warm, "error": None}

    def failed(self) -> bool:
        return self.future.done() and self.future.exception() is not None

    def join(self, timeout: float | None = None) -> bool:
        """Wait for the thread (build and warm-up) to end; True if it did (for tests and benchmarks)."""
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def close(self) -> None:
        """Shut the backend down (now if built, else when the build ends); returns at once."""
        with self._lock:
            self._closed = True
            built = self.future.done() and self.future.exception() is None
        if built:
            self.future.result().shutdown()
