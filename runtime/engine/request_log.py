"""``RequestLog``: the last finished requests, one record each, for the dashboard.

The engine thread appends a record when it delivers a request's end; any thread reads the ring
(under its lock, copying). A record holds what the engine knows of the request; the caller's
tenant is read off its radix-cache namespace (``extra_key``).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import Any

from radixlm.runtime.scheduler.req import Req


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
