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
"""

from __future__ import annotations

import time
from concurrent.futures import Future
from typing import Any

from radixlm.runtime.engine.grammar_backend_start import GrammarBackendStart
from radixlm.runtime.engine.reasoning_gate import ReasoningGate
from radixlm.runtime.engine.request_matcher import RequestMatcher
from radixlm.runtime.scheduler.req import Req

AWAITING_BACKEND = "awaiting-backend"  # a pending request's entry while the backend is still starting


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
    would otherwise keep resident (``cpu_malloc.release_free_memory``)."""
    from radixlm.constrained import warm_up_backend
    from radixlm.runtime.model.cpu_malloc import release_free_memory

    done = warm_up_backend(backend)
    release_free_memory()
    return done


def _as_value_error(e: Exception) -> ValueError:
    return e if isinstance(e, ValueError) else ValueError(f"constraint: {e}")
