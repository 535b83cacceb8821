"""``SeriesSampler``: the dashboard's time series, one sample per second over the last minutes.

Every figure comes from what the server already keeps: ``Engine.get_stats()`` (running and queued
requests, KV use, the step timers' prefill and decode token counts, the prompt and cached token
totals) and the HTTP layer's latency histograms (``ServerMetrics.ttft`` and ``.itl``). Rates are
differences between two samples; percentiles are read off the histograms' growth over the last
``WINDOW_S`` seconds, interpolated inside a bucket as Prometheus' ``histogram_quantile`` does
(so they are as fine as SGLang's buckets allow).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from radixlm.runtime.server.metrics import Histogram

logger = logging.getLogger("radixlm.server.dashboard")

HISTORY_S = 300  # samples kept: the last five minutes (what the page's charts show)
WINDOW_S = 10  # seconds of histogram growth a percentile sample covers
QUANTILES = (0.5, 0.9, 0.99)


def window_quantile(bounds: tuple[float, ...], counts: list[int], q: float) -> float | None:
    """Quantile ``q`` of bucket ``counts`` (``len(bounds) + 1`` buckets, the last +Inf), linearly
    interpolated inside its bucket; None when empty. The +Inf bucket answers its lower bound."""
    total = sum(counts)
    if total <= 0:
        return None
    target, seen = q * total, 0
    for i, n in enumerate(counts):
        if n and seen + n >= target:
            lo = bounds[i - 1] if i > 0 else 0.0
            if i == len(bounds):
                return lo
            return lo + (bounds[i] - lo) * (target - seen) / n
        seen += n
    return bounds[-1]


class _Grown:
    """A histogram's bucket counts over time, to read the growth of the last seconds."""

    def __init__(self, hist: Histogram) -> None:
        self.hist = hist
        self.past: deque[list[int]] = deque(maxlen=WINDOW_S + 1)

    def quantiles(self) -> list[float | None]:
        now = list(self.hist.counts)
        self.past.append(now)
        old = self.past[0]
        grown = [a - b for a, b in zip(now, old)] if len(self.past) > 1 else [0] * len(now)
        return [window_quantile(self.hist.bounds, grown, q) for q in QUANTILES]


class SeriesSampler:
    """Samples ``stats()`` (``Engine.get_stats``) and the latency histograms once per ``period_s``."""

    def __init__(self, stats: Callable[[], dict[str, Any]], ttft: Histogram, itl: Histogram,
                 period_s: float = 1.0, history: int = HISTORY_S) -> None:
        self.stats = stats
        self.period_s = period_s
        self.samples: deque[dict[str, Any]] = deque(maxlen=history)
        self._ttft, self._itl = _Grown(ttft), _Grown(itl)
        self._last: tuple[float, dict[str, Any]] | None = None
        self._task: asyncio.Task | None = None
        self.count = 0  # samples taken so far (a reader's cursor)

    def sample(self) -> dict[str, Any]:
        """Take one sample now and append it (also called by the periodic task)."""
        now, stats = time.monotonic(), self.stats()
        timers = stats.get("timers") or {}
        spec = stats.get("speculative") or {}
        figures = {"prefill": timers.get("prefill_tokens", 0), "decode": timers.get("decode_tokens", 0),
                   "prompt": stats.get("prompt_tokens", 0), "cached": stats.get("cached_tokens", 0),
                   "verified": spec.get("spec_verify_steps", 0), "kept": spec.get("spec_accepted_tokens", 0)}
        rates = {"prefill": 0.0, "decode": 0.0}
        hit = kept = None
        if self._last is not None:
            then, before = self._last
            dt = max(now - then, 1e-6)
            rates = {k: max(figures[k] - before[k], 0) / dt for k in rates}
            asked = figures["prompt"] - before["prompt"]
            hit = (figures["cached"] - before["cached"]) / asked if asked > 0 else None
            steps = figures["verified"] - before["verified"]  # draft tokens the model kept per verify step
            kept = (figures["kept"] - before["kept"]) / steps if steps > 0 else None
        self._last = (now, figures)
        ttft, itl = self._ttft.quantiles(), self._itl.quantiles()
        point = {"t": time.time(), "prefill_tps": rates["prefill"], "decode_tps": rates["decode"],
                 "running": stats.get("num_running_reqs", 0), "queued": stats.get("num_queued_reqs", 0),
                 "kv_usage": stats.get("kv_usage", 0.0), "radix_tokens": stats.get("radix_cache_tokens", 0),
                 "hit_rate": hit, "hit_rate_total": stats.get("cache_hit_rate", 0.0), "spec_kept": kept,
                 **{f"ttft_p{round(q * 100)}": v for q, v in zip(QUANTILES, ttft)},
                 **{f"itl_p{round(q * 100)}": v for q, v in zip(QUANTILES, itl)}}
        point = {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in point.items()}
        self.samples.append(point)
        self.count += 1
        return point

    def since(self, count: int) -> list[dict[str, Any]]:
        """The samples taken after the reader's cursor ``count`` (at most the history)."""
        new = min(self.count - count, len(self.samples))
        return list(self.samples)[len(self.samples) - new:] if new > 0 else []

    async def _run(self) -> None:
        while True:
            try:
                self.sample()
            except Exception:  # noqa: BLE001 - a failed sample must not end the series
                logger.exception("dashboard sample failed")
            await asyncio.sleep(self.period_s)

    def start(self) -> None:
        """Start sampling on the running event loop (idempotent)."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
