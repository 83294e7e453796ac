"""Predictions for a layout (TP, concurrency): per-pass time, per-stream TPS, TTFT, Little's-law
throughput, cost, KV working set and the region of the batch-size curve.

The per-pass time comes from, in order of trust:
1. the fitted line of this TP, where the samples cover B;
2. beyond the sampled range, the larger of that line and the napkin calibrated by it (a line
   cannot see the bend);
3. with no samples at this TP, the napkin scaled by the calibration ratio measured at the
   nearest TP that has them, and the prediction says so;
4. the bare napkin.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

import numpy as np
import numpy.typing as npt

from infertune.model.catalog import GpuSpec, ModelProfile
from infertune.model.fit import LinearFit
from infertune.model.kv import CapacityAssumptions, cliff_concurrency, kv_capacity_tokens
from infertune.model.roofline import (
    NapkinAssumptions,
    napkin_per_pass,
    overhead_seconds,
    prefill_tokens_per_second,
)
from infertune.model.workload import Workload

FloatArray = npt.NDArray[np.float64]

SECONDS_PER_HOUR = 3600.0


class Region(StrEnum):
    CLIMB = "climb"
    BEND = "bend"
    PLATEAU = "plateau"
    CLIFF = "cliff"


# Elasticity of aggregate throughput to concurrency, d ln(agg) / d ln(B): near 1 every stream is
# free (climb), near 0 nothing is gained (plateau).
CLIMB_ELASTICITY = 0.6
BEND_ELASTICITY = 0.28


@dataclass(frozen=True)
class PassPrediction:
    seconds: float
    napkin_seconds: float
    source: str  # "fit", "fit+napkin", "calibrated-napkin", "napkin"
    calibration_ratio: float = 1.0
    calibrated_from_tp: int | None = None


@dataclass(frozen=True)
class LayoutPrediction:
    tp: int
    concurrency: int
    per_pass: PassPrediction
    per_stream_tps: float
    ttft_seconds: float
    e2e_seconds: float
    request_rate: float
    output_tps: float
    processed_tps: float
    cost_per_million_processed: float
    cost_per_million_output: float
    kv_capacity_tokens: float
    kv_working_set_tokens: float
    cliff_concurrency: float
    region: Region

    @property
    def kv_working_set_fraction(self) -> float:
        return self.kv_working_set_tokens / self.kv_capacity_tokens if self.kv_capacity_tokens > 0 else math.inf

    @property
    def gpus(self) -> int:
        return self.tp


def cost_per_million(gpus: float, price_per_gpu_hour: float, tokens_per_second: float) -> float:
    """Dollars per million tokens for a group of GPUs running flat out."""
    if tokens_per_second <= 0:
        return math.inf
    return gpus * price_per_gpu_hour / (tokens_per_second * SECONDS_PER_HOUR) * 1e6


def calibration_ratio(
    model: ModelProfile, gpu: GpuSpec, tp: int, batch: float, measured_seconds: float,
    context_tokens: float, napkin: NapkinAssumptions,
) -> float:
    """How much slower reality is than the napkin, on the part of the pass that scales with work."""
    overhead = overhead_seconds(model, gpu, tp, napkin)
    napkin_work = float(napkin_per_pass(model, gpu, tp, float(batch), context_tokens, napkin)) - overhead
    return max(measured_seconds - overhead, 1e-9) / napkin_work


@dataclass(frozen=True)
class LayoutGrid:
    """Predictions for one TP at many concurrencies, as arrays (the planner's hot path)."""

    tp: int
    concurrency: FloatArray
    per_pass_seconds: FloatArray
    napkin_seconds: FloatArray
    source: str
    calibration_ratio: float
    calibrated_from_tp: int | None
    fit_covers: npt.NDArray[np.bool_]
    ttft_seconds: FloatArray
    e2e_seconds: FloatArray
    request_rate: FloatArray
    output_tps: FloatArray
    processed_tps: FloatArray
    cost_per_million_processed: FloatArray
    cost_per_million_output: FloatArray
    kv_capacity_tokens: float
    kv_working_set_tokens: FloatArray
    cliff_concurrency: float
    elasticity: FloatArray

    @property
    def per_stream_tps(self) -> FloatArray:
        return 1.0 / self.per_pass_seconds

    @property
    def kv_working_set_fraction(self) -> FloatArray:
        if self.kv_capacity_tokens <= 0:
            return np.full_like(self.concurrency, math.inf)
        return self.kv_working_set_tokens / self.kv_capacity_tokens

    def regions(self) -> list[Region]:
        return [classify_region(float(c), float(e), self.cliff_concurrency)
                for c, e in zip(self.concurrency, self.elasticity, strict=True)]

    def pass_source(self, i: int) -> str:
        if self.source == "fit" and not self.fit_covers[i]:
            return "fit+napkin"
        return self.source


def classify_region(concurrency: float, elasticity: float, cliff: float) -> Region:
    if concurrency > cliff:
        return Region.CLIFF
    if elasticity >= CLIMB_ELASTICITY:
        return Region.CLIMB
    if elasticity >= BEND_ELASTICITY:
        return Region.BEND
    return Region.PLATEAU


@dataclass(frozen=True)
class PerformanceModel:
    model: ModelProfile
    gpu: GpuSpec
    workload: Workload
    napkin: NapkinAssumptions = NapkinAssumptions()
    capacity: CapacityAssumptions = CapacityAssumptions()
    fits: Mapping[int, LinearFit] = field(default_factory=dict)
    # One measured pass per TP: (batch, seconds), for calibration without a full fit.
    measured_points: Mapping[int, tuple[float, float]] = field(default_factory=dict)
    # KV capacity reported live by the engine (cache_config_info) for a TP; it beats the model.
    observed_capacity_tokens: Mapping[int, float] = field(default_factory=dict)
    price_per_gpu_hour: float | None = None
    queue_wait_seconds: float = 0.0

    @property
    def decode_context_tokens(self) -> float:
        """Mean context a decoding stream attends over: its prompt plus half its answer."""
        return self.workload.prompt_tokens + self.workload.output_tokens / 2

    @property
    def price(self) -> float:
        return self.price_per_gpu_hour if self.price_per_gpu_hour is not None else self.gpu.price_per_gpu_hour

    def _napkin(self, tp: int, batch: FloatArray) -> FloatArray:
        return napkin_per_pass(self.model, self.gpu, tp, batch, self.decode_context_tokens, self.napkin)

    def _ratio_at(self, tp: int) -> float | None:
        fit = self.fits.get(tp)
        if fit is not None:
            mid = (fit.batch_min + fit.batch_max) / 2
            return calibration_ratio(self.model, self.gpu, tp, mid, fit.per_pass(mid),
                                     self.decode_context_tokens, self.napkin)
        point = self.measured_points.get(tp)
        if point is not None:
            return calibration_ratio(self.model, self.gpu, tp, point[0], point[1],
                                     self.decode_context_tokens, self.napkin)
        return None

    def _nearest_calibrated_tp(self, tp: int) -> int | None:
        known = set(self.fits) | set(self.measured_points)
        if not known:
            return None
        return min(known, key=lambda t: (abs(math.log2(t) - math.log2(tp)), -t))

    def _per_pass_array(
        self, tp: int, batch: FloatArray
    ) -> tuple[FloatArray, FloatArray, str, float, int | None, npt.NDArray[np.bool_]]:
        napkin = self._napkin(tp, batch)
        no_cover = np.zeros(batch.shape, dtype=bool)
        overhead = overhead_seconds(self.model, self.gpu, tp, self.napkin)
        fit = self.fits.get(tp)
        if fit is not None:
            ratio = self._ratio_at(tp) or 1.0
            span = fit.batch_max - fit.batch_min
            covers = (batch >= fit.batch_min - 0.1 * span) & (batch <= fit.batch_max + 0.25 * span)
            line = fit.intercept_s + fit.slope_s * batch
            beyond = np.maximum(line, overhead + ratio * (napkin - overhead))
            return np.where(covers, line, beyond), napkin, "fit", ratio, tp, covers
        source_tp = self._nearest_calibrated_tp(tp)
        if source_tp is not None:
            ratio = self._ratio_at(source_tp) or 1.0
            return overhead + ratio * (napkin - overhead), napkin, "calibrated-napkin", ratio, source_tp, no_cover
        return napkin, napkin, "napkin", 1.0, None, no_cover

    def per_pass(self, tp: int, batch: float) -> PassPrediction:
        seconds, napkin, source, ratio, from_tp, covers = self._per_pass_array(tp, np.array([float(batch)]))
        if source == "fit" and not covers[0]:
            source = "fit+napkin"
        return PassPrediction(float(seconds[0]), float(napkin[0]), source, ratio, from_tp)

    def kv_capacity(self, tp: int) -> float:
        observed = self.observed_capacity_tokens.get(tp)
        if observed is not None:
            return observed
        return kv_capacity_tokens(self.model, self.gpu, tp, self.capacity, self.workload.context_tokens)

    def prefill_rate(self, tp: int) -> float:
        return prefill_tokens_per_second(self.model, self.gpu, tp, self.napkin)

    def ttft(self, tp: int, concurrency: float) -> float:
        """Seed 000's TTFT: a request's fresh tokens prefill while sharing compute with the batch."""
        fresh = self.workload.prefill_tokens_for_ttft
        return self.queue_wait_seconds + fresh * concurrency / self.prefill_rate(tp)

    def _lifecycle(self, tp: int, concurrency: FloatArray, per_pass: FloatArray) -> tuple[FloatArray, FloatArray]:
        ttft = self.queue_wait_seconds + self.workload.prefill_tokens_for_ttft * concurrency / self.prefill_rate(tp)
        return ttft, ttft + self.workload.output_tokens * per_pass

    def per_stream_tps(self, tp: int, concurrencies: FloatArray) -> FloatArray:
        """`grid(tp, concurrencies).per_stream_tps` alone, without the rest of the grid."""
        per_pass, *_ = self._per_pass_array(tp, np.asarray(concurrencies, dtype=float))
        tps: FloatArray = 1.0 / per_pass
        return tps

    def grid(self, tp: int, concurrencies: FloatArray) -> LayoutGrid:
        """Every prediction for one TP over an array of concurrencies."""
        c = np.asarray(concurrencies, dtype=float)
        n = c.size
        # Elasticity d ln(aggregate) / d ln(c), by central differences on the same chain; the probes
        # go through the roofline in the same call as the grid itself (a third of the planner's time).
        lo, hi = np.maximum(c - 0.5, 0.5), c + 0.5
        probes = np.concatenate([c, lo, hi])
        per_pass_all, napkin_all, source, ratio, from_tp, covers_all = self._per_pass_array(tp, probes)
        per_pass, napkin, covers = per_pass_all[:n], napkin_all[:n], covers_all[:n]
        ttft_all, e2e_all = self._lifecycle(tp, probes, per_pass_all)
        ttft, e2e = ttft_all[:n], e2e_all[:n]
        agg_lo, agg_hi = lo / e2e_all[n:2 * n], hi / e2e_all[2 * n:]
        elasticity = np.log(agg_hi / agg_lo) / np.log(hi / lo)
        rate = c / e2e
        output_tps = rate * self.workload.output_tokens
        processed_tps = rate * self.workload.processed_tokens
        dollars_per_second = tp * self.price / SECONDS_PER_HOUR
        with np.errstate(divide="ignore"):
            cost_processed = dollars_per_second / processed_tps * 1e6
            cost_output = dollars_per_second / output_tps * 1e6
        capacity = self.kv_capacity(tp)
        return LayoutGrid(
            tp=tp, concurrency=c, per_pass_seconds=per_pass, napkin_seconds=napkin, source=source,
            calibration_ratio=ratio, calibrated_from_tp=from_tp, fit_covers=covers,
            ttft_seconds=ttft, e2e_seconds=e2e, request_rate=rate, output_tps=output_tps,
            processed_tps=processed_tps, cost_per_million_processed=cost_processed,
            cost_per_million_output=cost_output, kv_capacity_tokens=capacity,
            kv_working_set_tokens=c * (self.workload.context_tokens + self.workload.resident_prefix_tokens),
            cliff_concurrency=cliff_concurrency(capacity, self.workload), elasticity=elasticity,
        )

    def predict(self, tp: int, concurrency: int) -> LayoutPrediction:
        g = self.grid(tp, np.array([float(concurrency)]))
        return LayoutPrediction(
            tp=tp,
            concurrency=concurrency,
            per_pass=self.per_pass(tp, concurrency),
            per_stream_tps=float(g.per_stream_tps[0]),
            ttft_seconds=float(g.ttft_seconds[0]),
            e2e_seconds=float(g.e2e_seconds[0]),
            request_rate=float(g.request_rate[0]),
            output_tps=float(g.output_tps[0]),
            processed_tps=float(g.processed_tps[0]),
            cost_per_million_processed=float(g.cost_per_million_processed[0]),
            cost_per_million_output=float(g.cost_per_million_output[0]),
            kv_capacity_tokens=g.kv_capacity_tokens,
            kv_working_set_tokens=float(g.kv_working_set_tokens[0]),
            cliff_concurrency=g.cliff_concurrency,
            region=g.regions()[0],
        )
