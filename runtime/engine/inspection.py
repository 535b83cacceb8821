"""What the dashboard reads of a running engine: the radix tree's largest branches, its evictions,
the last finished requests and the compiled-grammar cache (``Engine.inspect``).

The tree is read in the engine thread between two steps (``EngineLoop.call``), so it never changes
under the walk; the walk is bounded (``radix_cache.inspection.snapshot_tree``), so the step loop waits at most a
few milliseconds. The request log and the grammar cache have locks of their own.

``RequestLog``: the last finished requests, one record each, for the dashboard.

The engine thread appends a record when it delivers a request's end; any thread reads the ring
(under its lock, copying). A record holds what the engine knows of the request; the caller's
tenant is read off its radix-cache namespace (``extra_key``).

What an engine loaded and how it runs, as the one start-up line ``radixlm serve`` prints.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from radixlm.runtime.model.model_loader import kernels, parameter_count, threads, weight_format
from radixlm.runtime.scheduler.req import Req

if TYPE_CHECKING:  # the engine loop keeps a RequestLog: its module imports this one
    from radixlm.runtime.engine.grammar_compiler import GrammarCompiler
    from radixlm.runtime.engine.step_loop import EngineLoop
    from radixlm.runtime.scheduler.scheduler import Scheduler

MAX_NODES_LIMIT = 512
SHOWN_IDS_LIMIT = 256


def inspect_engine(loop: EngineLoop, scheduler: Scheduler, grammar: GrammarCompiler, max_nodes: int = 64,
                   shown_ids: int = 32, events_since: int = 0, requests_since: int = 0) -> dict[str, Any]:
    """``{"radix_cache", "tree", "evictions", "eviction_seq", "requests", "request_seq", "grammars"}``.

    ``tree``: ``RadixCache.snapshot(max_nodes, shown_ids)`` (None with the radix cache disabled);
    ``evictions``: the events after ``events_since``, each with ``age_s``; ``requests``: the
    request records after ``requests_since`` (``request_record``); ``grammars``: the
    compile cache's entries. ``ValueError`` for bounds out of range."""
    for name, value, hi in (("max_nodes", max_nodes, MAX_NODES_LIMIT), ("shown_ids", shown_ids, SHOWN_IDS_LIMIT)):
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= hi:
            raise ValueError(f"{name} must be an integer in [1, {hi}], got {value!r}")
    tree = scheduler.cache.tree

    def read() -> tuple[Any, list[dict[str, Any]], int]:
        if tree is None:
            return None, [], 0
        return tree.snapshot(max_nodes, shown_ids), tree.evictions.since(events_since), tree.evictions.seq

    snapshot, evictions, eviction_seq = loop.call(read)
    now = time.monotonic()
    for event in evictions:
        event["age_s"] = max(now - event.pop("time"), 0.0)
    return {"radix_cache": tree is not None, "tree": snapshot, "evictions": evictions,
            "eviction_seq": eviction_seq, "requests": loop.request_log.recent(requests_since),
            "request_seq": loop.request_log.seq, "grammars": grammar.cache_entries()}


class RequestLog:
    """A bounded ring of finished-request records numbered by ``seq``."""

    def __init__(self, capacity: int = 200) -> None:
        self.seq = 0
        self._lock = threading.Lock()
        self._records: deque[dict[str, Any]] = deque(maxlen=capacity)

    def record(self, req: Req) -> None:
        """Append ``req``'s record (called once, when its end is delivered)."""
        record = request_record(req)
        with self._lock:
            self.seq += 1
            record["seq"] = self.seq
            self._records.append(record)

    def recent(self, since: int = 0, limit: int = 100) -> list[dict[str, Any]]:
        """The records numbered after ``since``, newest last, at most ``limit`` of them."""
        with self._lock:
            out = [dict(r) for r in self._records if r["seq"] > since]
        return out[-limit:] if limit > 0 else []


