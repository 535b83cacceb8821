"""SGLang's published Grafana dashboard (tests/data/sglang_grafana, Apache-2.0) works unchanged against
``--metrics-prefix sglang``: every series its PromQL queries name is on ``/metrics`` with the labels they
use, and the SGLang series radixlm exports carry measured values."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families
from radixlm.runtime.engine import Engine
from radixlm.runtime.server.app import BackgroundServer
from radixlm.runtime.server.transport.state import ServerConfig

DASHBOARD = Path(__file__).resolve().parents[1] / "data" / "sglang_grafana" / "sglang-dashboard.json"
DASHBOARD_PREFIX = "sglang"
SELECTOR = re.compile(r"(?<![\w:])([a-zA-Z_][a-zA-Z0-9_]*):([a-zA-Z_][a-zA-Z0-9_:]*)(\{[^}]*\})?")
MATCHER = re.compile(r"([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)")
LABEL_VALUES = re.compile(r"label_values\(\s*(?:[^,()]*,\s*)?([a-zA-Z_][a-zA-Z0-9_]*)\s*\)")
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")
# SGLang's collector series that have a meaning on this engine (runtime/server/metrics.py lists the rest)
SGLANG_SERIES = (
    "num_running_reqs", "num_used_tokens", "token_usage", "gen_throughput", "num_queue_reqs",
    "num_grammar_queue_reqs", "cache_hit_rate", "max_total_num_tokens", "spec_accept_length", "spec_accept_rate",
    "engine_startup_time", "engine_load_weights_time", "num_retracted_requests_total",
    "queue_time_seconds_bucket", "grammar_compilation_time_seconds_bucket", "num_grammar_cache_hit_total",
    "num_grammar_aborted_total", "num_grammar_timeout_total", "num_grammar_total", "prompt_tokens_total",
    "generation_tokens_total", "cached_tokens_total", "num_requests_total", "num_so_requests_total",
    "num_aborted_requests_total", "time_to_first_token_seconds_bucket", "inter_token_latency_seconds_bucket",
    "e2e_request_latency_seconds_bucket", "num_retractions_bucket", "prompt_tokens_histogram_bucket",
    "generation_tokens_histogram_bucket", "realtime_tokens_total", "decode_sum_seq_lens",
)


def dashboard_queries() -> tuple[list[str], set[str]]:
    """Every PromQL expression of the dashboard's panels, and the labels its variables read."""
    doc = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    exprs = [t["expr"] for p in doc["panels"] for t in p.get("targets", []) if t.get("expr")]
    variables = {m.group(1) for v in doc["templating"]["list"] for m in LABEL_VALUES.finditer(v.get("definition", ""))}
    return exprs, variables


def series_used(exprs: list[str], prefix: str) -> dict[str, set[str]]:
    """Series name (prefix replaced by ``prefix``) -> the labels the queries match or group on it by;
    a ``_bucket`` series needs ``le``."""
    used: dict[str, set[str]] = {}
    for expr in exprs:
        grouped = {lab.strip() for g in re.findall(r"by\s*\(([^)]*)\)", expr) for lab in g.split(",") if lab.strip()}
        for m in SELECTOR.finditer(expr):
            if m.group(1) != DASHBOARD_PREFIX:
                continue
            name = f"{prefix}:{m.group(2)}"
            labels = set(MATCHER.findall(m.group(3) or ""))
            if name.endswith("_bucket"):
                labels |= {"le"} | grouped
            used.setdefault(name, set()).update(labels)
    return used


@pytest.mark.unit
def test_queries_are_read():
    exprs, variables = dashboard_queries()
    used = series_used(exprs, "p")
    assert {"p:e2e_request_latency_seconds_bucket", "p:e2e_request_latency_seconds_sum",
            "p:e2e_request_latency_seconds_count", "p:time_to_first_token_seconds_bucket", "p:num_running_reqs",
            "p:gen_throughput", "p:cache_hit_rate", "p:num_queue_reqs"} <= set(used)
    assert used["p:e2e_request_latency_seconds_bucket"] >= {"le", "model_name"}
    assert variables == {"instance", "model_name"}
    assert {base for name in used for base in [_base(name)]} == {
        "p:e2e_request_latency_seconds", "p:time_to_first_token_seconds", "p:num_running_reqs",
        "p:gen_throughput", "p:cache_hit_rate", "p:num_queue_reqs"}


