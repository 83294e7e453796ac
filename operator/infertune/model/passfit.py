"""The physics-shaped fit: per-pass time as a non-negative combination of the napkin's own terms.

    per_pass(B, L) = c_overhead x overhead(TP)              collectives and launches, grows with TP
                   + c_weights  x weight_bytes(B) / bw       shared weights + the union of experts B hits
                   + c_kv       x B x L x kv_bytes(L) / bw    each stream reads its own context (GQA/MLA/window)
                   + c_compute  x B x flops(L) / roofline     GEMMs and attention against the peak

Every term is the napkin's (roofline.py) in seconds, so a coefficient of 1 is the napkin itself and the
fit's shape past the sampled batches is the hardware's: the experts' union saturates, KV grows with
batch x context, the collectives do not grow with batch at all. A straight line sees none of that.

The coefficients are fitted to samples that carry batch AND context, by robust (Huber) weighted least
squares with non-negative coefficients and a prior: the overhead normal about the napkin's, and the three
work terms log-normal about their common scale (the napkin calibrated by the samples). With few samples,
or samples
that cannot tell two terms apart (every sample at one context), the prior decides the split and the fit
is the calibrated napkin; with samples that can, the data decides. The posterior covariance gives every
prediction an interval, which widens away from the sampled batches and contexts because the terms the
samples could not separate diverge there.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property, lru_cache

import numpy as np
import numpy.typing as npt

from infertune.model.catalog import GpuSpec, ModelProfile
from infertune.model.fit import FitError, LinearFit
from infertune.model.kv import kv_bytes_per_token_total
from infertune.model.roofline import (
    NapkinAssumptions,
    attention_flops_per_token,
    effective_bandwidth,
    overhead_seconds,
    unique_experts,
)

FloatArray = npt.NDArray[np.float64]

TERM_NAMES = ("overhead", "weights", "kv", "compute")
# A term at zero is linearised as this share of the scale: ln(0) has no tangent.
LOG_FLOOR = 1e-3
GAUSS_NEWTON_STEPS = 8
DEFAULT_NAPKIN = NapkinAssumptions()
# Two-sided 90% band: the planner's pessimistic side is exceeded one time in twenty, as the working set's.
INTERVAL_Z = 1.645


@dataclass(frozen=True)
class PassPrior:
    """How far the coefficients may stray from the napkin before the samples must say so.

    `noise` is the relative scatter expected of one sample (a window's mean inter-token latency);
    the other figures are prior standard deviations: the overhead relative to the napkin's, the log of
    each work term's ratio to the common scale (1.0: a term 3x the napkin's share is a one-sigma
    surprise; the B200 load test's own pass, 1.65 ms a stream at 80K, puts KV ~4x the napkin's share), and the
    common scale itself (the napkin is known to miss real stacks by 2-10x, the B200 load test, so that prior is
    nearly flat).
    """

    noise: float = 0.05
    overhead_sd: float = 0.5
    term_sd: float = 1.0  # of ln(term / scale)
    scale_sd: float = 100.0  # a factor: ln(100) of log sd, nearly flat
    huber_k: float = 1.345


def _kv_per_token(model: ModelProfile, contexts: FloatArray) -> FloatArray:
    """KV bytes a token costs at each context (sliding-window layers hold at most the window)."""
    unique, inverse = np.unique(contexts, return_inverse=True)
    values = np.array([kv_bytes_per_token_total(model, float(c)) for c in unique])
    out: FloatArray = values[inverse]
    return out


def _attention_flops(model: ModelProfile, contexts: FloatArray) -> FloatArray:
    unique, inverse = np.unique(contexts, return_inverse=True)
    values = np.array([attention_flops_per_token(model, float(c)) for c in unique])
    out: FloatArray = values[inverse]
    return out


def term_columns(model: ModelProfile, gpu: GpuSpec, tp: int, batch: FloatArray, context: FloatArray | float,
                 napkin: NapkinAssumptions) -> tuple[float, FloatArray, FloatArray, FloatArray]:
    """The napkin's four terms in seconds: the overhead (one figure for every row), then the weights,
    KV and compute columns, one row per (batch, context)."""
    b = np.asarray(batch, dtype=float).ravel()
    bandwidth = effective_bandwidth(model, gpu, tp, napkin)
    peak = tp * gpu.peak_flops(model.compute_dtype) * napkin.mfu_decode
    weights = np.full(b.shape, model.shared_weight_bytes / bandwidth)
    if model.moe is not None:
        experts = unique_experts(model.moe.routed_experts, model.moe.experts_per_token, b)
        weights += experts * (model.moe.moe_layers * model.expert_bytes / bandwidth)
    if np.ndim(context) == 0:  # the planner's case: one context for the whole grid
        ctx = float(context)
        kv = b * (ctx * kv_bytes_per_token_total(model, ctx) / bandwidth)
        compute = b * ((2.0 * model.active_params + attention_flops_per_token(model, ctx)) / peak)
    else:
        ctxs = np.broadcast_to(np.asarray(context, dtype=float).ravel(), b.shape)
        kv = b * ctxs * _kv_per_token(model, ctxs) / bandwidth
        compute = b * (2.0 * model.active_params + _attention_flops(model, ctxs)) / peak
    return overhead_seconds(model, gpu, tp, napkin), weights, kv, compute


def pass_terms(model: ModelProfile, gpu: GpuSpec, tp: int, batch: FloatArray, context: FloatArray | float,
               napkin: NapkinAssumptions) -> FloatArray:
    """The napkin's four terms in seconds, one row per (batch, context): overhead, weights, KV, compute."""
    overhead, weights, kv, compute = term_columns(model, gpu, tp, batch, context, napkin)
    return np.column_stack([np.full(weights.shape, overhead), weights, kv, compute])


