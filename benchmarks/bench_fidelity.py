"""Model fidelity against public measured sweeps (docs/validation/*.toml, docs/model-validation.md):
the napkin alone, and the physics fit on the three smallest concurrencies predicting the rest."""

from __future__ import annotations

import tomllib
from pathlib import Path

from infertune.model.validation import SweepResult, report, sweep_from_mapping, transfer_report, validate
from infertune_lab.sim.replay import replay

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
    carried = transfer_report([r.sweep for r in rs])
    if carried:
        print("\nA calibration carried across TPs (each TP predicted from another at the same batch):\n")
        print(carried)
    print("\nThe twin replaying each published setup (fixed lengths, closed loop, no think time), with the decode "
          "pass and the prefill rate learnt on the three smallest concurrencies:\n")
    print("| sweep | prefill tok/s | MFU | learnt from | fixed cost t0 ms |")
    print("|---|---|---|---|---|")
    for r in rs:
        p = r.prefill
        print(f"| {r.sweep.name} | {p.tokens_per_second:,.0f} | {p.mfu:.1%} | "
              f"{'TTFT of ' + str(p.rows) + ' rows' if p.source == 'fit' else 'napkin (no TTFT)'} | "
              f"{p.offset_seconds * 1e3:.0f} |")
    print()
    print("| sweep | c | measured out tok/s | twin out tok/s | error | measured TTFT s | twin TTFT p50 s |")
    print("|---|---|---|---|---|---|---|")
    for r in rs:
        for c, measured, twin, ttft, twin_ttft in twin_rows(r):
            shown = "" if ttft is None else f"{ttft:.3f}"
            print(f"| {r.sweep.name} | {c} | {measured:.0f} | {twin:.0f} | {twin / measured - 1:+.1%} | {shown} | "
                  f"{twin_ttft:.3f} |")


def twin_rows(result: SweepResult, warmup: float = 60.0,
              duration: float = 300.0) -> list[tuple[int, float, float, float | None, float]]:
    """The published setup replayed end to end on the twin (scheduler, chunked prefill, KV) with the decode pass
    and the prefill rate learnt on the three smallest concurrencies: (concurrency, measured output tok/s, twin
    output tok/s, measured mean TTFT, twin median TTFT)."""
    return [(r.concurrency, r.measured_tps, r.twin.aggregate_tps, r.measured_ttft_seconds, r.twin.ttft_p50_seconds)
            for r in replay(result, warmup, duration)]
