"""Model fidelity against public measured sweeps (docs/validation/*.toml, docs/model-validation.md):
the napkin alone, and the physics fit on the three smallest concurrencies predicting the rest."""

from __future__ import annotations

import tomllib
from pathlib import Path

from infertune.model.validation import SweepResult, report, sweep_from_mapping, validate

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
