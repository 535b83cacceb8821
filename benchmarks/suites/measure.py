"""Side-by-side timing: systems alternate within each repetition; medians and ratios at the end.

A *trial* is a zero-argument callable that runs the whole workload once on one system and returns
a metrics dict with ``output_tokens`` and/or ``items`` (programs, questions: whatever the suite
counts); ``prompt_tokens``, ``cached_tokens`` and others pass through. :func:`alternate` times it, rotates the system order every repetition (so no system
always runs first, right after another one warmed the caches) and returns one row per run.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

Trial = Callable[[], dict[str, Any]]


def timed(trial: Trial) -> dict[str, Any]:
    """Run ``trial`` once; its metrics plus ``seconds`` and the rates (``output_tok_per_s``, ...)."""
    start = time.perf_counter()
    metrics = dict(trial())
    seconds = time.perf_counter() - start
    metrics["seconds"] = seconds
    if "items" in metrics:
        metrics["items_per_s"] = metrics["items"] / seconds
    if "output_tokens" in metrics:
        metrics["output_tok_per_s"] = metrics["output_tokens"] / seconds
    if "prompt_tokens" in metrics and "output_tokens" in metrics:
        metrics["total_tok_per_s"] = (metrics["prompt_tokens"] + metrics["output_tokens"]) / seconds
    return metrics


def alternate(trials: dict[str, Trial], reps: int, warmups: dict[str, Trial] | None = None,
              resets: dict[str, Callable[[], Any]] | None = None,
              log: Callable[[str], None] = print) -> dict[str, list[dict[str, Any]]]:
    """Run every trial ``reps`` times, interleaved, after one untimed warm-up each (when given).

    ``resets[name]`` runs untimed before each of that system's trials (e.g. flush the radix cache,
    so every repetition starts cold and measures only the sharing inside the workload).
    """
    for name, warm in (warmups or {}).items():
        warm()
        log(f"  warm-up {name} done")
    names = list(trials)
    runs: dict[str, list[dict[str, Any]]] = {n: [] for n in names}
    for rep in range(reps):
        shift = rep % len(names)
        for name in names[shift:] + names[:shift]:
            if resets and name in resets:
                resets[name]()
            row = timed(trials[name])
            runs[name].append(row)
            rate = (f"{row['output_tok_per_s']:9.1f} out tok/s" if "output_tok_per_s" in row
                    else f"{row['items_per_s']:9.2f} items/s")
            log(f"  rep {rep + 1}/{reps} {name:<16} {row['seconds']:8.2f} s  {rate}")
    return runs


def medians(rows: list[dict[str, Any]]) -> dict[str, float]:
    """Median of every numeric field over the repetitions."""
    keys = [k for k, v in rows[0].items() if isinstance(v, (int, float)) and not isinstance(v, bool)]
    return {k: statistics.median(r[k] for r in rows) for k in keys}


def summarize(runs: dict[str, list[dict[str, Any]]], baseline: str, metric: str = "output_tok_per_s",
              unavailable: dict[str, str] | None = None) -> dict[str, Any]:
    """The ``systems`` block of a suite result: per-system runs, medians, and ``metric`` ratios.

    ``ratios[name]`` is ``median(baseline metric) / median(name metric)``: how many times faster the
    baseline (radixlm) is than that system.
    """
    systems: dict[str, Any] = {}
    base = statistics.median(r[metric] for r in runs[baseline]) if runs.get(baseline) else None
    for name, rows in runs.items():
        med = medians(rows)
        entry = {"status": "ok", "runs": rows, "median": med}
        if base and med.get(metric):
            entry[f"{baseline}_speedup"] = base / med[metric]
        systems[name] = entry
    for name, reason in (unavailable or {}).items():
        systems[name] = {"status": "not installed", "reason": reason}
    return systems


def target(name: str, value: float | None, threshold: float, unit: str = "x") -> dict[str, Any]:
    """A target line for the report: met when ``value >= threshold``."""
    return {"name": name, "value": value, "threshold": threshold, "unit": unit,
            "met": None if value is None else value >= threshold}


def agreement(outputs: dict[str, list[list[int]]], baseline: str) -> dict[str, dict[str, Any]]:
    """How closely each system's greedy outputs match ``baseline``'s on the same prompts.

    Per system: ``identical`` (prompts whose outputs are equal), ``prompts``, and
    ``mean_matching_prefix`` (leading tokens equal, averaged over prompts) out of ``tokens_each``.
    Float32 engines differ in summation order, so a near-tie can flip a token and the rest diverges.
    """
    base = outputs.get(baseline)
    if base is None:
        return {}
    result: dict[str, dict[str, Any]] = {}
    for name, outs in outputs.items():
        if name == baseline:
            continue
        prefixes = []
        for a, b in zip(base, outs):
            n = 0
            while n < min(len(a), len(b)) and a[n] == b[n]:
                n += 1
            prefixes.append(n)
        result[name] = {"identical": sum(a == b for a, b in zip(base, outs)), "prompts": len(outs),
                        "mean_matching_prefix": sum(prefixes) / max(len(prefixes), 1),
                        "tokens_each": max((len(o) for o in base), default=0)}
    return result


def sweep_parallel(ready: dict[str, Any], trials: dict[str, Trial], metric: str, count: int,
                   log: Callable[[str], None] = print) -> dict[str, dict[str, Any]]:
    """Pick each parallel system's best number of parallel sequences, one timed run per setting.

    A system takes part when it has ``sweep`` (the settings to try) and a settable ``n_parallel``;
    settings above ``count`` (the requests in the workload) all mean ``count``. The best setting is
    left set for the repetitions that follow. Returns ``{name: {"rates": {setting: metric}, "best": n}}``.
    """
    from suites.parallel_plan import best_setting

    chosen: dict[str, dict[str, Any]] = {}
    for name, system in ready.items():
        if not hasattr(system, "sweep") or name not in trials:
            continue
        settings = sorted({min(s, count) for s in system.sweep})
        if len(settings) == 1:  # nothing to choose: no timed pass, the repetitions measure it
            system.n_parallel = settings[0]
            chosen[name] = {"rates": {}, "best": settings[0]}
            continue
        rates: dict[int, float] = {}
        for n in settings:
            system.n_parallel = n
            system.reset()
            rates[n] = timed(trials[name])[metric]
            log(f"  sweep {name:<16} {n:3d} parallel sequences {rates[n]:9.2f} {metric}")
        system.n_parallel = best_setting(rates)
        chosen[name] = {"rates": rates, "best": system.n_parallel}
    return chosen
