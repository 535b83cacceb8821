"""Suite results to disk: ``<suite>.json``, a Markdown table (``<suite>.md``, ``summary.md``), PNG plots."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

UNITS = {"output_tok_per_s": "output tok/s", "items_per_s": "items/s", "roofline_fraction": "of roofline"}


def write_json(result: dict[str, Any], out: Path) -> Path:
    """``<out>/<suite>.json`` with everything the suite returned."""
    path = out / f"{result['suite']}.json"
    path.write_text(json.dumps(result, indent=2, default=str))
    return path


def _fmt(x: Any, digits: int = 2) -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        return f"{x:,.{digits}f}"
    return str(x)


def markdown(result: dict[str, Any]) -> str:
    """One Markdown table: a row per system with its median metric, time, ratio and cache hits."""
    metric, suite = result["metric"], result["suite"]
    lines = [f"### {suite}", "", f"{result.get('description', '')}", ""]
    if result.get("quick"):  # the description names the full workload, which did not run
        lines[2] = (f"QUICK smoke run, a reduced workload: {_workload_text(result.get('workload'))}. "
                    f"(The full run: {result.get('description', '')})")
    base = next(iter(result["systems"]))
    if "table_md" in result:  # a suite that renders its own tables (profile)
        lines += result["table_md"]
    elif suite == "raw":
        machine = result.get("machine", {})
        lines += [f"Read bandwidth measured in the same run: {_fmt(machine.get('read_gb_per_s'), 1)} GB/s; "
                  f"float32 matmul rate: {_fmt(machine.get('matmul_gflop_per_s'), 1)} GFLOP/s; "
                  "`streamed GB/s` is what a decode step reads (weights + KV) times steps per second.", "",
                  "| config | median tok/s | roofline tok/s | fraction | streamed GB/s | of matmul rate "
                  "| of paired rate | outside forward |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
        pct = lambda x: "-" if x is None else f"{x:.1%}"  # noqa: E731
        for name, row in result["systems"].items():
            value = next(iter(row["median"].values()))
            lines.append(f"| {name} | {_fmt(value, 1)} | {_fmt(row['roofline_tok_per_s'], 1)} "
                         f"| {row['roofline_fraction']:.1%} | {_fmt(row.get('streamed_gb_per_s'), 1)} "
                         f"| {pct(row.get('matmul_rate_fraction'))} | {pct(row.get('paired_matmul_rate_fraction'))} "
                         f"| {pct(row.get('outside_forward'))} |")
    else:
        lines += [f"| system | median {UNITS.get(metric, metric)} | median s | {base} / system | cache hit |",
                  "|---|---:|---:|---:|---:|"]
        for name, row in result["systems"].items():
            if row.get("status") != "ok":
                lines.append(f"| {name} | {row.get('status')}: {row.get('reason', '')} | | | |")
                continue
            med = row["median"]
            hit = med["cached_tokens"] / med["prompt_tokens"] if med.get("prompt_tokens") and "cached_tokens" in med else None
            lines.append(f"| {name} | {_fmt(med.get(metric))} | {_fmt(med.get('seconds'))} "
                         f"| {_fmt(row.get(f'{base}_speedup'))}x | {_fmt(hit and hit * 100, 1)}% |")
    agree = result.get("greedy_agreement", {})
    if agree:
        parts = [f"{n} {a['identical']}/{a['prompts']} (mean matching prefix {a['mean_matching_prefix']:.1f}"
                 f"/{a['tokens_each']})" for n, a in agree.items()]
        lines.append(f"\nGreedy outputs identical to {base}'s (same token ids in): " + "; ".join(parts))
    for name, sweep in result.get("parallel_sweep", {}).items():
        if not sweep["rates"]:
            lines.append(f"\n{name}: {sweep['best']} parallel sequences (the one setting given)")
            continue
        rates = ", ".join(f"{n}: {_fmt(v)}" for n, v in sweep["rates"].items())
        lines.append(f"\n{name}: parallel sequences swept ({UNITS.get(metric, metric)}) {rates}; "
                     f"best {sweep['best']}, used for the row above")
    lines += _floor_lines(result.get("flop_floor"))
    for t in result.get("targets", []):
        state = "n/a" if t["met"] is None else ("met" if t["met"] else "MISSED")
        if result.get("quick"):
            state = "not judged (--quick: a reduced workload)"
        lines.append(f"\nTarget: {t['name']} = {_fmt(t['value'])}{t['unit']} (>= {t['threshold']}{t['unit']}): "
                     f"**{state}**")
    return "\n".join(lines) + "\n"


def _workload_text(workload: dict[str, Any] | None) -> str:
    """What actually ran, from a suite's ``workload`` record (``requests 8, new_tokens 8, ...``)."""
    if not workload:
        return "see the JSON's workload record"
    shown = [f"{k.replace('_', ' ')} {v}" for k, v in workload.items() if isinstance(v, (int, float, str))]
    return ", ".join(shown) or "see the JSON's workload record"


