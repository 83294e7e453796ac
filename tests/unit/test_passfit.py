"""The physics-shaped per-pass fit: it recovers the terms when the samples can separate them, falls back to
the calibrated napkin when they cannot, extrapolates the way the hardware does, and says how sure it is."""

from __future__ import annotations

import numpy as np
import pytest

from infertune.model import FitError, LinearFit, PerformanceModel, load_gpu, load_model, workload_preset
from infertune.model.passfit import PassFit, SampleSet, fit_pass, pass_terms
from infertune.model.perf import Region
from infertune.model.roofline import NapkinAssumptions, napkin_per_pass

DSR1 = load_model("deepseek-r1")
LLAMA70 = load_model("llama-3.3-70b")
B200, H100 = load_gpu("b200"), load_gpu("h100")
NAPKIN = NapkinAssumptions()


def truth(model, gpu, tp, batch, context, coef):
    return pass_terms(model, gpu, tp, np.asarray(batch, float), np.asarray(context, float), NAPKIN) @ np.asarray(coef)


def test_samples_spread_in_batch_and_context_recover_every_term():
    """A MoE's weight reads grow with the experts a batch hits, its KV with batch x context: samples spread
    over both tell every term apart."""
    rng = np.random.default_rng(5)
    coef = (1.4, 0.35, 1.6, 0.9)
    batch = rng.integers(1, 65, 48).astype(float)
    context = rng.choice([2_000.0, 8_000.0, 32_000.0, 64_000.0], 48)
    seconds = truth(DSR1, B200, 8, batch, context, coef) * rng.normal(1.0, 0.02, 48)
    fit = fit_pass(DSR1, B200, 8, batch, seconds, context)
    for name, got, want in zip(("overhead", "weights", "kv", "compute"), fit.coefficients, coef, strict=True):
        assert got == pytest.approx(want, rel=0.2), name
    # Far past the samples (B=256 at 128K of context) the prediction still holds, and the band covers it.
    mean, low, high = fit.per_pass(DSR1, B200, 256, 128_000)
    real = float(truth(DSR1, B200, 8, [256.0], [128_000.0], coef)[0])
    assert mean == pytest.approx(real, rel=0.08) and low <= real <= high
    assert fit.r2 > 0.97 and all(c >= 0 for c in fit.coefficients)


def test_a_dense_models_fixed_cost_is_learnt_whole():
    """A dense model reads the same weights whatever the batch: its overhead and weight terms are both
    constant, so no sample can split them, but their sum (the fixed cost of a pass) is learnt exactly."""
    rng = np.random.default_rng(6)
    coef = (1.4, 0.35, 1.6, 0.9)
    batch = rng.integers(1, 65, 32).astype(float)
    context = rng.choice([2_000.0, 32_000.0], 32)
    fit = fit_pass(LLAMA70, H100, 4, batch, truth(LLAMA70, H100, 4, batch, context, coef), context)
    fixed = pass_terms(LLAMA70, H100, 4, np.array([1.0]), 0.0, NAPKIN)[0, :2]
    assert float(fixed @ np.array(fit.coefficients[:2])) == pytest.approx(float(fixed @ np.array(coef[:2])),
                                                                         rel=0.02)
    assert fit.coefficients[2] == pytest.approx(1.6, rel=0.05)


def test_samples_that_cannot_separate_the_terms_give_the_calibrated_napkin():
    """Three batches at one context: the prior decides the split, so the work terms keep the napkin's
    proportions and only their common scale (and the overhead) are learnt."""
    batch = np.array([4.0, 8.0, 16.0])
    seconds = truth(DSR1, B200, 8, batch, 1536.0, (1.2, 0.25, 0.25, 0.25))
    fit = fit_pass(DSR1, B200, 8, batch, seconds, [1536.0] * 3)
    _, weights, kv, compute = fit.coefficients
    assert weights == pytest.approx(kv, rel=0.1) and kv == pytest.approx(compute, rel=0.1)
    assert fit.scale == pytest.approx(0.25, rel=0.15)


def test_the_band_is_narrow_where_sampled_and_widens_away_from_it():
    rng = np.random.default_rng(2)
    batch = np.repeat([2.0, 4.0, 8.0], 4)
    seconds = truth(DSR1, B200, 8, batch, 4000.0, (1.0, 0.3, 0.6, 0.4)) * rng.normal(1.0, 0.03, batch.size)
    fit = fit_pass(DSR1, B200, 8, batch, seconds, [4000.0] * batch.size)
    widths = []
    for b in (4, 16, 64, 256):
        mean, low, high = fit.per_pass(DSR1, B200, b, 4000.0)
        widths.append((high - low) / mean)
    assert widths == sorted(widths) and widths[-1] > 3 * widths[0]
    assert fit.covers(8) and not fit.covers(64)


def test_an_outlier_window_does_not_drag_the_fit():
    batch = np.array([1.0, 2.0, 4.0, 8.0, 16.0, 16.0, 32.0])
    seconds = truth(LLAMA70, H100, 4, batch, 3000.0, (1.0, 0.5, 0.5, 0.5))
    clean = fit_pass(LLAMA70, H100, 4, batch, seconds, [3000.0] * batch.size)
    seconds[5] *= 4  # a window that straddled a preemption storm
    dirty = fit_pass(LLAMA70, H100, 4, batch, seconds, [3000.0] * batch.size)
    for b in (32, 64):
        assert dirty.per_pass(LLAMA70, H100, b, 3000.0)[0] == pytest.approx(
            clean.per_pass(LLAMA70, H100, b, 3000.0)[0], rel=0.05)


