"""The replica's prefill rate, learnt from closed-loop rows the way the per-pass time is: TTFT against the
fresh prompt tokens, with the engine's decode passes and the queue of other prompts in front.

In a closed loop of c streams at fixed lengths (P prompt tokens, O answer tokens), one row gives the mean
TTFT and the mean inter-token time (TPOT). Requests start at lambda = c / (TTFT + (O - 1) x TPOT) a second
(Little's law over one request; X / O where the replica's output rate X is given). A prefill of P tokens
holds the GPU for s = P / rate, so the other streams' prompts take the share

    f = lambda x (c - 1) / c x s

of the time. Continuous batching steps prefill chunks with the decode of the running batch (what the twin's
scheduler does: step = decode pass + prefill tokens / rate), so

- a stream's measured TPOT carries the other streams' prefills: the decode pass alone is TPOT x (1 - f);
- a new request waits for the prompts in front of it (M/D/1 at load f: s x f / (2 (1 - f))), then its own
  step, a decode pass and its prefill, after a fixed cost t0 >= 0 (HTTP, tokenizer, scheduler):

      TTFT = t0 + TPOT x (1 - f) + s + s x f / (2 (1 - f)).

With one prompt length, t0 and s are told apart only by how TTFT grows with the load f, which is weak;
the rate is therefore fitted as the per-pass fit is (passfit.py): robust (Huber) relative residuals and a
log-normal prior about the napkin's rate, so thin evidence leaves the napkin and strong evidence moves it.
Physical bounds are hard: no rate beats the compute roofline (100% MFU), the prompts of the other streams
cannot take the whole GPU (f < F_MAX), and a row whose TTFT is shorter than its prompt at the roofline is
refused. Pure: plain arithmetic on the rows.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from infertune.model.catalog import GpuSpec, ModelProfile
from infertune.model.fit import FitError
from infertune.model.roofline import NapkinAssumptions, prefill_tokens_per_second

FloatArray = npt.NDArray[np.float64]

# The other streams' prompts may take at most this share of the GPU: past it the loop could not decode.
F_MAX = 0.95
# Candidate rates tried between the bounds (log-spaced), before a golden-section polish.
GRID_POINTS = 241
POLISH_STEPS = 40
HUBER_STEPS = 8


@dataclass(frozen=True)
class PrefillPrior:
    """How far the rate may stray from the napkin's before the rows must say so. `rate_sd` is the prior sd of
    ln(rate / napkin rate): a factor of 2 is one sigma, the scale the per-pass napkin misses the public sweeps by
    (1.6-4x, docs/model-validation.md). With one prompt length the rows tell a fixed cost from a slow prefill
    only by how TTFT grows with load, so the prior settles what they cannot (the H200 sweep: a factor of 3 lets
    its TTFT rise read as a 1.6% MFU prefill and no fixed cost, where the same stack on B200 shows ~180 ms of
    fixed cost); a rate the TTFT itself rules out (the dense sweep: the napkin's prefill alone is 7x its TTFT)
    moves however far it must. `noise` is the relative scatter of one row's mean TTFT."""

    rate_sd: float = math.log(2.0)
    noise: float = 0.10
    huber_k: float = 1.345


@dataclass(frozen=True)
class PrefillRow:
    """One closed-loop row: c streams, fresh prompt and answer tokens, mean TTFT and mean TPOT (seconds),
    and, where the source gives it, the replica's output tokens/s (else Little's law gives it)."""

    concurrency: float
    prompt_tokens: float
    output_tokens: float
    ttft_seconds: float
    tpot_seconds: float
    output_tps: float | None = None

    @property
    def request_rate(self) -> float:
        """Requests started a second."""
        return request_rate(self.concurrency, self.output_tokens, self.tpot_seconds, self.ttft_seconds,
                            self.output_tps)


def request_rate(concurrency: float, output_tokens: float, tpot_seconds: float, ttft_seconds: float | None = None,
                 output_tps: float | None = None) -> float:
    """Requests a closed loop starts a second: the replica's output rate over the answer length where given,
    else Little's law over one request (a missing TTFT counts as none)."""
    if output_tps is not None:
        return output_tps / output_tokens
    return concurrency / ((ttft_seconds or 0.0) + (output_tokens - 1) * tpot_seconds)


def _check(rows: Sequence[PrefillRow]) -> None:
    for i, r in enumerate(rows):
        values = {"concurrency": r.concurrency, "prompt_tokens": r.prompt_tokens, "output_tokens": r.output_tokens,
                  "ttft_seconds": r.ttft_seconds, "tpot_seconds": r.tpot_seconds}
        if r.output_tps is not None:
            values["output_tps"] = r.output_tps
        for name, value in values.items():
            if isinstance(value, bool) or not math.isfinite(value) or value <= 0:
                raise FitError(f"prefill row {i}: {name} must be a finite positive number, got {value!r}")
        if r.concurrency < 1 or r.output_tokens < 2:
            raise FitError(f"prefill row {i}: needs at least one stream and two answer tokens")


@dataclass(frozen=True)
class PrefillFit:
    """The replica's prefill throughput (tokens/s) and the fixed cost in front of it, with the bounds the fit
    respected. `source` is "fit" when rows with TTFT decided it, "napkin" when there were none."""

    tokens_per_second: float
    offset_seconds: float
    napkin_tokens_per_second: float
    roofline_tokens_per_second: float
    rows: int
    source: str

    @property
    def mfu(self) -> float:
        """The share of the compute roofline the fitted prefill reaches."""
        return self.tokens_per_second / self.roofline_tokens_per_second

    def prefill_share(self, concurrency: float, prompt_tokens: float, requests_per_second: float) -> float:
        """f: the share of the time the other streams' prompts hold the GPU (capped at F_MAX)."""
        return min(requests_per_second * (concurrency - 1) / concurrency * prompt_tokens / self.tokens_per_second,
                   F_MAX)

    def decode_pass(self, tpot_seconds: float, concurrency: float, prompt_tokens: float,
                    requests_per_second: float) -> float:
        """The decode pass alone: a measured TPOT less the other streams' prefills it carried."""
        return tpot_seconds * (1.0 - self.prefill_share(concurrency, prompt_tokens, requests_per_second))

    def ttft(self, row: PrefillRow) -> float:
        """The model's mean TTFT for the row (module docstring)."""
        return self.offset_seconds + _ttft_without_offset(self.tokens_per_second, row)


def _ttft_without_offset(rate: float, row: PrefillRow) -> float:
    s = row.prompt_tokens / rate
    f = min(row.request_rate * (row.concurrency - 1) / row.concurrency * s, F_MAX)
    return row.tpot_seconds * (1.0 - f) + s + s * f / (2.0 * (1.0 - f))


def _huber_weights(z: FloatArray, k: float) -> FloatArray:
    a = np.abs(z)
    w: FloatArray = np.where(a <= k, 1.0, k / np.maximum(a, 1e-300))
    return w


def _huber(z: FloatArray, k: float) -> float:
    a = np.abs(z)
    return float(np.sum(np.where(a <= k, 0.5 * a * a, k * a - 0.5 * k * k)))


class _Objective:
    """Negative log posterior of a rate, the offset t0 >= 0 profiled out (Huber IRLS for t0 given the rate)."""

    def __init__(self, rows: Sequence[PrefillRow], prior_rate: float, prior: PrefillPrior) -> None:
        self.rows = rows
        self.ttft = np.array([r.ttft_seconds for r in rows])
        self.prior_rate = prior_rate
        self.prior = prior

    def offset(self, rate: float) -> float:
        g = np.array([_ttft_without_offset(rate, r) for r in self.rows])
        scale = self.prior.noise * self.ttft
        w = np.ones_like(g)
        t0 = 0.0
        for _ in range(HUBER_STEPS):
            weight = w / scale**2
            t0 = max(0.0, float(np.sum(weight * (self.ttft - g)) / np.sum(weight)))
            w = _huber_weights((t0 + g - self.ttft) / scale, self.prior.huber_k)
        return t0

    def __call__(self, log_rate: float) -> float:
        rate = math.exp(log_rate)
        g = np.array([_ttft_without_offset(rate, r) for r in self.rows])
        t0 = self.offset(rate)
        z = (t0 + g - self.ttft) / (self.prior.noise * self.ttft)
        prior = (log_rate - math.log(self.prior_rate)) / self.prior.rate_sd
        return _huber(z, self.prior.huber_k) + 0.5 * prior * prior


def fit_prefill(rows: Sequence[PrefillRow], roofline_rate: float, prior_rate: float,
                prior: PrefillPrior = PrefillPrior()) -> PrefillFit:
    """The prefill rate (tokens/s) the rows' TTFTs give, bounded by the roofline; with no rows, the prior's.

    Raises FitError on a row that is not finite and positive, or whose TTFT is shorter than its prompt takes
    at the compute roofline (no engine prefills faster than its GPUs compute)."""
    for name, value in (("roofline rate", roofline_rate), ("prior rate", prior_rate)):
        if not math.isfinite(value) or value <= 0:
            raise FitError(f"prefill fit: the {name} must be a finite positive number, got {value!r}")
    _check(rows)
    napkin = min(prior_rate, roofline_rate)
    if not rows:
        return PrefillFit(napkin, 0.0, prior_rate, roofline_rate, 0, "napkin")
    for i, r in enumerate(rows):
        if r.ttft_seconds < r.prompt_tokens / roofline_rate:
            raise FitError(f"prefill row {i}: TTFT {r.ttft_seconds:.3g} s is shorter than its {r.prompt_tokens:.0f} "
                           f"prompt tokens take at 100% MFU ({r.prompt_tokens / roofline_rate:.3g} s)")
    # The slowest rate at which the other streams' prompts still leave the GPU time to decode.
    slowest = max(r.request_rate * (r.concurrency - 1) / r.concurrency * r.prompt_tokens / F_MAX for r in rows)
    low, high = math.log(max(slowest, roofline_rate * 1e-6)), math.log(roofline_rate)
    if low >= high:
        raise FitError("prefill fit: the rows' request rates need a prefill faster than the compute roofline")
    objective = _Objective(rows, prior_rate, prior)
    grid = np.linspace(low, high, GRID_POINTS)
    costs = [objective(float(x)) for x in grid]
    best = int(np.argmin(costs))
    a, b = float(grid[max(best - 1, 0)]), float(grid[min(best + 1, GRID_POINTS - 1)])
    golden = (math.sqrt(5.0) - 1.0) / 2.0
    for _ in range(POLISH_STEPS):
        x1, x2 = b - golden * (b - a), a + golden * (b - a)
        if objective(x1) <= objective(x2):
            b = x2
        else:
            a = x1
    rate = math.exp((a + b) / 2.0)
    if not math.isfinite(rate) or rate <= 0:
        raise FitError("prefill fit: no finite rate fits the rows")
    return PrefillFit(rate, objective.offset(rate), prior_rate, roofline_rate, len(rows), "fit")


def roofline_prefill_rate(model: ModelProfile, gpu: GpuSpec, tp: int, napkin: NapkinAssumptions) -> float:
    """Prefill tokens/s of a TP group at 100% MFU: the bound no fitted rate may beat."""
    return prefill_tokens_per_second(model, gpu, tp, napkin.with_(mfu_prefill=1.0))
