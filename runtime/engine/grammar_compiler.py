"""``GrammarCompiler``: the engine side of constrained decoding: start, poll and cancel compiles.

A constrained request's grammar compiles in a backend worker process while the request waits
here, outside the scheduler (other requests keep running). ``poll`` hands back the requests whose
compile finished: each ready one carries its ``RequestMatcher`` in ``req.matcher`` and goes to the
scheduler, which from then on asks the matcher for its decisions itself. A compile error or
timeout fails just that request with the ``ConstraintError`` message. Cancelling a request (or
dropping them all) cancels its compile: the worker stops unless another request shares it.
A request whose params carry ``reasoning_end`` (the text that closes the model's reasoning) gets
its matcher behind a ``ReasoningGate``: the grammar applies only after that marker.
"""

from __future__ import annotations

import time
from concurrent.futures import Future
from typing import Any

from radixlm.runtime.engine.reasoning_gate import ReasoningGate
from radixlm.runtime.engine.request_matcher import RequestMatcher
from radixlm.runtime.scheduler.req import Req


class GrammarCompiler:
    """Owns the ``GrammarBackend`` (created on the first constrained request) and the compiling requests."""

    def __init__(self, tokenizer: Any, vocab_size: int, compile_timeout_s: float,
                 enable_jump_forward: bool, max_memory_mb: int | None = None,
                 grammar_backend: str = "radixlm", cache_mb: int | None = None,
                 matcher_max_mb: int | None = None) -> None:
        self.tokenizer = tokenizer
        self.vocab_size = vocab_size
        self.compile_timeout_s = compile_timeout_s
        self.grammar_backend = grammar_backend  # radixlm | xgrammar | llguidance (ServerArgs.grammar_backend)
        self.max_memory_mb = max_memory_mb  # None: the backend's default (ServerArgs.grammar_compile_max_memory_mb)
        self.enable_jump_forward = enable_jump_forward
        # None: the backend's defaults (ServerArgs.grammar_cache_mb, grammar_matcher_max_mb)
        self.cache_options = {k: v for k, v in (("cache_mb", cache_mb), ("matcher_max_mb", matcher_max_mb))
                              if v is not None}
        self.eos_token_ids = frozenset(tokenizer.eos_token_ids)
        self._backend = None
        self._pending: dict[Req, Future | None] = {}  # None: the submit itself failed (req.error)
        self._marker_ids: dict[str, list[int]] = {}  # reasoning_end text -> its token ids

    def __len__(self) -> int:
        return len(self._pending)

    def backend(self) -> Any:
        if self._backend is None:
            from radixlm.constrained import DEFAULT_MAX_MEMORY_MB, GrammarBackend, TokenizerVocab

            vocab = TokenizerVocab.from_tokenizer(self.tokenizer, vocab_size=self.vocab_size)
            memory = DEFAULT_MAX_MEMORY_MB if self.max_memory_mb is None else self.max_memory_mb
            self._backend = GrammarBackend(vocab, compile_timeout_s=self.compile_timeout_s,
                                           max_memory_mb=memory, core=self.grammar_backend,
                                           **self.cache_options)
        return self._backend

    def close(self) -> None:
        if self._backend is not None:
            self._backend.shutdown()

    def cache_entries(self) -> list[dict[str, Any]]:
        """The compiled-grammar cache's entries (empty before the first constrained request)."""
        return self._backend.cache_entries() if self._backend is not None else []

    def flush_cache(self) -> int:
        """Empty the compiled-grammar cache (compiles in flight go on); how many entries went."""
        return self._backend.flush_cache() if self._backend is not None else 0

    def start(self, req: Req) -> None:
        """Submit ``req``'s constraint for compilation; it waits here until ``poll`` returns it."""
        future = None
        started = time.perf_counter()
        try:
            future = self.backend().submit(req.params, caller=req.caller)  # fair between callers
        except Exception as e:  # noqa: BLE001 - the request fails, the engine goes on
            req.error = _as_value_error(e)
        # cached: the grammar was ready at submission (a compile-cache hit)
        req.constraint_stats = {"kind": req.params.constraint_kind, "started": started,
                                "cached": future is not None and future.done()}
        self._pending[req] = future

    def poll(self) -> tuple[list[Req], list[Req]]:
        """``(ready, failed)``: requests whose compile finished; failed ones are finished as ``abort``."""
        ready, failed = [], []
        for req, future in list(self._pending.items()):
            if future is not None and not future.done():
                continue
            del self._pending[req]
            if req.error is None:
                try:
                    compiled = future.result()
                    stats = req.constraint_stats
                    stats["wait_s"] = time.perf_counter() - stats.pop("started")
                    stats["compile_s"] = getattr(compiled, "compile_s", None)
                    req.matcher = self._matcher(req, compiled)
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
                                 self.enable_jump_forward and not req.params.disable_jump_forward,
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
                if future is not None:
                    future.cancel()
                req.finish("abort", message="aborted")
                cancelled.append(req)
        return cancelled

    def drop_all(self) -> list[Req]:
        """Forget every compiling request (the engine is failing them all) and cancel their
        compiles; return them."""
        dropped, self._pending = self._pending, {}
        for future in dropped.values():
            if future is not None:
                future.cancel()
        return list(dropped)


def _as_value_error(e: Exception) -> ValueError:
    return e if isinstance(e, ValueError) else ValueError(f"constraint: {e}")
