"""The model against the public measured sweeps kept in docs/validation: the napkin alone, and the fit on the
three smallest concurrencies predicting the rest (docs/model-validation.md)."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from infertune.model.validation import SweepError, per_pass_seconds, sweep_from_mapping, transfers, validate

SWEEPS = sorted((Path(__file__).resolve().parents[2] / "docs" / "validation").glob("*.toml"))

# Sweeps on which the fit misses a target, measured and recorded (docs/model-validation.md, "Where the fit misses:
# Llama-3-8B on one H100"), not tolerated: each case fails, and is expected to until the model changes.
KNOWN_MISSES = {
    "llama3-8b-h100-nim-tp1-200in": "per-pass +17.3% to +19.1% at c = 100-250 (target 15%), trained on c = 1, 2, 5 "
                                    "and carried 50x in batch; TTFT -59% to -91% at c = 10-250 (target 25%): the "
                                    "measured TTFT grows with c (13 ms to 0.86 s), the fit's t0 + k x pass does not",
    "llama3-8b-h100-nim-tp1-7000in": "TTFT -67.4%, -54.4%, -34.1% at c = 10, 25, 50 (target 25%; per-pass within "
                                     "4.6%): the measured TTFT grows with c (0.20 s at c=1, 0.82 s at c=5, 1.29 s "
                                     "at c=10) far faster than the fit's t0 + k x pass",
}


def _judged(paths):
    return [pytest.param(p, marks=pytest.mark.xfail(strict=True, reason=KNOWN_MISSES[p.stem]))
            if p.stem in KNOWN_MISSES else p for p in paths]


def load(path: Path):
    return sweep_from_mapping(path.stem, tomllib.loads(path.read_text(encoding="utf-8")))


def test_the_sweeps_cover_moe_and_dense_and_the_gpus_the_issue_names():
    sweeps = [load(p) for p in SWEEPS]
    assert len(sweeps) >= 3
    assert {s.gpu.name for s in sweeps} >= {"b200", "h200", "h100"}
    assert any(s.model.moe is not None for s in sweeps) and any(s.model.moe is None for s in sweeps)
    assert all(s.url.startswith("https://") and s.licence and s.date for s in sweeps)


def test_a_dense_sweep_past_its_kv_cliff_is_shown_but_not_judged():
    """The dense 70B sweep's c >= 100 rows queue for KV (TTFT 8-89 s): marked, neither trained on nor judged, and
    the per-pass fit still holds on the row below the cliff."""
    dense = [s for s in map(load, SWEEPS) if s.model.moe is None and any(p.outlier for p in s.points)]
    assert dense
    for sweep in dense:
        result = validate(sweep)
        judged = [p.concurrency for p in result.points if p.counts]
        past = [p.concurrency for p in result.points if p.outlier]
        assert judged and past and max(judged) < min(past)
        assert all(p.ttft_measured_s is not None and p.ttft_measured_s > 5.0 for p in result.points if p.outlier)


@pytest.mark.parametrize("path", _judged(SWEEPS), ids=[p.stem for p in SWEEPS])
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
    """Where a source gives TPOT, TTFT and throughput (the H200 and the dense H100 sweeps), Little's law over one
    request agrees with the TPOT to 3%: the B200 sweep's per-pass times are derived that way, and the dense
    source's "ITL" and "Throughput" are read as the mean per-pass time and the replica's output tokens/s."""
    checked = 0
    for sweep in (load(p) for p in SWEEPS):
        for point in sweep.points:
            if point.tpot_seconds is None or point.output_tps is None or point.ttft_seconds is None:
                continue
            derived = per_pass_seconds(sweep, type(point)(point.concurrency, point.output_tps, None,
                                                          point.ttft_seconds))
            assert derived == pytest.approx(point.tpot_seconds, rel=0.03), (sweep.name, point.concurrency)
            checked += 1
    assert checked >= 8


def test_a_sweep_without_its_source_or_with_an_impossible_figure_is_refused():
    raw = tomllib.loads(SWEEPS[0].read_text(encoding="utf-8"))
    no_licence = {**raw, "source": {k: v for k, v in raw["source"].items() if k != "licence"}}
    with pytest.raises(SweepError, match="licence"):
        sweep_from_mapping("x", no_licence)
    bad = {**raw, "points": [{**raw["points"][0], "ttft_ms": float("inf")}]}
    with pytest.raises(SweepError, match="ttft_ms"):
        sweep_from_mapping("x", bad)
    both = {**raw, "points": [{**raw["points"][0], "output_tps_per_gpu": 10.0, "output_tps": 80.0}]}
    with pytest.raises(SweepError, match="not both"):
        sweep_from_mapping("x", both)


def test_a_replica_total_and_a_per_gpu_figure_read_the_same():
    """Sources print either the replica's output tokens/s or tokens/s per GPU; both land as the replica's."""
    raw = tomllib.loads(SWEEPS[0].read_text(encoding="utf-8"))
    tp = raw["setup"]["tp"]
    row = {k: v for k, v in raw["points"][0].items() if k not in ("output_tps_per_gpu", "output_tps")}
    per_gpu = sweep_from_mapping("x", {**raw, "points": [{**row, "output_tps_per_gpu": 100.0}]})
    total = sweep_from_mapping("x", {**raw, "points": [{**row, "output_tps": 100.0 * tp}]})
    assert per_gpu.points[0].output_tps == total.points[0].output_tps == pytest.approx(100.0 * tp)


def test_a_tp_never_run_is_judged_on_a_band_that_holds_every_public_cross_tp_pass():
    """The planner judges a TP it never ran on the napkin calibrated at one that ran, at the slow end of a band
    that widens per octave (perf.py). Where a source measured the same setup at other TPs, each TP predicted
    from each other at the same batch lands inside that band: gpt-oss-120b on H100 at TP2, TP4 and TP8 missed
    by up to 1.51x per octave (TP8's calibration carried to TP4), which a band of 1.25x per octave did not hold."""
    carried = [t for path in SWEEPS for t in transfers(load(path))]
    assert {(t.from_tp, t.to_tp) for t in carried} >= {(8, 4), (4, 8), (8, 2), (2, 8), (4, 2), (2, 4)}
    outside = [(t.from_tp, t.to_tp, round(t.measured_ms, 2), round(t.low_ms, 2), round(t.high_ms, 2))
               for t in carried if not t.inside_band]
    assert not outside
    # Carried, the napkin misses in both directions: a fixed bias would have been a correction, not a band.
    assert min(t.miss for t in carried) < 1.0 < max(t.miss for t in carried)


def test_a_cross_tp_row_that_repeats_the_sweeps_tp_or_is_not_a_tp_is_refused():
    raw = tomllib.loads(next(p for p in SWEEPS if "other_tp" in p.read_text(encoding="utf-8")).read_text(
        encoding="utf-8"))
    for row, field in (({"tp": raw["setup"]["tp"], "concurrency": 64, "tpot_ms": 9.0}, "tp"),
                       ({"tp": 3, "concurrency": 64, "tpot_ms": 9.0}, "tp"),
                       ({"tp": 4, "concurrency": 64, "tpot_ms": float("nan")}, "tpot_ms"),
                       ({"tp": 4, "concurrency": 64}, "tpot_ms")):
        with pytest.raises(SweepError, match=field):
            sweep_from_mapping("x", {**raw, "other_tp": [row]})
    with pytest.raises(SweepError, match="other_tp"):
        sweep_from_mapping("x", {**raw, "other_tp": {"tp": 4}})