@dataclass(frozen=True)
class PassFit:
    """Fitted coefficients of the napkin's terms for one layout (TP), with their covariance."""

    tp: int
    coefficients: tuple[float, float, float, float]  # overhead, weights, kv, compute; 1 = the napkin's
    scale: float  # the work terms' common scale (their geometric mean): the calibrated napkin's ratio
    covariance: tuple[tuple[float, ...], ...]  # 4x4, of the coefficients
    r2: float
    samples: int
    batch_min: float
    batch_max: float
    context_min: float
    context_max: float
    napkin: NapkinAssumptions = NapkinAssumptions()

    @property
    def terms(self) -> tuple[tuple[str, float], ...]:
        return tuple(zip(TERM_NAMES, self.coefficients, strict=True))

    def covers(self, batch: float) -> bool:
        """Inside the sampled batches, with a little slack either side; beyond, the fit extrapolates."""
        return bool(self.covers_array(np.array([float(batch)]))[0])

    def covers_array(self, batch: FloatArray) -> npt.NDArray[np.bool_]:
        span = self.batch_max - self.batch_min
        covers: npt.NDArray[np.bool_] = (batch >= self.batch_min - 0.1 * span) & (batch <= self.batch_max + 0.25 * span)
        return covers

    @cached_property
    def coef_array(self) -> FloatArray:
        return np.asarray(self.coefficients, dtype=float)

    @cached_property
    def _cov(self) -> FloatArray:
        return np.asarray(self.covariance, dtype=float)

    def predict_terms(self, terms: FloatArray) -> tuple[FloatArray, FloatArray]:
        """(seconds, standard deviation) for rows of `pass_terms`."""
        mean: FloatArray = terms @ self.coef_array
        var = np.einsum("ij,ij->i", terms @ self._cov, terms)
        sd: FloatArray = np.sqrt(np.maximum(var, 0.0))
        return mean, sd

    def interval(self, terms: FloatArray) -> tuple[FloatArray, FloatArray, FloatArray]:
        """(seconds, low, high): the band never narrows below the samples' own scatter."""
        mean, sd = self.predict_terms(terms)
        half = INTERVAL_Z * sd
        low: FloatArray = np.maximum(mean - half, 0.5 * mean)
        high: FloatArray = mean + half
        return mean, low, high

    def per_pass(self, model: ModelProfile, gpu: GpuSpec, batch: float, context: float) -> tuple[float, float, float]:
        mean, low, high = self.interval(pass_terms(model, gpu, self.tp, np.array([float(batch)]), context,
                                                   self.napkin))
        return float(mean[0]), float(low[0]), float(high[0])


def _nnls(a: FloatArray, b: FloatArray) -> tuple[FloatArray, tuple[int, ...]]:
    """Non-negative least squares on the normal equations: the unconstrained solution when it is
    non-negative (the usual case), else the best of every support, which is exact for four unknowns.

    The optimum's support S solves the unconstrained problem on S, so the best feasible solution over
    all supports is the optimum; the prior rows keep every column set of full rank.
    """
    gram, rhs = a.T @ a, a.T @ b
    n = gram.shape[0]
    try:
        return _nnls_solve(gram, rhs, n)
    except np.linalg.LinAlgError:  # samples so degenerate (a pass of 1e-100 s) that the prior cannot rescue them
        raise FitError("the samples do not determine the terms (a singular system)") from None


