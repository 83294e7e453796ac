"""The prefill-rate fit (model/prefillfit.py): it recovers a known rate from closed-loop rows built by its own
TTFT model, stays under the compute roofline, keeps the napkin without evidence, and refuses garbage."""

from __future__ import annotations

import math

import pytest

from infertune.model import FitError, load_gpu, load_model
from infertune.model.passfit import DEFAULT_NAPKIN
from infertune.model.prefillfit import PrefillFit, PrefillRow, fit_prefill, roofline_prefill_rate
from infertune.model.roofline import prefill_tokens_per_second

ROOFLINE = 28_000.0  # tokens/s at 100% MFU


def synthetic(rate: float, offset: float, shapes: list[tuple[int, int]], output: int = 500,
              tpot: float = 0.02) -> list[PrefillRow]:
    """Rows a replica prefilling at `rate` with a fixed cost `offset` would produce (the fit's own model)."""
    truth = PrefillFit(rate, offset, rate, ROOFLINE, 0, "truth")
    rows = []
    for c, prompt in shapes:
        row = PrefillRow(c, prompt, output, 1.0, tpot)
        for _ in range(50):  # TTFT and the request rate depend on each other: iterate to the fixed point
            row = PrefillRow(c, prompt, output, truth.ttft(row), tpot)
        rows.append(row)
    return rows


@pytest.mark.parametrize(("rate", "offset"), [(12_000.0, 0.0), (5_000.0, 0.15), (20_000.0, 0.05)])
def test_it_recovers_a_known_rate_and_fixed_cost(rate: float, offset: float):
    shapes = [(1, 1000), (1, 4000), (4, 2000), (8, 500), (8, 2000), (16, 1000), (32, 500), (32, 250)]
    rows = synthetic(rate, offset, shapes)
    fit = fit_prefill(rows, ROOFLINE, prior_rate=rate / 6)  # a napkin six times too slow, as on the dense sweep
    assert fit.source == "fit" and fit.rows == len(shapes)
    # Exact rows, but a prior six times off still pulls a little: within 5%.
    assert fit.tokens_per_second == pytest.approx(rate, rel=0.05)
    assert fit.offset_seconds == pytest.approx(offset, abs=0.01)
    assert all(fit.ttft(r) == pytest.approx(r.ttft_seconds, rel=0.05) for r in rows)


def test_a_ttft_the_napkin_cannot_meet_moves_the_rate_however_far():
    """One prompt length, the napkin's prefill alone 7x the measured TTFT: the rate must rise to fit it."""
    rows = synthetic(12_000.0, 0.0, [(1, 5000), (5, 5000), (25, 5000)])
    fit = fit_prefill(rows, ROOFLINE, prior_rate=1_800.0)
    assert fit.tokens_per_second > 10_000
    assert all(r.ttft_seconds >= fit.offset_seconds + r.prompt_tokens / fit.tokens_per_second * 0.9 for r in rows)


def test_it_never_beats_the_compute_roofline():
    rows = synthetic(60_000.0, 0.0, [(1, 1000), (8, 1000)])  # rows of a replica faster than its GPUs compute
    fit = fit_prefill(rows, ROOFLINE, prior_rate=ROOFLINE * 2)
    assert fit.tokens_per_second <= ROOFLINE * (1 + 1e-9)
    assert fit.mfu <= 1.0 + 1e-9


def test_without_ttft_the_napkins_rate_stands():
    fit = fit_prefill([], ROOFLINE, prior_rate=1_800.0)
    assert (fit.source, fit.tokens_per_second, fit.rows) == ("napkin", 1_800.0, 0)


def test_the_roofline_is_the_napkin_at_full_mfu():
    model, gpu = load_model("llama-3.3-70b"), load_gpu("h100")
    roof = roofline_prefill_rate(model, gpu, 2, DEFAULT_NAPKIN)
    assert roof == pytest.approx(prefill_tokens_per_second(model, gpu, 2, DEFAULT_NAPKIN) / DEFAULT_NAPKIN.mfu_prefill)


@pytest.mark.parametrize("field", ["concurrency", "prompt_tokens", "output_tokens", "ttft_seconds", "tpot_seconds",
                                   "output_tps"])
@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf, 0.0, -1.0])
def test_it_refuses_garbage_rows(field: str, bad: float):
    good = dict(concurrency=4.0, prompt_tokens=1000.0, output_tokens=500.0, ttft_seconds=0.3, tpot_seconds=0.02,
                output_tps=90.0)
    good[field] = bad
    with pytest.raises(FitError, match=field):
        fit_prefill([PrefillRow(**good)], ROOFLINE, prior_rate=2_000.0)


def test_it_refuses_a_ttft_shorter_than_the_prompt_at_full_mfu():
    row = PrefillRow(1, 5000, 500, 0.05, 0.02)  # 5,000 tokens at 28K tok/s take 0.18 s at the least
    with pytest.raises(FitError, match="100% MFU"):
        fit_prefill([row], ROOFLINE, prior_rate=2_000.0)


@pytest.mark.parametrize("bad", [math.nan, math.inf, 0.0, -5.0])
def test_it_refuses_a_bound_that_is_not_a_rate(bad: float):
    rows = synthetic(12_000.0, 0.0, [(1, 1000)])
    with pytest.raises(FitError):
        fit_prefill(rows, bad, prior_rate=2_000.0)
    with pytest.raises(FitError):
        fit_prefill(rows, ROOFLINE, prior_rate=bad)
