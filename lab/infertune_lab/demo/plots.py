"""The report's PNGs: KV use against the cliff and headroom lines, per-stream speed and TTFT p95
against the SLA, and replicas and TP over time. Every plot marks the operator's decisions."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

from matplotlib.axes import Axes
from matplotlib.figure import Figure

from infertune.model.early_warning import CLIFF_USAGE
from infertune.planner.types import Action, SloTarget
from infertune_lab.demo.measure import Decision, Sample
from infertune_lab.demo.summary import Window

# Decisions that change the workload stand out; holds and no-ops are faint.
ACTING = frozenset({Action.SCALE_UP.value, Action.SCALE_DOWN.value, Action.RELAYOUT.value})


def _mark(ax: Axes, decisions: Sequence[Decision]) -> None:
    for d in decisions:
        acting = d.action in ACTING
        ax.axvline(d.t, color="tab:purple" if acting else "0.8", linewidth=1.2 if acting else 0.6,
                   linestyle="-" if acting else ":", zorder=0)


def _finish(ax: Axes, fig: Figure, path: Path, title: str, ylabel: str) -> Path:
    ax.set_title(title)
    ax.set_xlabel("seconds since traffic started (purple lines: the operator's decisions)")
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left", fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return path


def _axes() -> tuple[Figure, Axes]:
    # A bare Figure, not pyplot: no backend, no window, nothing global to close.
    fig = Figure(figsize=(9, 3.6))
    return fig, fig.subplots()


def _gaps(values: Sequence[float | None]) -> list[float]:
    """None (no request in a window) becomes a gap in the line, not a zero."""
    return [math.nan if v is None else v for v in values]


def kv_plot(samples: Sequence[Sample], decisions: Sequence[Decision], headroom: float, path: Path) -> Path:
    fig, ax = _axes()
    t = [s.t for s in samples]
    ax.plot(t, [s.kv_max * 100 for s in samples], label="KV use, fullest replica", color="tab:blue")
    ax.plot(t, [s.kv_mean * 100 for s in samples], label="KV use, mean", color="tab:blue", alpha=0.4)
    ax.axhline(CLIFF_USAGE * 100, color="tab:red", label=f"cliff ({CLIFF_USAGE:.0%})")
    ax.axhline((1 - headroom) * 100, color="tab:orange", linestyle="--", label=f"headroom line ({1 - headroom:.0%})")
    pre = [s.t for s in samples if s.preemptions]
    if pre:
        ax.scatter(pre, [100] * len(pre), marker="x", color="tab:red", label="preemptions")
    ax.set_ylim(0, 105)
    _mark(ax, decisions)
    return _finish(ax, fig, path, "KV cache use against the cliff", "% of the KV pool")


def tps_plot(wins: Sequence[Window], decisions: Sequence[Decision], slo: SloTarget, path: Path) -> Path:
    fig, ax = _axes()
    mid = [(w.start + w.end) / 2 for w in wins]
    ax.plot(mid, _gaps([w.stream_tps_mean for w in wins]), marker=".", label="per-stream tok/s, mean",
            color="tab:green")
    ax.plot(mid, _gaps([w.stream_tps_p5 for w in wins]), marker=".", label="per-stream tok/s, p5", color="tab:green",
            alpha=0.4)
    if slo.min_stream_tps is not None:
        ax.axhline(slo.min_stream_tps, color="tab:red", linestyle="--", label=f"SLA >= {slo.min_stream_tps:g}")
    ax.set_ylim(bottom=0)
    _mark(ax, decisions)
    return _finish(ax, fig, path, "Per-stream decode speed (requests finishing per 10 s)", "tokens/s per stream")


def ttft_plot(wins: Sequence[Window], decisions: Sequence[Decision], slo: SloTarget, path: Path) -> Path:
    fig, ax = _axes()
    mid = [(w.start + w.end) / 2 for w in wins]
    ax.plot(mid, _gaps([w.ttft_p95 for w in wins]), marker=".", label="TTFT p95", color="tab:cyan")
    if slo.max_ttft_seconds is not None:
        ax.axhline(slo.max_ttft_seconds, color="tab:red", linestyle="--", label=f"SLA <= {slo.max_ttft_seconds:g} s")
    ax.set_ylim(bottom=0)
    _mark(ax, decisions)
    return _finish(ax, fig, path, "Time to first token, p95 (requests arriving per 10 s)", "seconds")


def fleet_plot(samples: Sequence[Sample], decisions: Sequence[Decision], path: Path) -> Path:
    fig, ax = _axes()
    t = [s.t for s in samples]
    ax.step(t, [s.serving for s in samples], where="post", label="replicas serving", color="tab:blue")
    ax.step(t, [s.replicas_wanted or 0 for s in samples], where="post", label="replicas applied",
            color="tab:blue", linestyle="--", alpha=0.6)
    ax.step(t, [s.tp or 0 for s in samples], where="post", label="tensor-parallel size", color="tab:gray")
    ax.step(t, [s.max_num_seqs or 0 for s in samples], where="post", label="max-num-seqs", color="tab:olive")
    ax.set_ylim(bottom=0)
    _mark(ax, decisions)
    return _finish(ax, fig, path, "Layout over time", "count")
