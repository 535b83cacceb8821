"""Server metrics under SGLang's names: ``<prefix>:<name>`` where SGLang has ``sglang:<name>``.

The prefix is ``--metrics-prefix``: ``radixlm`` by default, ``sglang`` for dashboards built for
SGLang, which then read these as they are (the same suffixes, the same ``model_name`` label,
histograms with SGLang's buckets). Counters and histograms are updated from the event loop only
(one thread), so no lock is needed; the engine's live figures (running and queued requests, KV
usage, cache hit rate, decode throughput) are read from ``Engine.get_stats()`` when ``/metrics`` is
scraped. prometheus_client writes the exposition (text format 0.0.4) from metric families built at
each scrape; with ``--dp-size`` each replica is its own server and the router merges their
``/metrics`` (:func:`radixlm.runtime.router.router.merge_metrics`).

Every series of SGLang's metrics collector that has a meaning here is exported, each with a measured
value: the request counters and latency histograms (``num_requests_total``, ``num_aborted_requests_total``,
``prompt_tokens_total``, ``generation_tokens_total``, ``cached_tokens_total``, ``time_to_first_token_seconds``,
``inter_token_latency_seconds``, ``e2e_request_latency_seconds``), ``queue_time_seconds`` (the engine's
``meta_info["queue_time"]``: waiting queue to first step), ``num_retractions``, ``prompt_tokens_histogram``
and ``generation_tokens_histogram`` (per request; SGLang's last two need ``--collect-tokens-histogram``),
``realtime_tokens_total{mode}``, the scheduler gauges (``num_running_reqs``, ``num_queue_reqs``,
``num_grammar_queue_reqs``, ``num_used_tokens``, ``token_usage``, ``max_total_num_tokens`` = the KV pool's
slots, ``decode_sum_seq_lens``, ``cache_hit_rate``, ``gen_throughput``, ``spec_accept_length``,
``spec_accept_rate``, ``engine_startup_time``, ``engine_load_weights_time``),
``num_retracted_requests_total``, and the grammar
series (``grammar_compilation_time_seconds`` from ``meta_info["grammar_compile_time"]``;
``num_so_requests_total``, ``num_grammar_total``, ``num_grammar_cache_hit_total``,
``num_grammar_timeout_total``, ``num_grammar_aborted_total`` from the grammar compiler's counts). Not
exported, having no meaning on this engine: the PD-disaggregation, LoRA, SWA/Mamba, routing-key, DP
cooperation, prefill-delayer, CUDA-graph, utilization/SLO, paused-request, per-stage latency,
storage and hierarchical-cache series, and xgrammar's internals (schema count, EBNF size, tree
traversal). Series carry SGLang's ``model_name`` label (the one its dashboard filters on), not
its per-rank labels.
"""

from __future__ import annotations

import bisect
import math
import time
from collections.abc import Sequence
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.exposition import generate_latest
from prometheus_client.registry import Collector, CollectorRegistry
from prometheus_client.utils import floatToGoString

DEFAULT_PREFIX = "radixlm"
PREFIX = DEFAULT_PREFIX + ":"

# Seconds; SGLang's buckets. TTFT spans a prefill, TPOT and ITL one decode step.
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
                10.0, 15.0, 20.0, 25.0, 30.0)
TPOT_BUCKETS = (0.005, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5,
                0.75, 1.0, 2.5)
ITL_BUCKETS = TPOT_BUCKETS
E2E_BUCKETS = (0.1, 0.2, 0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0,
               90.0, 120.0, 300.0)
QUEUE_BUCKETS = (0.0, 0.1, 0.2, 0.5, 1, 2, 3, 4, 5, 10, 15, 20, 30, 40, 50, 60, 70, 80, 90, 100, 200, 300, 400,
                 500, 600, 700, 800, 900, 1000, 1200, 1400, 1600, 1800, 2000, 2500, 3000)
