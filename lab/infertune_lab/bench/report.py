"""The benchmark's output: a Markdown table per scenario, the JSON document, and PNG plots."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

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
             f"pool {result.pool_gpus} GPUs)", "",
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


def document(result: ScenarioResult) -> dict[str, Any]:
    return {"scenario": result.name, "note": result.note, "duration_seconds": result.duration,
            "model_load_seconds": result.load_seconds, "pool_gpus": result.pool_gpus,
            "policies": {name: r.as_json() for name, r in result.results.items()}}


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


def write(results: Sequence[ScenarioResult], directory: Path) -> list[Path]:
    """bench.md (all tables) and bench-<scenario>.png into `directory`."""
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for result in results:
        path = directory / f"bench-{result.name}.png"
        plot(result, path)
        written.append(path)
    table = directory / "bench.md"
    table.write_text("\n\n".join(markdown(r) for r in results) + "\n")
    written.append(table)
    return written
