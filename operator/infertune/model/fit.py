"""The empirical fit: per_pass(B) = a + b x B by weighted least squares, one per layout.

Robust by default (Huber IRLS), because live samples carry outliers: a pass stretched by a
prefill chunk, a scrape that straddled a preemption.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from infertune.errors import InfertuneError


class FitError(InfertuneError):
    """Too few, or degenerate, samples for a line."""


@dataclass(frozen=True)
class LinearFit:
    intercept_s: float
    slope_s: float
    r2: float
    samples: int
    batch_min: float
    batch_max: float

    def per_pass(self, batch: float) -> float:
        return self.intercept_s + self.slope_s * batch

    def covers(self, batch: float) -> bool:
        """Inside the sampled range, with a little slack either side; beyond it the line extrapolates."""
        span = self.batch_max - self.batch_min
        return self.batch_min - 0.1 * span <= batch <= self.batch_max + 0.25 * span


def _wls(x: np.ndarray, y: np.ndarray, w: np.ndarray) -> tuple[float, float]:
    design = np.column_stack([np.ones_like(x), x])
    sw = np.sqrt(w)
    coef, *_ = np.linalg.lstsq(design * sw[:, None], y * sw, rcond=None)
    return float(coef[0]), float(coef[1])


def fit_per_pass(
    batches: Sequence[float], seconds: Sequence[float], weights: Sequence[float] | None = None,
    robust: bool = True, iterations: int = 20,
) -> LinearFit:
    """Fits the per-pass line. Raises FitError when the samples cannot support one."""
    x = np.asarray(batches, dtype=float)
    y = np.asarray(seconds, dtype=float)
    if x.shape != y.shape:
        raise FitError("batches and seconds must have the same length")
    # Timing noise scales with the pass (a relative error), so by default each sample weighs
    # 1/y^2: otherwise the large-batch samples drown the intercept.
    # A zero or non-finite time gets an infinite or NaN weight here and is dropped with it just below.
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        w0 = 1.0 / np.square(y) if weights is None else np.asarray(weights, dtype=float)
    if x.shape != y.shape or x.shape != w0.shape:
        raise FitError("batches, seconds and weights must have the same length")
    keep = np.isfinite(x) & np.isfinite(y) & np.isfinite(w0) & (x > 0) & (y > 0) & (w0 > 0)
    x, y, w0 = x[keep], y[keep], w0[keep]
    if x.size < 3:
        raise FitError(f"need at least 3 valid samples, got {x.size}")
    if np.ptp(x) <= 0:
        raise FitError("all samples share one batch size: the slope is undetermined")
    w = w0.copy()
    a, b = _wls(x, y, w)
    if robust:
        for _ in range(iterations):
            resid = y - (a + b * x)
            scale = 1.4826 * float(np.median(np.abs(resid - np.median(resid))))
            if scale <= 0:
                break
            k = 1.345 * scale
            huber = np.where(np.abs(resid) <= k, 1.0, k / np.maximum(np.abs(resid), 1e-300))
            w = w0 * huber
            a_new, b_new = _wls(x, y, w)
            converged = abs(a_new - a) <= 1e-9 + 1e-6 * abs(a) and abs(b_new - b) <= 1e-12 + 1e-6 * abs(b)
            a, b = a_new, b_new
            if converged:
                break
    pred = a + b * x
    mean = float(np.average(y, weights=w))
    ss_tot = float(np.sum(w * (y - mean) ** 2))
    ss_res = float(np.sum(w * (y - pred) ** 2))
    r2 = 1.0 - ss_res / ss_tot if ss_tot > 0 else 1.0
    return LinearFit(a, b, r2, int(x.size), float(x.min()), float(x.max()))