GRAMMAR_COMPILE_BUCKETS = (0.0, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 30, 60, 90, 120, 240)
RETRACTION_BUCKETS = (0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 15, 20, 25, 30, 40, 50, 75, 100)
TOKEN_COUNT_BUCKETS = (100, 300, 500, 700, 1000, 1500, 2000, 3000, 4000, 5000, 6000, 7000, 8000, 9000, 10000,
                       12000, 15000, 20000, 22000, 25000, 30000, 35000, 40000, 66000, 99000, 132000, 300000,
                       600000, 900000, 1100000)

# SGLang's gauge name -> the Engine.get_stats() key it shows, and its help text
ENGINE_GAUGES: dict[str, tuple[str, str]] = {
    "num_running_reqs": ("num_running_reqs", "The number of running requests."),
    "num_queue_reqs": ("num_queued_reqs", "The number of requests in the waiting queue."),
    "num_used_tokens": ("kv_used_slots", "The number of KV slots in use (radix cache included)."),
    "token_usage": ("kv_usage", "The share of KV slots in use."),
    "cache_hit_rate": ("cache_hit_rate", "Prompt tokens served from the radix cache / prompt tokens."),
    "max_total_num_tokens": ("kv_total_slots", "Maximum total number of tokens in the KV cache pool."),
    "num_grammar_queue_reqs": ("num_grammar_queue_reqs", "The number of requests waiting for their grammar."),
    "decode_sum_seq_lens": ("decode_sum_seq_lens", "The sum of all sequence lengths in decode."),
    "engine_startup_time": ("startup_s", "Seconds the engine took to start."),
    "engine_load_weights_time": ("load_weights_s", "Seconds the engine took to load the weights (and "
                                 "allocate the KV pool)."),
}
# SGLang's grammar counter -> Engine.get_stats()["grammar"] key, and its help text
GRAMMAR_COUNTERS: dict[str, tuple[str, str]] = {
    "num_so_requests": ("requests", "Number of structured output requests processed."),
    "num_grammar": ("requests", "Number of the total grammar requests."),
    "num_grammar_cache_hit": ("cache_hits", "Number of grammar cache hits."),
    "num_grammar_timeout": ("timeouts", "Number of grammar timeouts."),
    "num_grammar_aborted": ("failed", "Number of grammar aborted requests."),
}


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

    def family(self, name: str, help_text: str, model_name: str) -> HistogramMetricFamily:
        """The histogram as a metric family labelled with ``model_name``."""
        fam = HistogramMetricFamily(name, help_text, labels=["model_name"])
        cumulative, buckets = 0, []
        for bound, n in zip(self.bounds, self.counts):
            cumulative += n
            buckets.append((floatToGoString(bound), cumulative))
        fam.add_metric([model_name], buckets + [("+Inf", self.count)], self.sum)
        return fam