def _floor_lines(floor: dict[str, Any] | None) -> list[str]:
    """The FLOP floor of a workload (``flop_floor.py``) and each system's distance from it."""
    if not floor:
        return []
    parts = "; ".join(f"{n} {v['gflop_per_s']:.1f} GFLOP/s, at most {v['bound']:.2f}x faster possible"
                      for n, v in floor["systems"].items())
    return [f"\nFLOP floor: {floor['total_gflop']:,.0f} GFLOP (linear {floor['linear_gflop']:,.0f}, LM head "
            f"{floor['lm_head_gflop']:,.0f}, attention {floor['attention_gflop']:,.0f}; shared prefix "
            f"{floor['shared_prefix_tokens']} tokens once) = {floor['floor_seconds']:.1f} s at "
            f"{floor['floor_rate_gflop_per_s']:.1f} GFLOP/s (the best of the measured float32 matmul rate, "
            f"{floor['matmul_gflop_per_s']:.1f}, and every system's own). Per system: {parts}."
            ] + _kernel_floor_lines(floor.get("kernel_floor"))


def _kernel_floor_lines(kf: dict[str, Any] | None) -> list[str]:
    """Each part at the best rate measured for its own shapes (``kernel_floor.py``)."""
    if not kf:
        return []
    rates, secs = kf["rates_gflop_per_s"], kf["part_seconds"]
    parts = ", ".join(f"{p.replace('_', ' ')} {rates[p]:.1f} GFLOP/s ({secs[p]:.1f} s)" for p in secs)
    peers = "; ".join(f"{n} at most {v['bound']:.2f}x faster possible" for n, v in kf["systems"].items())
    return [f"\nKernel floor: {kf['kernel_seconds']:.1f} s with every part at the best rate measured for its "
            f"own shapes ({parts}). Per system: {peers}."]


def plot(result: dict[str, Any], out: Path) -> Path | None:
    """``<out>/<suite>.png``: median metric per system (raw: measured vs roofline per config)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = {n: r for n, r in result["systems"].items() if r.get("status") == "ok"}
    if not rows:
        return None
    fig, ax = plt.subplots(figsize=(7, 3.6))
    names = list(rows)
    if result["suite"] == "raw":
        measured = [next(iter(rows[n]["median"].values())) for n in names]
        roof = [rows[n]["roofline_tok_per_s"] for n in names]
        xs = range(len(names))
        ax.bar([x - 0.2 for x in xs], measured, 0.4, label="measured")
        ax.bar([x + 0.2 for x in xs], roof, 0.4, label="roofline", alpha=0.5)
        ax.set_yscale("log")
        ax.set_ylabel("tokens/s")
        ax.legend()
        ax.set_xticks(list(xs), names)
    else:
        metric = result["metric"]
        values = [rows[n]["median"].get(metric, 0.0) for n in names]
        bars = ax.bar(names, values, color=["tab:blue"] + ["tab:gray"] * (len(names) - 1))
        for bar, v in zip(bars, values):
            ax.annotate(f"{v:,.1f}", (bar.get_x() + bar.get_width() / 2, bar.get_height()), ha="center",
                        va="bottom", fontsize=8)
        ax.set_ylabel(UNITS.get(metric, metric) + " (median)")
    ax.set_title(f"{result['suite']} ({result['model']['size']}, {result['reps']} reps)")
    fig.tight_layout()
    path = out / f"{result['suite']}.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write_all(result: dict[str, Any], out: Path) -> dict[str, str]:
    """Write the JSON, Markdown and PNG of one suite; returns their paths."""
    out.mkdir(parents=True, exist_ok=True)
    md = out / f"{result['suite']}.md"
    md.write_text(markdown(result))
    png = plot(result, out)
    return {"json": str(write_json(result, out)), "markdown": str(md), "png": str(png) if png else ""}
