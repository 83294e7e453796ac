"""Model fidelity against public measured sweeps (docs/validation/*.toml, docs/model-validation.md):
the napkin alone, and the physics fit on the three smallest concurrencies predicting the rest."""

from __future__ import annotations

import tomllib
from pathlib import Path

from infertune.model import PerformanceModel, Workload
from infertune.model.validation import SweepResult, report, sweep_from_mapping, validate
from infertune_lab.sim import ReplicaConfig, fixed
from infertune_lab.sim.sweep import run_level

SWEEPS = Path(__file__).resolve().parents[1] / "docs" / "validation"


def results() -> list[SweepResult]:
    out = []
    for path in sorted(SWEEPS.glob("*.toml")):
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
        out.append(validate(sweep_from_mapping(path.stem, raw)))
    return out


def run() -> None:
    rs = results()
    print(report(rs))
    for r in rs:
        worst_fit, worst_nap, worst_ttft = r.worst("fit_error"), r.worst("napkin_error"), r.worst("ttft_error")
        inside = sum(p.inside_interval for p in r.points if p.counts)
        held = sum(p.counts for p in r.points)
        print(f"{r.sweep.name}: held-out per-pass worst {worst_fit:.1%} (napkin {worst_nap:.0%}), "
              f"TTFT worst {'n/a' if worst_ttft is None else f'{worst_ttft:.1%}'}, "
              f"{inside}/{held} measured values inside the interval")
    print("\nThe twin replaying each published setup (fixed lengths, closed loop, no think time), with the fit "
          "trained on the three smallest concurrencies:\n")
    print("| sweep | c | measured out tok/s | twin out tok/s | error | measured TTFT s | twin TTFT p50 s |")
    print("|---|---|---|---|---|---|---|")
    for r in rs:
        for c, measured, twin, ttft, twin_ttft in twin_rows(r):
            shown = "" if ttft is None else f"{ttft:.3f}"
            print(f"| {r.sweep.name} | {c} | {measured:.0f} | {twin:.0f} | {twin / measured - 1:+.1%} | {shown} | "
                  f"{twin_ttft:.3f} |")


def twin_rows(result: SweepResult, warmup: float = 60.0,
              duration: float = 300.0) -> list[tuple[int, float, float, float | None, float]]:
    """The published setup replayed end to end on the twin (scheduler, chunked prefill, KV) with the fit
    trained on the three smallest concurrencies: (concurrency, measured output tok/s, twin output tok/s,
    measured mean TTFT, twin median TTFT)."""
    s = result.sweep
    perf = PerformanceModel(s.model, s.gpu, Workload(s.prompt_tokens, 0, s.output_tokens), fits={s.tp: result.fit})
    config = ReplicaConfig(model=s.model.name, gpu=s.gpu.name, tp=s.tp, perf=perf,
                           max_num_seqs=max(p.concurrency for p in s.points))
    rows = []
    for p in s.points:
        if p.output_tps is None or p.outlier:
            continue
        row = run_level(config, fixed(s.prompt_tokens, s.output_tokens), p.concurrency, warmup, duration, think=0.0)
        rows.append((p.concurrency, p.output_tps, row.aggregate_tps, p.ttft_seconds, row.ttft_p50_seconds))
    return rows