def _base(name: str) -> str:
    for suffix in HISTOGRAM_SUFFIXES:
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


@pytest.fixture(scope="module")
def scraped():
    engine = Engine(max_total_tokens=4096, random_seed=0, metrics_prefix="sglang")
    srv = BackgroundServer(engine, ServerConfig(port=0)).start()
    try:
        plain = requests.post(srv.url + "/generate", timeout=120,
                              json={"text": "Hello", "sampling_params": {"max_new_tokens": 4, "temperature": 0}})
        assert plain.status_code == 200, plain.text
        shaped = requests.post(srv.url + "/v1/chat/completions", timeout=120, json={
            "messages": [{"role": "user", "content": "a number"}], "max_tokens": 8, "temperature": 0,
            "response_format": {"type": "json_schema", "json_schema": {"name": "n", "schema": {"type": "integer"}}}})
        assert shaped.status_code == 200, shaped.text
        text = requests.get(srv.url + "/metrics", timeout=60).text
        yield text, engine.get_stats()
    finally:
        srv.stop()
        engine.shutdown()


def _samples(text: str) -> dict[str, list[dict[str, str]]]:
    out: dict[str, list[dict[str, str]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, []).append({**sample.labels, "__value__": sample.value})
    return out


def test_every_dashboard_series_exists_with_its_labels(scraped):
    text, _ = scraped
    samples = _samples(text)
    exprs, variables = dashboard_queries()
    used = series_used(exprs, "sglang")
    assert len(used) >= 8
    for name, labels in sorted(used.items()):
        assert name in samples, f"{name} (queried by the dashboard) is not on /metrics"
        assert any(labels <= set(s) for s in samples[name]), (name, labels, samples[name])
    for label in variables - {"instance"}:  # instance is Prometheus' scrape target label
        assert any(label in s for rows in samples.values() for s in rows), label


def test_sglang_series_carry_measured_values(scraped):
    text, stats = scraped
    samples = _samples(text)
    for name in SGLANG_SERIES:
        assert f"sglang:{name}" in samples, name

    def value(name: str, **labels: str) -> float:
        rows = [s for s in samples[f"sglang:{name}"] if all(s.get(k) == v for k, v in labels.items())]
        assert len(rows) == 1, (name, rows)
        return rows[0]["__value__"]

    assert value("max_total_num_tokens") == stats["kv_total_slots"] > 0  # the KV pool's size
    assert value("queue_time_seconds_count") == 2  # one per engine request, measured by the step loop
    assert value("queue_time_seconds_bucket", le="+Inf") == 2
    assert value("grammar_compilation_time_seconds_count") == 1  # the json_schema request
    assert value("grammar_compilation_time_seconds_sum") > 0
    assert value("num_grammar_total") == value("num_so_requests_total") == 1
    assert value("num_grammar_aborted_total") == value("num_grammar_timeout_total") == 0
    assert value("num_requests_total") == 2 and value("num_aborted_requests_total") == 0
    assert value("engine_startup_time") >= value("engine_load_weights_time") > 0
    assert value("e2e_request_latency_seconds_count") == 2
    assert value("num_retractions_count") == value("num_retractions_bucket", le="0.0") == 2  # none retracted
    assert value("prompt_tokens_histogram_count") == value("generation_tokens_histogram_count") == 2
    assert value("generation_tokens_histogram_sum") == value("generation_tokens_total") > 0
    assert value("realtime_tokens_total", mode="decode") > 0
    assert value("realtime_tokens_total", mode="prefill_compute") > 0
    assert value("decode_sum_seq_lens") == 0  # nothing running at the scrape