def _nnls_solve(gram: FloatArray, rhs: FloatArray, n: int) -> tuple[FloatArray, tuple[int, ...]]:
    x: FloatArray = np.asarray(np.linalg.solve(gram, rhs), dtype=np.float64)
    if np.all(x >= 0):
        return x, tuple(range(n))
    best: tuple[float, FloatArray, tuple[int, ...]] | None = None
    for size in range(1, n):
        for cols in itertools.combinations(range(n), size):
            idx = list(cols)
            sub = np.linalg.solve(gram[np.ix_(idx, idx)], rhs[idx])
            if np.any(sub < 0):
                continue
            full = np.zeros(n)
            full[idx] = sub
            cost = float(full @ gram @ full - 2.0 * rhs @ full)
            if best is None or cost < best[0] - 1e-15:
                best = (cost, full, cols)
    if best is None:  # unreachable: a single column with a positive target always fits
        raise FitError("no non-negative solution")
    return best[1], best[2]


def _system(terms: FloatArray, y: FloatArray, rows: FloatArray, around: FloatArray,
            prior: PassPrior) -> tuple[FloatArray, FloatArray]:
    """The whitened system: data rows in units of the expected relative noise, then the prior's rows.

    Unknowns: the four coefficients. The overhead's prior is normal about the napkin's. The work terms'
    prior is log-normal about their common scale (their geometric mean): a term three times the
    napkin's share is as plausible as a third of it, and the scale itself is nearly free. Logs are
    linearised about `around` (Gauss-Newton: the caller re-solves about each new estimate):
    ln t ~ ln t0 - 1 + t / t0.
    """
    data = terms * rows[:, None]
    target = y * rows
    priors = [(np.array([1.0, 0, 0, 0]) / prior.overhead_sd, 1.0 / prior.overhead_sd)]
    t0 = np.maximum(around[1:], LOG_FLOOR * max(float(np.exp(np.mean(np.log(np.maximum(around[1:], 1e-12))))),
                                                1e-12))
    slope = 1.0 / t0  # d ln t / d t at t0
    offset = np.log(t0) - 1.0  # ln t ~ offset + slope x t
    centre = np.eye(3) - 1.0 / 3.0
    for i in range(3):
        row = np.zeros(4)
        row[1:] = centre[i] * slope / prior.term_sd
        priors.append((row, -float(centre[i] @ offset) / prior.term_sd))
    scale_sd = math.log(prior.scale_sd)
    row = np.zeros(4)
    row[1:] = slope / (3.0 * scale_sd)
    priors.append((row, -float(np.mean(offset)) / scale_sd))
    a = np.vstack([data, np.array([r for r, _ in priors])])
    b = np.concatenate([target, np.array([t for _, t in priors])])
    return a, b


Numbers = Sequence[float] | FloatArray


def fit_pass(
    model: ModelProfile, gpu: GpuSpec, tp: int, batches: Numbers, seconds: Numbers,
    contexts: Numbers, weights: Numbers | None = None,
    napkin: NapkinAssumptions = DEFAULT_NAPKIN, prior: PassPrior = PassPrior(), iterations: int = 10,
) -> PassFit:
    """Fits the napkin's coefficients to (batch, context, seconds) samples. Raises FitError without any
    usable sample. Invalid rows (non-finite, non-positive) are dropped, as `fit_per_pass` drops them.
    Samples all at one batch size give the prior's proportions scaled to that point: the calibration the
    planner wants from a fleet's windows at one mean batch (`infertune fit` refuses them as a fit)."""
    x = np.asarray(batches, dtype=float)
    y = np.asarray(seconds, dtype=float)
    ctx = np.asarray(contexts, dtype=float)
    w0 = np.ones_like(y) if weights is None else np.asarray(weights, dtype=float)
    if not (x.shape == y.shape == ctx.shape == w0.shape):
        raise FitError("batches, seconds, contexts and weights must have the same length")
    keep = (np.isfinite(x) & np.isfinite(y) & np.isfinite(ctx) & np.isfinite(w0) & (x > 0) & (y > 0)
            & (ctx >= 0) & (w0 > 0))
    x, y, ctx, w0 = x[keep], y[keep], ctx[keep], w0[keep]
    if x.size == 0:
        raise FitError("no valid sample to fit")
    terms = pass_terms(model, gpu, tp, x, ctx, napkin)
    # Relative noise: each row is weighted by 1/(noise x seconds), times its confidence.
    base_rows = np.sqrt(w0) / (prior.noise * y)
    huber = np.ones_like(y)
    coef = np.ones(4)  # the napkin itself, where the linearisation of the log prior starts
    support: tuple[int, ...] = ()
    for _ in range(max(iterations, 1)):
        rows = base_rows * np.sqrt(huber)
        for _ in range(GAUSS_NEWTON_STEPS):
            a, b = _system(terms, y, rows, coef, prior)
            new_coef, support = _nnls(a, b)
            done = np.allclose(new_coef, coef, rtol=1e-4, atol=1e-9)
            coef = new_coef
            if done:
                break
        resid = (y - terms @ coef) / (prior.noise * y)
        new = np.where(np.abs(resid) <= prior.huber_k, 1.0, prior.huber_k / np.maximum(np.abs(resid), 1e-300))
        if np.allclose(new, huber, atol=1e-6):
            break
        huber = new
    rows = base_rows * np.sqrt(huber)
    a, _ = _system(terms, y, rows, coef, prior)
    cov = _covariance(a, support, terms, y, coef, huber, w0, prior)
    pred = terms @ coef
    w = w0 * huber / np.square(y)
    mean = float(np.average(y, weights=w))
    ss_tot = float(np.sum(w * (y - mean) ** 2))
    ss_res = float(np.sum(w * (y - pred) ** 2))
    r2 = 1.0 - ss_res / ss_tot if ss_tot > 0 else 1.0
    c = tuple(float(v) for v in coef[:4])
    scale = float(np.exp(np.mean(np.log(np.maximum(coef[1:], 1e-12)))))
    return PassFit(tp, (c[0], c[1], c[2], c[3]), scale, cov, r2, int(x.size), float(x.min()),
                   float(x.max()), float(ctx.min()), float(ctx.max()), napkin)


