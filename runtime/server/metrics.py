"""Server metrics: counters and latency histograms, rendered in the Prometheus text format.

Counters are updated from the event loop only (one thread), so no lock is needed; the engine's
live figures (running/queued requests, KV usage, cache hit rate) are read from
``Engine.get_stats()`` when ``/metrics`` is scraped.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from typing import Any

# Seconds. TTFT spans a prefill (ms to seconds); ITL spans one decode step.
TTFT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
ITL_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
E2E_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)

PREFIX = "radixlm"


class Histogram:
    """A cumulative histogram with fixed upper bounds (Prometheus semantics: ``le`` buckets)."""

    def __init__(self, bounds: Sequence[float]):
        self.bounds = tuple(sorted(bounds))
        self.counts = [0] * (len(self.bounds) + 1)  # last bucket is +Inf
        self.sum = 0.0
        self.count = 0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.sum += value
        self.count += 1

    def quantile(self, q: float) -> float:
        """Upper bound of the bucket holding quantile ``q`` (``nan`` when empty)."""
        if self.count == 0:
            return math.nan
        target = q * self.count
        seen = 0
        for bound, n in zip((*self.bounds, math.inf), self.counts):
            seen += n
            if seen >= target:
                return bound
        return math.inf

    def render(self, name: str, help_text: str) -> list[str]:
        lines = [f"# HELP {name} {help_text}", f"# TYPE {name} histogram"]
        cumulative = 0
        for bound, n in zip(self.bounds, self.counts):
            cumulative += n
            lines.append(f'{name}_bucket{{le="{bound:g}"}} {cumulative}')
        lines.append(f'{name}_bucket{{le="+Inf"}} {self.count}')
        lines.append(f"{name}_sum {self.sum:.6f}")
        lines.append(f"{name}_count {self.count}")
        return lines


class ServerMetrics:
    """What the HTTP layer has seen: requests by outcome, token totals, latencies."""

    def __init__(self) -> None:
        # aborted: the client went away (499); abort: ended by /abort_request (the answer is a 200)
        self.requests: dict[str, int] = {"success": 0, "error": 0, "aborted": 0, "abort": 0}
        self.prompt_tokens = 0
        self.cached_tokens = 0
        self.completion_tokens = 0
        self.ttft = Histogram(TTFT_BUCKETS)
        self.itl = Histogram(ITL_BUCKETS)
        self.e2e = Histogram(E2E_BUCKETS)

    def record_request(self, outcome: str, prompt: int = 0, cached: int = 0, completion: int = 0,
                       latency_s: float | None = None) -> None:
        """Count one finished request (``outcome``: success | error | aborted | abort) and its tokens."""
        self.requests[outcome] = self.requests.get(outcome, 0) + 1
        self.prompt_tokens += prompt
        self.cached_tokens += cached
        self.completion_tokens += completion
        if latency_s is not None:
            self.e2e.observe(latency_s)

    def render(self, engine_stats: dict[str, Any]) -> str:
        """The Prometheus exposition text for the server counters plus the engine's live stats."""
        p = PREFIX
        lines = [f"# HELP {p}_requests_total Requests handled, by outcome.",
                 f"# TYPE {p}_requests_total counter"]
        for outcome, n in sorted(self.requests.items()):
            lines.append(f'{p}_requests_total{{outcome="{outcome}"}} {n}')
        for name, value, text in (
            ("prompt_tokens_total", self.prompt_tokens, "Prompt tokens of finished requests."),
            ("cached_tokens_total", self.cached_tokens, "Prompt tokens served from the radix cache."),
            ("completion_tokens_total", self.completion_tokens, "Generated tokens."),
        ):
            lines += [f"# HELP {p}_{name} {text}", f"# TYPE {p}_{name} counter", f"{p}_{name} {value}"]
        hit_rate = self.cached_tokens / self.prompt_tokens if self.prompt_tokens else 0.0
        gauges = {"cache_hit_rate": (hit_rate, "Cached / prompt tokens over finished requests.")}
        for key, value in sorted(engine_stats.items()):
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                gauges.setdefault(f"engine_{key}", (value, f"Engine.get_stats()['{key}']."))
        for name, (value, text) in gauges.items():
            lines += [f"# HELP {p}_{name} {text}", f"# TYPE {p}_{name} gauge", f"{p}_{name} {value:g}"]
        lines += self.ttft.render(f"{p}_time_to_first_token_seconds", "Time to first token.")
        lines += self.itl.render(f"{p}_inter_token_latency_seconds", "Time between streamed tokens.")
        lines += self.e2e.render(f"{p}_e2e_request_latency_seconds", "Request latency.")
        return "\n".join(lines) + "\n"