class ServerMetrics:
    """What the HTTP layer has seen: requests by outcome, token totals, latencies."""

    def __init__(self, model_name: str = "default", prefix: str = DEFAULT_PREFIX) -> None:
        self.model_name = model_name
        self.prefix = prefix + ":"
        # aborted: the client went away (499); abort: ended by /abort_request (the answer is a 200)
        self.requests: dict[str, int] = {"success": 0, "error": 0, "aborted": 0, "abort": 0}
        self.prompt_tokens = 0
        self.cached_tokens = 0
        self.generation_tokens = 0
        self.ttft = Histogram(TTFT_BUCKETS)
        self.tpot = Histogram(TPOT_BUCKETS)
        self.itl = Histogram(ITL_BUCKETS)
        self.e2e = Histogram(E2E_BUCKETS)
        self.queue_time = Histogram(QUEUE_BUCKETS)
        self.grammar_compile = Histogram(GRAMMAR_COMPILE_BUCKETS)
        self.retractions = Histogram(RETRACTION_BUCKETS)
        self.prompt_lengths = Histogram(TOKEN_COUNT_BUCKETS)
        self.output_lengths = Histogram(TOKEN_COUNT_BUCKETS)
        self._throughput_mark = (time.monotonic(), 0)  # (when, decode tokens then) of the last scrape

    def record_request(self, outcome: str, prompt: int = 0, cached: int = 0, completion: int = 0,
                       latency_s: float | None = None) -> None:
        """Count one finished request (``outcome``: success | error | aborted | abort) and its tokens."""
        self.requests[outcome] = self.requests.get(outcome, 0) + 1
        self.prompt_tokens += prompt
        self.cached_tokens += cached
        self.generation_tokens += completion
        if latency_s is not None:
            self.e2e.observe(latency_s)

    def record_output(self, meta: dict[str, Any]) -> None:
        """What one finished engine request's ``meta_info`` tells: its time per output token (the time
        after the first token over the tokens after it, as SGLang computes it), its queue time, its
        grammar's compile time, its retractions and its prompt and output lengths."""
        tokens, e2e, ttft = meta.get("completion_tokens"), meta.get("e2e_latency"), meta.get("first_token_latency")
        if isinstance(tokens, int) and tokens > 1 and isinstance(e2e, (int, float)) and isinstance(ttft, (int, float)):
            self.tpot.observe(max(e2e - ttft, 0.0) / (tokens - 1))
        for hist, key in ((self.queue_time, "queue_time"), (self.grammar_compile, "grammar_compile_time"),
                          (self.retractions, "total_retractions"), (self.prompt_lengths, "prompt_tokens"),
                          (self.output_lengths, "completion_tokens")):
            value = meta.get(key)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                hist.observe(max(float(value), 0.0))

    def gen_throughput(self, decode_tokens: int | None) -> float:
        """Decoded tokens per second since the previous scrape (the engine's running count)."""
        if decode_tokens is None:
            return 0.0
        now = time.monotonic()
        then, before = self._throughput_mark
        self._throughput_mark = (now, decode_tokens)
        return max(decode_tokens - before, 0) / (now - then) if now > then else 0.0

    def render(self, engine_stats: dict[str, Any]) -> str:
        """The Prometheus exposition text for the server counters plus the engine's live stats."""
        registry = CollectorRegistry(auto_describe=False)
        registry.register(_Snapshot(self.families(engine_stats)))
        return generate_latest(registry).decode()

    def families(self, engine_stats: dict[str, Any]) -> list[Metric]:
        """Every metric family, named with the prefix, from this scrape's ``engine_stats``."""
        p, model = self.prefix, self.model_name
        requests = CounterMetricFamily(f"{p}requests", "Requests handled, by outcome.",
                                       labels=["model_name", "outcome"])
        for outcome, n in sorted(self.requests.items()):
            requests.add_metric([model, outcome], n)
        out: list[Metric] = [requests]
        for name, value, text in self._counters(engine_stats):
            out.append(CounterMetricFamily(p + name, text, labels=["model_name"]))
            out[-1].add_metric([model], value)
        out.append(self._realtime_tokens(engine_stats))
        for name, (value, text) in self._gauges(engine_stats).items():
            out.append(GaugeMetricFamily(p + name, text, labels=["model_name"]))
            out[-1].add_metric([model], float(value))
        for name, hist, text in (
            ("time_to_first_token_seconds", self.ttft, "Histogram of time to first token in seconds."),
            ("time_per_output_token_seconds", self.tpot, "Histogram of time per output token in seconds."),
            ("inter_token_latency_seconds", self.itl, "Histogram of time between streamed tokens in seconds."),
            ("e2e_request_latency_seconds", self.e2e, "Histogram of end-to-end request latency in seconds."),
            ("queue_time_seconds", self.queue_time, "Histogram of queueing time in seconds."),
            ("grammar_compilation_time_seconds", self.grammar_compile,
             "Histogram of grammar compilation time in seconds."),
            ("num_retractions", self.retractions, "Histogram of retraction counts per request."),
            ("prompt_tokens_histogram", self.prompt_lengths, "Histogram of prompt token length."),
            ("generation_tokens_histogram", self.output_lengths, "Histogram of generation token length."),
        ):
            out.append(hist.family(p + name, text, model))
        return out

    def _counters(self, engine_stats: dict[str, Any]) -> list[tuple[str, float, str]]:
        """SGLang's counters (names without ``_total``, which the exposition adds)."""
        grammar = engine_stats.get("grammar")
        grammar = grammar if isinstance(grammar, dict) else {}
        return [
            ("num_requests", sum(self.requests.values()), "Number of requests processed."),
            ("num_aborted_requests", self.requests.get("aborted", 0) + self.requests.get("abort", 0),
             "Number of requests aborted."),
            ("prompt_tokens", self.prompt_tokens, "Number of prefill tokens processed."),
            ("generation_tokens", self.generation_tokens, "Number of generation tokens processed."),
            ("cached_tokens", self.cached_tokens, "Prompt tokens served from the radix cache."),
            ("num_retracted_requests", engine_stats.get("num_retractions", 0),
             "Total number of retracted requests."),
            *((name, grammar.get(key, 0), text) for name, (key, text) in GRAMMAR_COUNTERS.items()),
        ]

    def _realtime_tokens(self, engine_stats: dict[str, Any]) -> CounterMetricFamily:
        """SGLang's tokens by how they were processed: prompt tokens computed (and spliced ones),
        prompt tokens served from the radix cache, decoded tokens."""
        timers = engine_stats.get("timers")
        timers = timers if isinstance(timers, dict) else {}
        fam = CounterMetricFamily(self.prefix + "realtime_tokens", "Total number of tokens processed. mode: "
                                  "prefill_compute, prefill_cache, decode.", labels=["model_name", "mode"])
        for mode, value in (("prefill_compute", timers.get("prefill_tokens", 0)),
                            ("prefill_cache", engine_stats.get("cached_tokens", 0)),
                            ("decode", timers.get("decode_tokens", 0))):
            fam.add_metric([self.model_name, mode], value)
        return fam

    def _gauges(self, engine_stats: dict[str, Any]) -> dict[str, tuple[float, str]]:
        """SGLang's engine gauges, the decode throughput, and the engine's other figures."""
        timers = engine_stats.get("timers")
        decode_tokens = timers.get("decode_tokens") if isinstance(timers, dict) else None
        gauges = {name: (engine_stats.get(key, 0), text) for name, (key, text) in ENGINE_GAUGES.items()}
        gauges["gen_throughput"] = (self.gen_throughput(decode_tokens), "The generate throughput (token/s).")
        spec = engine_stats.get("speculative")
        spec = spec if isinstance(spec, dict) else {}  # SGLang's speculative gauges (0 when off), and a total
        gauges["spec_accept_length"] = (spec.get("spec_accept_length", 0.0),
                                        "Draft tokens the model kept per verify step (speculative decoding).")
        gauges["spec_accept_rate"] = (spec.get("spec_accept_rate", 0.0),
                                      "Draft tokens kept / draft tokens proposed (speculative decoding).")
        gauges["spec_verify_steps"] = (spec.get("spec_verify_steps", 0), "Decode steps that verified drafts.")
        shown = {key for key, _ in ENGINE_GAUGES.values()} | {"num_retractions"}
        for key, value in sorted(engine_stats.items()):  # the engine's other figures, for debugging
            if key not in shown and isinstance(value, (int, float)) and not isinstance(value, bool):
                gauges[f"engine_{key}"] = (value, f"Engine.get_stats()['{key}'].")
        return gauges


class _Snapshot(Collector):
    """One scrape's families, for a throwaway registry."""

    def __init__(self, families: list[Metric]) -> None:
        self._families = families

    def collect(self) -> list[Metric]:
        return self._families