def _covariance(a: FloatArray, support: tuple[int, ...], terms: FloatArray, y: FloatArray, coef: FloatArray,
                huber: FloatArray, w0: FloatArray, prior: PassPrior) -> tuple[tuple[float, ...], ...]:
    """The posterior covariance of the free coefficients (those at zero are held there), inflated when the
    samples scatter more than the prior's noise says."""
    free = list(support)
    sub = a[:, free]
    cov_free = np.linalg.pinv(sub.T @ sub)
    resid = (y - terms @ coef) / (prior.noise * y)
    dof = max(y.size - 2, 1)
    inflation = max(1.0, float(np.sum(w0 * huber * resid**2)) / dof)
    full = np.zeros((4, 4))
    full[np.ix_(free, free)] = cov_free * inflation
    return tuple(tuple(float(v) for v in row) for row in full)


# A line summarises many samples: read back, its points are far tighter than one window's scatter.
LINE_PRIOR = PassPrior(noise=0.002)


def line_samples(line: LinearFit, points: int = 8) -> tuple[FloatArray, FloatArray]:
    """A measured line read back as samples over the batches it was measured at (the only place it is
    known): the physics fit then carries it past them."""
    lo, hi = max(line.batch_min, 1.0), max(line.batch_max, line.batch_min, 1.0)
    batches = np.unique(np.round(np.geomspace(lo, hi, points), 6)) if hi > lo else np.array([lo])
    return batches, line.intercept_s + line.slope_s * batches


@lru_cache(maxsize=512)
def fit_from_line(model: ModelProfile, gpu: GpuSpec, tp: int, line: LinearFit, context: float,
                  napkin: NapkinAssumptions) -> PassFit:
    """The physics fit of a line given by hand (the B200 load test's 5.2 ms + 1.65 ms x B) at the workload's context.
    Cached: the planner builds a model per call, and this must not refit every time."""
    batches, seconds = line_samples(line)
    contexts = np.full(batches.shape, context)
    fit = fit_pass(model, gpu, tp, batches, seconds, contexts, napkin=napkin, prior=LINE_PRIOR)
    # The line pins the curve where it was measured, not the split between terms beyond it: the band is
    # the one samples with the usual scatter would give.
    band = fit_pass(model, gpu, tp, batches, seconds, contexts, napkin=napkin)
    span = (max(line.batch_min, 1.0), max(line.batch_max, 1.0))
    return PassFit(fit.tp, fit.coefficients, fit.scale, band.covariance, line.r2 if line.samples else fit.r2,
                   line.samples or fit.samples, span[0], span[1], context, context, napkin)


@dataclass(frozen=True)
class SampleSet:
    """Live samples of one layout, as the fit memory hands them on: hashable, so fits are cached by content.

    `context` 0 means the sample's context is unknown (no KV figure); the workload's decode context
    stands in for it.
    """

    batches: tuple[float, ...]
    seconds: tuple[float, ...]
    contexts: tuple[float, ...]
    weights: tuple[float, ...]

    def __len__(self) -> int:
        return len(self.batches)


@lru_cache(maxsize=512)
def fit_from_samples(model: ModelProfile, gpu: GpuSpec, tp: int, samples: SampleSet, default_context: float,
                     napkin: NapkinAssumptions) -> PassFit:
    """The physics fit of live samples; cached by their content, so it runs once per change of samples."""
    contexts = [c if c > 0 and math.isfinite(c) else default_context for c in samples.contexts]
    return fit_pass(model, gpu, tp, samples.batches, samples.seconds, contexts, samples.weights, napkin)
