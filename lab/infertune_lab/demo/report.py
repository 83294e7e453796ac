"""The report a demo run leaves behind: DIR/report.md, DIR/summary.json and the PNGs beside them."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from infertune.planner.types import SloTarget
from infertune_lab.demo import plots
from infertune_lab.demo.measure import Recorder
from infertune_lab.demo.resource import Compression
from infertune_lab.demo.summary import Summary, Window


@dataclass(frozen=True)
class ReportInput:
    summary: Summary
    recorder: Recorder
    windows: Sequence[Window]
    slo: SloTarget
    headroom: float
    compression: Compression
    load_delay: float


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1%}"


def _num(value: float | None, unit: str = "") -> str:
    return "n/a" if value is None else f"{value:g}{unit}"


def _figures(s: Summary, slo: SloTarget, headroom: float) -> list[str]:
    return [
        "| figure | value |", "|---|---|",
        f"| requests finished | {s.requests} |",
        f"| SLA attainment, TTFT <= {slo.max_ttft_seconds:g} s | {_pct(s.sla_attainment_ttft)} |",
        f"| SLA attainment, >= {slo.min_stream_tps:g} tok/s per stream | {_pct(s.sla_attainment_tps)} |",
        f"| TTFT p95 over the run | {_num(s.ttft_p95_seconds, ' s')} |",
        f"| per-stream tok/s, p5 over the run | {_num(s.stream_tps_p5)} |",
        f"| seconds past the cliff (KV >= 98% or preempting) | {s.seconds_past_cliff} |",
        f"| seconds over the headroom line ({1 - headroom:.0%}) | {s.seconds_over_headroom} |",
        f"| preemptions | {s.preemptions} |",
        f"| peak replicas serving | {s.peak_replicas} |",
        f"| final layout | {s.final_layout} |",
        f"| traffic / wall time | {s.traffic_seconds:g} s / {s.wall_seconds:g} s |",
    ]


def _decisions(s: Summary) -> list[str]:
    if not s.decisions:
        return ["The operator logged no decision."]
    rows = ["| t (s) | action | reason | message |", "|---:|---|---|---|"]
    for d in s.decisions:
        message = str(d["message"]).replace("|", "\\|")
        rows.append(f"| {d['t']:g} | {d['action']} | {d['reason']} | {message} |")
    return rows


def markdown(inp: ReportInput, images: Sequence[Path]) -> str:
    s, c = inp.summary, inp.compression
    lines = [
        f"# infertune demo: {s.scenario}", "",
        "Kimi K2.6 on a pool of 32 B200 GPUs under the coding-agent policy "
        f"(>= {inp.slo.min_stream_tps:g} tok/s per stream, TTFT p{inp.slo.ttft_percentile} <= "
        f"{inp.slo.max_ttft_seconds:g} s, {inp.headroom:.0%} KV headroom). The operator, kmock's emulated "
        f"cluster, the fleet agent and {s.metrics_source} all ran on this machine against simulated vLLM "
        "replicas; the traffic ramps, triples, then grows its contexts from 40K to 100K tokens.", "",
        "## Figures", "", *_figures(s, inp.slo, inp.headroom), "",
        "Attainment is per request (TTFT by arrival, speed per finished stream), the two never folded into one.",
        "", "## Time is compressed, the SLA is not", "",
        f"Everything runs in real time, because Prometheus computes rates per wall second. The model load is "
        f"{inp.load_delay:g} s instead of ~15 minutes (spec.engine.startupSeconds {c.startup_seconds}), the "
        f"tuning interval {c.interval}, cooldowns scale-up {c.scale_up}, scale-down {c.scale_down}, relayout "
        f"{c.relayout}, scale-down stabilization {c.stabilization}. A real cluster takes the same decisions "
        "over hours.", "",
        "## Decisions (from the resource's status)", "", *_decisions(s), "", "## Plots", "",
    ]
    lines += [f"![{p.stem}]({p.name})" for p in images]
    return "\n".join(lines) + "\n"


# Every file `write_report` writes, by name: `demo --report` checks them before the demo runs, so that a
# directory standing at report.md is refused then, not after the demo with the plots already written.
KV_PLOT, TPS_PLOT, TTFT_PLOT, LAYOUT_PLOT = "kv.png", "stream-tps.png", "ttft.png", "layout.png"
SUMMARY_FILE, REPORT_FILE = "summary.json", "report.md"
REPORT_FILES = (KV_PLOT, TPS_PLOT, TTFT_PLOT, LAYOUT_PLOT, SUMMARY_FILE, REPORT_FILE)


def write_report(inp: ReportInput, directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    rec = inp.recorder
    images = [
        plots.kv_plot(rec.samples, rec.decisions, inp.headroom, directory / KV_PLOT),
        plots.tps_plot(inp.windows, rec.decisions, inp.slo, directory / TPS_PLOT),
        plots.ttft_plot(inp.windows, rec.decisions, inp.slo, directory / TTFT_PLOT),
        plots.fleet_plot(rec.samples, rec.decisions, directory / LAYOUT_PLOT),
    ]
    (directory / SUMMARY_FILE).write_text(json.dumps(inp.summary.to_json(), indent=2) + "\n")
    report = directory / REPORT_FILE
    report.write_text(markdown(inp, images))
    return report
