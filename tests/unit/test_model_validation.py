"""The model against the public measured sweeps kept in docs/validation: the napkin alone, and the fit on the
three smallest concurrencies predicting the rest (docs/model-validation.md)."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from infertune.model.validation import SweepError, per_pass_seconds, sweep_from_mapping, validate

SWEEPS = sorted((Path(__file__).resolve().parents[2] / "docs" / "validation").glob("*.toml"))


def load(path: Path):
    return sweep_from_mapping(path.stem, tomllib.loads(path.read_text(encoding="utf-8")))


def test_the_sweeps_cover_moe_and_the_gpus_the_issue_names():
    sweeps = [load(p) for p in SWEEPS]
    assert len(sweeps) >= 3
    assert {s.gpu.name for s in sweeps} >= {"b200", "h200", "h100"}
    assert all(s.url.startswith("https://") and s.licence and s.date for s in sweeps)


@pytest.mark.parametrize("path", SWEEPS, ids=[p.stem for p in SWEEPS])
def test_the_fit_on_the_three_smallest_predicts_the_rest(path: Path):
    result = validate(load(path))
    held = [p for p in result.points if p.counts]
    assert held, "every sweep holds out at least one row"
    for p in held:
        assert abs(p.fit_error) <= 0.15, (p.concurrency, p.fit_ms, p.measured_ms)
        if p.ttft_error is not None:
            assert abs(p.ttft_error) <= 0.25, (p.concurrency, p.ttft_fit_s, p.ttft_measured_s)
    # The napkin alone misses by far more: it is the prior, not the predictor.
    assert max(abs(p.napkin_error) for p in held) > 3 * max(abs(p.fit_error) for p in held)


def test_throughput_derived_per_pass_time_matches_the_reported_tpot():
    """Where a source gives TPOT and throughput (H200), Little's law over one request agrees with it to 3%:
    the B200 sweep's per-pass times are derived that way."""
    h200 = load(next(p for p in SWEEPS if "h200" in p.stem))
    for point in h200.points:
        assert point.tpot_seconds is not None and point.output_tps is not None
        derived = per_pass_seconds(h200, type(point)(point.concurrency, point.output_tps, None, point.ttft_seconds))
        assert derived == pytest.approx(point.tpot_seconds, rel=0.03)


def test_a_sweep_without_its_source_or_with_an_impossible_figure_is_refused():
    raw = tomllib.loads(SWEEPS[0].read_text(encoding="utf-8"))
    no_licence = {**raw, "source": {k: v for k, v in raw["source"].items() if k != "licence"}}
    with pytest.raises(SweepError, match="licence"):
        sweep_from_mapping("x", no_licence)
    bad = {**raw, "points": [{**raw["points"][0], "ttft_ms": float("inf")}]}
    with pytest.raises(SweepError, match="ttft_ms"):
        sweep_from_mapping("x", bad)
