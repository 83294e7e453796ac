"""The benchmark's output: a Markdown table per scenario (and its frontier), the JSON document, and PNG plots."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from infertune_lab.bench.frontier import BASELINES, TARGET_ATTAINMENT, cheapest_meeting, efficient, uncovered
from infertune_lab.bench.suite import ScenarioResult

# (header, field, format); throughput and latency stay in separate columns (docs/sources.md#separate-slas).
COLUMNS = (
    ("SLA TTFT", "sla_attainment_ttft", "{:.2%}"),
    ("SLA TPS", "sla_attainment_tps", "{:.2%}"),
    ("TTFT p50/p95/p99 s", None, ""),
    ("TPS p5", "per_stream_tps_p5", "{:.1f}"),
    ("GPU-h", "gpu_hours", "{:.1f}"),
    ("$/M tok", "cost_per_million_tokens", "{:.2f}"),
    ("goodput tok/GPU-h", "goodput_tokens_per_gpu_hour", "{:,.0f}"),
    ("preempt", "preemptions", "{:,}"),
    ("s past cliff", "seconds_past_cliff", "{:,.0f}"),
    ("re-layouts", "relayouts", "{}"),
)


def _cell(value: Any, fmt: str) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "n/a"
    return fmt.format(value)


def markdown(result: ScenarioResult) -> str:
    lines = [f"**{result.name}** ({result.note}; model load {result.load_seconds:g} s, "
             f"pool {result.pool_gpus} GPUs, router {result.router})", "",
             "| policy | " + " | ".join(h for h, _, _ in COLUMNS) + " |",
             "|---|" + "---:|" * len(COLUMNS)]
    for name, r in result.results.items():
        data = r.as_json()
        cells = []
        for _, key, fmt in COLUMNS:
            if key is None:
                cells.append("/".join(_cell(data[k], "{:.2f}") for k in
                                      ("ttft_p50_seconds", "ttft_p95_seconds", "ttft_p99_seconds")))
            else:
                cells.append(_cell(data[key], fmt))
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def frontier_markdown(result: ScenarioResult) -> str:
    """Every setting of every policy's knob, the cheapest that reaches the target on both SLAs, and
    whether infertune's frontier dominates each baseline's."""
    if not result.frontier:
        return ""
    lines = [f"**{result.name}, frontiers** (attainment: the lower of TTFT and TPS; * the policy's default)", "",
             "| policy | setting | SLA TTFT | SLA TPS | attainment | GPU-h | peak GPUs | s past cliff |",
             "|---|---|---:|---:|---:|---:|---:|---:|"]
    for name, points in result.frontier.items():
        for p in sorted(points, key=lambda p: p.gpu_hours):
            r, mark = p.result, " *" if p.default else ""
            lines.append(f"| {name} | {p.setting}{mark} | {_cell(r.sla_attainment_ttft, '{:.2%}')} | "
                         f"{_cell(r.sla_attainment_tps, '{:.2%}')} | {p.attainment:.2%} | {r.gpu_hours:.1f} | "
                         f"{r.peak_gpus} | {r.seconds_past_cliff:,.0f} |")
    lines += ["", f"| policy | cheapest setting reaching {TARGET_ATTAINMENT:.0%} TTFT and TPS | GPU-h | "
                  "infertune's frontier dominates it |", "|---|---|---:|---|"]
    ours = result.frontier.get("infertune", ())
    for name, points in result.frontier.items():
        best = cheapest_meeting(points)
        where = f"{best.setting}" if best else "none"
        hours = f"{best.gpu_hours:.1f}" if best else "n/a"
        if name not in BASELINES or not ours:
            verdict = ""  # infertune itself, and hindsight, which is a yardstick rather than a baseline
        else:
            missed = uncovered(ours, points)
            verdict = "yes" if not missed else "no: " + ", ".join(p.setting for p in missed)
        lines.append(f"| {name} | {where} | {hours} | {verdict} |")
    return "\n".join(lines)


def document(result: ScenarioResult) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "scenario": result.name, "note": result.note, "duration_seconds": result.duration,
        "model_load_seconds": result.load_seconds, "pool_gpus": result.pool_gpus, "router": result.router,
        "policies": {name: r.as_json() for name, r in result.results.items()}}
    if result.frontier:
        ours = result.frontier.get("infertune", ())
        doc["frontier"] = {name: [p.as_json() for p in points] for name, points in result.frontier.items()}
        doc["frontier_summary"] = {
            name: {"cheapest_meeting_target": (best.setting if (best := cheapest_meeting(points)) else None),
                   "dominated_by_infertune": (not uncovered(ours, points)) if ours and name in BASELINES else None}
            for name, points in result.frontier.items()}
    return doc


def plot(result: ScenarioResult, path: Path) -> None:
    """GPUs in use over time per policy, and SLA attainment beside GPU-hours."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (timeline, bars) = plt.subplots(1, 2, figsize=(13, 4.5), gridspec_kw={"width_ratios": [2.2, 1]})
    for name, points in result.timelines.items():
        hours = [p.time / 3600 for p in points]
        timeline.step(hours, [p.gpus for p in points], where="post", label=name, linewidth=1.4)
    timeline.set_xlabel("hours")
    timeline.set_ylabel("GPUs (loading, serving, draining)")
    timeline.set_title(f"{result.name}: GPUs over time")
    timeline.grid(alpha=0.3)
    timeline.legend(fontsize=8)
    names = list(result.results)
    xs = range(len(names))
    width = 0.38
    bars.bar([x - width / 2 for x in xs], [result.results[n].sla_attainment_ttft * 100 for n in names], width,
             label="SLA TTFT %", color="tab:blue")
    bars.bar([x + width / 2 for x in xs], [result.results[n].sla_attainment_tps * 100 for n in names], width,
             label="SLA TPS %", color="tab:orange")
    bars.set_ylim(0, 105)
    bars.set_ylabel("SLA attainment (%)")
    bars.set_xticks(list(xs), names, rotation=30, fontsize=8)
    gpu = bars.twinx()
    gpu.plot(list(xs), [result.results[n].gpu_hours for n in names], "kD", label="GPU-hours")
    gpu.set_ylabel("GPU-hours")
    gpu.set_ylim(bottom=0)
    bars.legend(loc="lower left", fontsize=7)
    gpu.legend(loc="lower right", fontsize=7)
    bars.set_title("attainment (bars) and GPU-hours (dots)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def plot_frontier(result: ScenarioResult, path: Path) -> None:
    """Attainment against GPU-hours, one marker per setting, each policy's efficient points joined."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5))
    for name, points in result.frontier.items():
        front = efficient(points)
        line = ax.plot([p.gpu_hours for p in front], [p.attainment * 100 for p in front], "-", linewidth=1.2,
                       alpha=0.7)[0]
        colour = line.get_color()
        ax.scatter([p.gpu_hours for p in points], [p.attainment * 100 for p in points], color=colour, s=28,
                   label=name, zorder=3)
        for p in points:
            if p.default:
                ax.scatter([p.gpu_hours], [p.attainment * 100], facecolors="none", edgecolors=colour, s=140,
                           linewidths=1.6, zorder=4)
    ax.axhline(TARGET_ATTAINMENT * 100, color="grey", linestyle=":", linewidth=1)
    ax.set_xlabel("GPU-hours")
    ax.set_ylabel("attainment, lower of TTFT and TPS (%)")
    ax.set_title(f"{result.name}: each policy over its knob (circled: default)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


TABLE_FILE = "bench.md"


def plot_file(scenario: str, frontier: bool = False) -> str:
    return f"bench-{scenario}-frontier.png" if frontier else f"bench-{scenario}.png"


def file_names(scenarios: Sequence[str], frontier: bool) -> list[str]:
    """Every file `write` may write for these scenarios: checked by name before the runs, so that a directory
    or a FIFO standing at one is refused before the minutes of work, not after them."""
    plots = [plot_file(s, f) for s in scenarios for f in ((False, True) if frontier else (False,))]
    return [*plots, TABLE_FILE]


def write(results: Sequence[ScenarioResult], directory: Path) -> list[Path]:
    """bench.md (all tables), bench-<scenario>.png and, with frontiers, bench-<scenario>-frontier.png."""
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for result in results:
        path = directory / plot_file(result.name)
        plot(result, path)
        written.append(path)
        if result.frontier:
            path = directory / plot_file(result.name, frontier=True)
            plot_frontier(result, path)
            written.append(path)
    table = directory / TABLE_FILE
    table.write_text("\n\n".join(text(r) for r in results) + "\n")
    written.append(table)
    return written


def text(result: ScenarioResult) -> str:
    """The scenario's table, and its frontier's when it has one."""
    return "\n\n".join(part for part in (markdown(result), frontier_markdown(result)) if part)
