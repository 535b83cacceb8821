"""The dashboard's live data: per-second samples of the metrics, and the one event-stream feed every
subscriber reads.

``SeriesSampler``: the dashboard's time series, one sample per second over the last minutes.

Every figure comes from what the server already keeps: ``Engine.get_stats()`` (running and queued
requests, KV use, the step timers' prefill and decode token counts, the prompt and cached token
totals) and the HTTP layer's latency histograms (``ServerMetrics.ttft`` and ``.itl``). Rates are
differences between two samples; percentiles are read off the histograms' growth over the last
``WINDOW_S`` seconds, interpolated inside a bucket as Prometheus' ``histogram_quantile`` does
(so they are as fine as SGLang's buckets allow).

``DashboardFeed``: one live feed of the dashboard shared by every subscriber of ``/dashboard/events``.

Each second one task takes the sampler's new samples, and every ``INSPECT_EVERY`` seconds one
engine inspection (per ``max_nodes`` asked), encodes each event once and hands the same bytes to
every subscriber's queue: the cost of a tick does not grow with the subscribers. A new subscriber
first gets the history (``series``, encoded once per sample) and the latest whole inspection
(``inspect`` with every recent request, eviction and grammar, computed at most once per tick), so
the page's panels are filled at first paint; the broadcast ``inspect`` events then carry only the
evictions and requests after the previous tick's. At most ``max_subscribers`` streams are open
(the next one is refused with 503); a subscriber whose queue is full (a reader that stopped
reading) is dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import time
from collections import deque
from collections.abc import Awaitable, Callable
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



INSPECT_EVERY = 2  # seconds between two tree snapshots on the event stream
MAX_SUBSCRIBERS = 32  # open /dashboard/events streams; one page holds one
QUEUE_EVENTS = 16  # events a subscriber may fall behind by before it is dropped
BYE = b'data: {"type": "bye", "reason": "the server is shutting down"}\n\n'

Inspect = Callable[[int, int, int], Awaitable[dict[str, Any]]]  # (max_nodes, events_since, requests_since)


def encode(obj: Any) -> bytes:
    """One SSE ``data:`` frame."""
    return b"data: " + json.dumps(obj, ensure_ascii=False).encode() + b"\n\n"


class FeedFull(Exception):
    """Every subscriber slot is taken."""


class Subscriber:
    """One open stream: its ``max_nodes`` and the queue of encoded events waiting to be written."""

    def __init__(self, max_nodes: int) -> None:
        self.max_nodes = max_nodes
        self.queue: asyncio.Queue[bytes | None] = asyncio.Queue(QUEUE_EVENTS)


class DashboardFeed:
    """The shared feed of the module docstring over ``sampler`` and ``inspect`` (None: no inspection)."""

    def __init__(self, sampler: SeriesSampler, inspect: Inspect | None, draining: Callable[[], bool],
                 max_subscribers: int = MAX_SUBSCRIBERS) -> None:
        self.sampler = sampler
        self.inspect = inspect
        self.draining = draining
        self.max_subscribers = max_subscribers
        self.subscribers: set[Subscriber] = set()
        self.inspections = 0  # engine inspections computed (what the subscribers' count must not raise)
        self._series: tuple[int, bytes] | None = None
        self._full: dict[int, tuple[int, dict[str, Any]]] = {}  # max_nodes -> (tick, whole view)
        self._computing: dict[int, asyncio.Future] = {}
        self._sent: dict[int, tuple[int, int]] = {}  # max_nodes -> the last (eviction, request) seq sent
        self._tick = 0
        self._cursor = sampler.count  # the samples broadcast so far
        self._task: asyncio.Task | None = None

    # ------------------------------------------------------------------ subscribers

    async def subscribe(self, max_nodes: int) -> tuple[Subscriber, list[bytes]]:
        """A new subscriber and its first events (the history, the latest whole inspection);
        ``FeedFull`` when ``max_subscribers`` streams are open."""
        if len(self.subscribers) >= self.max_subscribers:
            raise FeedFull(f"{self.max_subscribers} dashboard streams are open (the limit)")
        sub = Subscriber(max_nodes)
        self.subscribers.add(sub)
        try:
            first = [self.series_event()]
            if self.inspect is not None:
                first.append(encode({"type": "inspect", **await self.whole_view(max_nodes)}))
        except BaseException:
            self.subscribers.discard(sub)
            raise
        self._start()
        return sub, first

    def unsubscribe(self, sub: Subscriber) -> None:
        self.subscribers.discard(sub)

    def series_event(self) -> bytes:
        """The ``series`` event (every sample kept), encoded once per sample taken."""
        if self._series is None or self._series[0] != self.sampler.count:
            self._series = (self.sampler.count, encode({"type": "series", "period_s": self.sampler.period_s,
                                                        "samples": list(self.sampler.samples)}))
        return self._series[1]

    async def whole_view(self, max_nodes: int) -> dict[str, Any]:
        """The inspection with every recent eviction and request: this tick's, or computed once now
        for every caller that asks before it is ready."""
        cached = self._full.get(max_nodes)
        if cached is not None and cached[0] == self._tick:
            return cached[1]
        pending = self._computing.get(max_nodes)
        if pending is None:
            pending = asyncio.ensure_future(self._compute(max_nodes))
            self._computing[max_nodes] = pending
            pending.add_done_callback(lambda _: self._computing.pop(max_nodes, None))
        return await asyncio.shield(pending)

    async def _compute(self, max_nodes: int) -> dict[str, Any]:
        tick = self._tick
        self.inspections += 1
        view = await self.inspect(max_nodes, 0, 0)
        self._full[max_nodes] = (tick, view)
        self._sent.setdefault(max_nodes, (view["eviction_seq"], view["request_seq"]))  # a group's first
        return view

    # ------------------------------------------------------------------ the broadcast

    def _start(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        """End the broadcast and every subscriber's stream (each gets ``None``: its end)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        for sub in list(self.subscribers):
            self._offer(sub, None)

    async def _run(self) -> None:
        while self.subscribers:
            await asyncio.sleep(self.sampler.period_s)
            await self.step()

    async def step(self) -> None:
        """One tick of the broadcast (the task calls it every ``period_s``): the new samples, every
        ``INSPECT_EVERY`` ticks an inspection, and the goodbye once the server drains."""
        if self.draining():
            self._broadcast(lambda sub: BYE)
            self._broadcast(lambda sub: None)
            self.subscribers.clear()
            return
        self._tick += 1
        new = self.sampler.since(self._cursor)
        self._cursor = self.sampler.count
        if new:
            data = encode({"type": "samples", "samples": new})
            self._broadcast(lambda sub: data)
        if self.inspect is not None and self._tick % INSPECT_EVERY == 0:
            try:
                await self._broadcast_inspections()
            except Exception:  # noqa: BLE001 - a failed inspection must not end the feed
                logger.exception("dashboard inspection failed")

    async def _broadcast_inspections(self) -> None:
        groups = {sub.max_nodes for sub in self.subscribers}
        self._sent = {k: v for k, v in self._sent.items() if k in groups}
        events: dict[int, bytes] = {}
        for max_nodes in sorted(groups):
            view = await self.whole_view(max_nodes)
            ev_seq, req_seq = self._sent.get(max_nodes, (0, 0))
            delta = {**view, "evictions": [e for e in view["evictions"] if e["seq"] > ev_seq],
                     "requests": [r for r in view["requests"] if r["seq"] > req_seq]}
            self._sent[max_nodes] = (view["eviction_seq"], view["request_seq"])
            events[max_nodes] = encode({"type": "inspect", **delta})
        self._broadcast(lambda sub: events.get(sub.max_nodes))

    def _broadcast(self, event_for: Callable[[Subscriber], bytes | None]) -> None:
        for sub in list(self.subscribers):
            data = event_for(sub)
            if data is not None:
                self._offer(sub, data)

    def _offer(self, sub: Subscriber, data: bytes | None) -> None:
        if data is None:  # the end: it must arrive even when the queue is full
            with contextlib.suppress(asyncio.QueueEmpty):
                if sub.queue.full():
                    sub.queue.get_nowait()
            sub.queue.put_nowait(None)
            return
        try:
            sub.queue.put_nowait(data)
        except asyncio.QueueFull:  # a reader that stopped reading: its stream ends
            self.subscribers.discard(sub)
            with contextlib.suppress(asyncio.QueueEmpty):
                sub.queue.get_nowait()
            sub.queue.put_nowait(None)
