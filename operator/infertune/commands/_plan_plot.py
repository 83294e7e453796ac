"""The plan as a picture: aggregate and per-stream TPS against concurrency, the four regions
shaded, the cliff marked and the choice highlighted."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.patches import Rectangle

from infertune.model.perf import Region
from infertune.planner import Plan, PlanRequest

REGION_COLOURS = {Region.CLIMB: "#d8f0d8", Region.BEND: "#fff2c8", Region.PLATEAU: "#dde8f8", Region.CLIFF: "#f8d4d4"}


def plot_plan(result: Plan, request: PlanRequest, path: str) -> None:
    rows = result.candidates()
    focus_tp = result.choice.tp if result.choice else max(request.tp_sizes)
    fig, (ax_agg, ax_stream) = plt.subplots(2, 1, figsize=(9, 7.5), sharex=True)
    for tp in sorted(set(request.tp_sizes)):
        mine = [r for r in rows if r.tp == tp]
        c = [r.max_num_seqs for r in mine]
        lw = 2.5 if tp == focus_tp else 1.2
        ax_agg.plot(c, [r.output_tps for r in mine], lw=lw, label=f"TP{tp}")
        ax_stream.plot(c, [r.per_stream_tps for r in mine], lw=lw, label=f"TP{tp}")
    focus = [r for r in rows if r.tp == focus_tp]
    for r in focus:  # shade the regions of the chosen TP
        for ax in (ax_agg, ax_stream):
            ax.axvspan(r.max_num_seqs - 0.5, r.max_num_seqs + 0.5, color=REGION_COLOURS[r.region], lw=0, zorder=0)
    if focus:
        cliff = focus[0].cliff_concurrency
        for ax in (ax_agg, ax_stream):
            ax.axvline(cliff, color="#c00000", ls="--", lw=1.5)
            ax.axvline(focus[0].safe_concurrency, color="#e07000", ls=":", lw=1.2)
        ax_agg.text(cliff, ax_agg.get_ylim()[1] * 0.95, f" KV cliff c={cliff:.1f}", color="#c00000", va="top")
    if request.slo.min_stream_tps:
        ax_stream.axhline(request.slo.min_stream_tps, color="k", ls="-.", lw=1, label="SLO tok/s per stream")
    if result.choice is not None:
        ch = result.choice
        ax_agg.plot([ch.max_num_seqs], [ch.output_tps], "o", ms=12, mfc="none", mec="k", mew=2, label="choice")
        ax_stream.plot([ch.max_num_seqs], [ch.per_stream_tps], "o", ms=12, mfc="none", mec="k", mew=2)
    handles = [Rectangle((0, 0), 1, 1, color=col) for col in REGION_COLOURS.values()]
    ax_stream.legend(handles + ax_stream.get_legend_handles_labels()[0],
                     [f"{r.value} (TP{focus_tp})" for r in REGION_COLOURS] + ax_stream.get_legend_handles_labels()[1],
                     fontsize=8, ncol=2)
    ax_agg.legend(fontsize=8)
    ax_agg.set_ylabel("aggregate output tok/s per replica")
    ax_stream.set_ylabel("decode tok/s per stream")
    ax_stream.set_xlabel("concurrency (max-num-seqs)")
    ax_agg.set_title(f"{request.model.name} on {request.gpu.name}: {result.reason.split(';')[0]}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