def request_record(req: Req) -> dict[str, Any]:
    """What the dashboard shows of one finished request.

    ``ttft_s``: submission to first output token; ``e2e_s``: submission to now; ``decode_tps``:
    output tokens after the first over the time after it (None with fewer than two);
    ``forced_tokens``: tokens a jump-forward splice added; ``closed_tokens``: tokens budget-aware
    completion added; ``constraint``: ``{"kind", "cached", "wait_s", "compile_s"}`` or None."""
    now = time.perf_counter()
    created = req.delivery.created_at if req.delivery is not None else now
    ttft = None if req.first_token_at is None else req.first_token_at - created
    e2e = now - created
    tps = None
    if ttft is not None and req.output_len > 1 and e2e > ttft:
        tps = (req.output_len - 1) / (e2e - ttft)
    stats = req.constraint_stats
    constraint = None
    if stats is not None:
        constraint = {k: stats.get(k) for k in ("kind", "cached", "wait_s", "compile_s")}
    finish = req.finished_reason
    return {"rid": req.rid, "namespace": req.extra_key, "finished_at": time.time(),
            "prompt_tokens": req.prompt_len, "cached_tokens": req.cached_tokens,
            "completion_tokens": req.output_len, "forced_tokens": req.forced_tokens,
            "closed_tokens": req.closed_tokens, "constraint": constraint, "ttft_s": ttft, "e2e_s": e2e,
            "decode_tps": tps, "finish_reason": finish.type if finish is not None else None,
            "error": None if req.error is None else f"{type(req.error).__name__}: {req.error}"}


@dataclass(frozen=True)
class EngineSummary:
    """The facts of a loaded engine a user checks first."""

    model: str  # ORG/NAME for a hub snapshot, else the checkpoint's folder or file name
    architecture: str
    parameters: int  # weights' logical elements (a tied embedding counted once)
    weight_format: str  # "float32", "bfloat16", "int8 (weight-only)", "GGUF Q5_0 60%, Q8_0 27%, ...", ...
    device: str
    threads: int
    kv_tokens: int  # KV-cache capacity, in tokens
    max_running_requests: int
    grammar_backend: str
    sampling_defaults: str = ""  # SamplingDefaults.describe(): what an unset temperature etc. become
    kernels: str = ""  # on the CPU, model_loader.kernels(): "native CPU kernels avx2", or torch ops and why
    kv_dtype: str = ""  # the KV cache's dtype: "float16", "float32", ...

    def line(self) -> str:
        """One line: ``Qwen/Qwen2.5-0.5B (qwen2, 494M parameters, int8 (weight-only) weights) on cpu ...``."""
        where = f"{self.device} with {self.threads} thread{'s' * (self.threads != 1)}"
        kv = f" ({self.kv_dtype})" if self.kv_dtype else ""
        return (f"{self.model} ({self.architecture}, {count(self.parameters)} parameters, {self.weight_format} "
                f"weights) on {where}; KV cache {self.kv_tokens:,} tokens{kv}; up to {self.max_running_requests} "
                f"running requests; grammar backend {self.grammar_backend}"
                + (f"; sampling defaults {self.sampling_defaults}" if self.sampling_defaults else "")
                + (f"; {self.kernels}" if self.kernels else ""))


def summarize(model_name: str, args: Any, runner: Any, kv_tokens: int, sampling_defaults: str = "") -> EngineSummary:
    """The summary of an engine from its ``ServerArgs`` and ``ModelRunner``."""
    return EngineSummary(
        model=model_name, architecture=runner.model_config.architecture, parameters=parameter_count(runner.model),
        weight_format=weight_format(args.quantization, runner.dtype, runner.model), device=str(runner.device),
        threads=threads(), kv_tokens=kv_tokens, max_running_requests=args.max_running_requests,
        grammar_backend=args.grammar_backend, sampling_defaults=sampling_defaults,
        kernels=kernels() if str(runner.device).startswith("cpu") else "",
        kv_dtype=str(runner.kv_dtype).removeprefix("torch."))


def count(n: int) -> str:
    """``494M``, ``1.24B``, ``8.5K``: a parameter count as people write it."""
    for unit, size in (("B", 10**9), ("M", 10**6), ("K", 10**3)):
        if n >= size:
            value = n / size
            return f"{value:.3g}{unit}" if value < 100 else f"{value:.0f}{unit}"
    return str(n)
