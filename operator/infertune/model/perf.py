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

from infertune.model.catalog import GpuSpec, ModelProfile
from infertune.model.fit import LinearFit
from infertune.model.kv import CapacityAssumptions, cliff_concurrency, kv_capacity_tokens, working_set_tokens
from infertune.model.roofline import (
    NapkinAssumptions,
    napkin_per_pass,
    overhead_seconds,
    prefill_tokens_per_second,
)
from infertune.model.workload import Workload

SECONDS_PER_HOUR = 3600.0


class Region(StrEnum):
    CLIMB = "climb"
    BEND = "bend"
    PLATEAU = "plateau"
    CLIFF = "cliff"


# Elasticity of aggregate throughput to concurrency, d ln(agg) / d ln(B): near 1 every stream is
# free (climb), near 0 nothing is gained (plateau).
CLIMB_ELASTICITY = 0.6
BEND_ELASTICITY = 0.25


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
    napkin_work = napkin_per_pass(model, gpu, tp, batch, context_tokens, napkin) - overhead
    return max(measured_seconds - overhead, 1e-9) / napkin_work


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

    def _napkin(self, tp: int, batch: float) -> float:
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

    def _calibrated(self, tp: int, batch: float, ratio: float) -> float:
        overhead = overhead_seconds(self.model, self.gpu, tp, self.napkin)
        return overhead + ratio * (self._napkin(tp, batch) - overhead)

    def per_pass(self, tp: int, batch: float) -> PassPrediction:
        napkin = self._napkin(tp, batch)
        fit = self.fits.get(tp)
        if fit is not None:
            if fit.covers(batch):
                return PassPrediction(fit.per_pass(batch), napkin, "fit", 1.0, tp)
            ratio = self._ratio_at(tp) or 1.0
            seconds = max(fit.per_pass(batch), self._calibrated(tp, batch, ratio))
            return PassPrediction(seconds, napkin, "fit+napkin", ratio, tp)
        source_tp = self._nearest_calibrated_tp(tp)
        if source_tp is not None:
            ratio = self._ratio_at(source_tp) or 1.0
            return PassPrediction(self._calibrated(tp, batch, ratio), napkin, "calibrated-napkin", ratio, source_tp)
        return PassPrediction(napkin, napkin, "napkin")

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

    def _aggregate(self, tp: int, concurrency: float) -> float:
        per_pass = self.per_pass(tp, concurrency).seconds
        e2e = self.ttft(tp, concurrency) + self.workload.output_tokens * per_pass
        return concurrency / e2e

    def region(self, tp: int, concurrency: int, cliff: float) -> Region:
        if concurrency > cliff:
            return Region.CLIFF
        lo, hi = max(concurrency - 0.5, 0.5), concurrency + 0.5
        elasticity = math.log(self._aggregate(tp, hi) / self._aggregate(tp, lo)) / math.log(hi / lo)
        if elasticity >= CLIMB_ELASTICITY:
            return Region.CLIMB
        if elasticity >= BEND_ELASTICITY:
            return Region.BEND
        return Region.PLATEAU

    def predict(self, tp: int, concurrency: int) -> LayoutPrediction:
        per_pass = self.per_pass(tp, concurrency)
        ttft = self.ttft(tp, concurrency)
        e2e = ttft + self.workload.output_tokens * per_pass.seconds
        request_rate = concurrency / e2e
        output_tps = request_rate * self.workload.output_tokens
        processed_tps = request_rate * self.workload.processed_tokens
        capacity = self.kv_capacity(tp)
        cliff = cliff_concurrency(capacity, self.workload)
        return LayoutPrediction(
            tp=tp,
            concurrency=concurrency,
            per_pass=per_pass,
            per_stream_tps=1.0 / per_pass.seconds,
            ttft_seconds=ttft,
            e2e_seconds=e2e,
            request_rate=request_rate,
            output_tps=output_tps,
            processed_tps=processed_tps,
            cost_per_million_processed=cost_per_million(tp, self.price, processed_tps),
            cost_per_million_output=cost_per_million(tp, self.price, output_tps),
            kv_capacity_tokens=capacity,
            kv_working_set_tokens=working_set_tokens(self.workload, concurrency),
            cliff_concurrency=cliff,
            region=self.region(tp, concurrency, cliff),
        )
