"""One Prometheus exposition from every replica's ``/metrics``: what the router serves with ``--dp-size``.

Each replica exposes its own ``radixlm:*`` families (:mod:`radixlm.runtime.server.metrics`); the
router parses them with ``prometheus_client``'s text parser and merges them by sample (name plus
labels):

- counters and histograms (every ``_bucket``, ``_sum`` and ``_count``) are summed, so rates and
  quantiles over the merged series cover all the traffic;
- the additive gauges (:data:`SUMMED_GAUGES`: running and queued requests, requests waiting for a
  grammar, KV slots in use and in all, decode throughput) are summed too;
- every other gauge (``token_usage``, ``cache_hit_rate``, the ``engine_*`` figures) is a ratio or a
  figure of one replica: it is kept per replica under a ``dp_rank`` label (the replica's index in the
  router's worker list), as SGLang labels its schedulers' gauges with ``dp_rank`` under data
  parallelism. A dashboard averages them (``avg by (model_name)``) or shows them per rank.

The router adds ``radixlm:router_replica_up{dp_rank, replica}``: 1 for each replica whose metrics
are in the sum, 0 for one that is out of rotation or did not answer (its counters are then missing
from the sums until it answers again).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping

from prometheus_client.exposition import generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector, CollectorRegistry
from prometheus_client.samples import Sample
from radixlm.runtime.server.metrics import PREFIX

logger = logging.getLogger("radixlm.router")

SUMMED_TYPES = frozenset({"counter", "histogram"})
SUMMED_GAUGES = frozenset(PREFIX + name for name in (
    "num_running_reqs", "num_queue_reqs", "num_grammar_queue_reqs", "num_used_tokens", "max_total_num_tokens",
    "gen_throughput"))
RANK_LABEL = "dp_rank"
UP_METRIC = PREFIX + "router_replica_up"


def parse(text: str) -> list[Metric]:
    """One replica's exposition as metric families (``ValueError`` if it is not the text format)."""
    return list(text_string_to_metric_families(text))


def merge_families(scrapes: Mapping[int, list[Metric]]) -> list[Metric]:
    """The merged families of ``scrapes`` (dp_rank -> that replica's parsed families), in the order
    they first appear (the lowest rank's order)."""
    families: dict[str, Metric] = {}
    samples: dict[str, dict[tuple, Sample]] = {}
    for rank, parsed in sorted(scrapes.items()):
        for fam in parsed:
            merged = families.setdefault(fam.name, Metric(fam.name, fam.documentation, fam.type, fam.unit))
            if merged.type != fam.type:  # replicas of different versions: do not add unlike things
                logger.warning("replica %d exposes %s as a %s, not a %s: left out", rank, fam.name,
                               fam.type, merged.type)
                continue
            # replicas may use another --metrics-prefix: the gauges are known by their suffix
            summed = fam.type in SUMMED_TYPES or PREFIX + fam.name.partition(":")[2] in SUMMED_GAUGES
            into = samples.setdefault(fam.name, {})
            for s in fam.samples:
                labels = dict(s.labels) if summed else {**s.labels, RANK_LABEL: str(rank)}
                key = (s.name, tuple(sorted(labels.items())))
                before = into.get(key)
                into[key] = Sample(s.name, labels, s.value + (before.value if before else 0.0))
    for name, fam in families.items():
        fam.samples = list(samples.get(name, {}).values())
    return list(families.values())


def up_family(up: Mapping[int, tuple[str, bool]]) -> Metric:
    """``radixlm:router_replica_up`` from dp_rank -> (replica URL, whether its metrics were merged)."""
    fam = Metric(UP_METRIC, "1 if the replica's metrics are in the router's sums, else 0.", "gauge")
    for rank, (url, ok) in sorted(up.items()):
        fam.add_sample(UP_METRIC, {RANK_LABEL: str(rank), "replica": url}, 1.0 if ok else 0.0)
    return fam


class _Families(Collector):
    def __init__(self, families: Iterable[Metric]) -> None:
        self.families = list(families)

    def collect(self) -> Iterable[Metric]:
        return self.families


def render(families: Iterable[Metric]) -> str:
    """The exposition text (format 0.0.4) of ``families``."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Families(families))
    return generate_latest(registry).decode("utf-8")


def merge_metrics(scrapes: Mapping[int, str], urls: Mapping[int, str]) -> str:
    """The router's ``/metrics`` text from dp_rank -> exposition text of the replicas that answered
    and dp_rank -> URL of every replica: the merged families, then the per-replica up gauge."""
    parsed: dict[int, list[Metric]] = {}
    for rank, text in scrapes.items():
        try:
            parsed[rank] = parse(text)
        except ValueError as e:  # one replica's bad answer must not hide the others
            logger.warning("replica %s answered /metrics with unparsable text: %s", urls[rank], e)
    up = {rank: (url, rank in parsed) for rank, url in urls.items()}
    return render([*merge_families(parsed), up_family(up)])