def test_moe_saturation_is_extrapolated_where_a_line_overshoots():
    """Short contexts: the experts' union saturates, so passes flatten. Trained on B = 1, 2, 4 the physics
    fit follows; the straight line through the same samples overshoots by a lot at 16x."""
    coef = (1.0, 0.3, 0.3, 0.3)
    train = np.array([1.0, 2.0, 4.0])
    seconds = truth(DSR1, B200, 8, train, 1500.0, coef)
    fit = fit_pass(DSR1, B200, 8, train, seconds, [1500.0] * 3)
    slope, intercept = np.polyfit(train, seconds, 1)
    real = float(truth(DSR1, B200, 8, [64.0], [1500.0], coef)[0])
    assert fit.per_pass(DSR1, B200, 64, 1500.0)[0] == pytest.approx(real, rel=0.1)
    assert intercept + slope * 64 > 1.5 * real


def test_no_usable_sample_is_a_clear_error():
    with pytest.raises(FitError, match="no valid sample"):
        fit_pass(DSR1, B200, 8, [np.nan, -1.0], [0.01, 0.01], [1000.0, 1000.0])
    with pytest.raises(FitError, match="same length"):
        fit_pass(DSR1, B200, 8, [1.0], [0.01, 0.02], [1000.0])


def test_the_model_takes_live_samples_with_their_context_and_fits_them_once():
    coding = workload_preset("coding-agent")
    batch = np.array([2.0, 4.0, 6.0, 8.0, 12.0, 16.0])
    contexts = np.array([60_000.0, 90_000.0, 70_000.0, 80_000.0, 85_000.0, 95_000.0])
    kimi = load_model("kimi-k2.6")
    seconds = truth(kimi, B200, 8, batch, contexts, (1.0, 1.2, 3.0, 1.5))
    samples = SampleSet(tuple(batch), tuple(seconds), tuple(contexts), (1.0,) * 6)
    perf = PerformanceModel(kimi, B200, coding, fits={8: samples})
    first = perf.pass_fit(8)
    again = PerformanceModel(kimi, B200, coding, fits={8: samples}).pass_fit(8)
    assert isinstance(first, PassFit) and again is first  # cached by the samples' content
    inside, beyond = perf.per_pass(8, 12), perf.per_pass(8, 48)
    assert inside.source == "fit" and beyond.source == "fit+napkin"
    assert inside.low_seconds < inside.seconds < inside.high_seconds
    assert (beyond.high_seconds - beyond.low_seconds) / beyond.seconds > (
        inside.high_seconds - inside.low_seconds) / inside.seconds
    # The context moves the prediction the way the samples said it does.
    assert perf.per_pass(8, 16, context=120_000).seconds > perf.per_pass(8, 16, context=40_000).seconds


def test_the_seed_line_is_reproduced_where_it_was_measured():
    perf = PerformanceModel(load_model("kimi-k2.6"), B200, workload_preset("coding-agent"),
                            fits={8: LinearFit(0.0052, 0.00165, 1.0, 7, 1, 32)})
    for b in (1, 8, 16, 32):
        assert perf.per_pass(8, b).seconds == pytest.approx(0.0052 + 0.00165 * b, rel=0.01)


def test_without_samples_the_napkin_carries_its_known_spread():
    p = PerformanceModel(DSR1, B200, workload_preset("chat")).per_pass(8, 16)
    assert p.source == "napkin" and p.low_seconds < p.seconds / 2 and p.high_seconds > 2 * p.seconds
    assert p.seconds == pytest.approx(float(napkin_per_pass(DSR1, B200, 8, 16.0, 2200.0)), rel=1e-9)


ORDER = [Region.CLIMB, Region.BEND, Region.PLATEAU, Region.CLIFF]


def _in_order(regions: list[Region]) -> bool:
    ranks = [ORDER.index(r) for r in regions]
    return ranks == sorted(ranks)


def test_regions_come_in_order_along_the_batch_axis_for_every_catalog_model():
    from infertune.model import gpu_names, model_names

    concurrency = np.arange(1, 257, dtype=float)
    checked = 0
    for name in model_names():
        model = load_model(name)
        for gpu_name in gpu_names():
            gpu = load_gpu(gpu_name)
            for workload in ("chat", "coding-agent", "batch"):
                perf = PerformanceModel(model, gpu, workload_preset(workload))
                for tp in (1, 2, 4, 8):
                    grid = perf.grid(tp, concurrency)
                    if grid.kv_capacity_tokens <= 0:
                        continue
                    regions = grid.regions()
                    assert _in_order(regions), (name, gpu_name, workload, tp, regions)
                    # A single concurrency reads the same label as the whole axis gives it.
                    for c in (3, 40, 200):
                        assert perf.predict(tp, c).region is regions[c - 1], (name, gpu_name, workload, tp, c)
                    checked += 1
    assert checked > 300


def test_a_moe_with_a_fit_at_short_context_keeps_its_regions_in_order():
    """The issue's case: a MoE fitted on small batches at 1K/1K read bend, then climb again."""
    chat = workload_preset("chat")
    batch = np.array([4.0, 8.0, 16.0])
    seconds = np.array([8.19e-3, 9.36e-3, 11.48e-3])  # docs/validation: DeepSeek-R1 on 8x B200
    perf = PerformanceModel(DSR1, B200, chat, fits={8: SampleSet(tuple(batch), tuple(seconds), (1536.0,) * 3,
                                                                 (1.0,) * 3)})
    regions = perf.grid(8, np.arange(1, 257, dtype=float)).regions()
    assert _in_order(regions) and regions[0] is Region.CLIMB and regions[-1] is not Region.CLIMB
