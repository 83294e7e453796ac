"""Predictions for a layout (TP, concurrency): per-pass time, per-stream TPS, TTFT, Little's-law
throughput, cost, KV working set and the region of the batch-size curve.

The per-pass time comes from, in order of trust:
1. the physics fit of this TP (passfit.py: the napkin's terms with fitted coefficients), where its
   samples cover B ("fit");
2. beyond the sampled batches, the same fit, whose napkin-shaped terms carry it there
   ("fit+napkin"): the experts' union saturates, KV grows with batch x context, a line sees neither;
3. with no samples at this TP, the napkin scaled by the calibration ratio measured at the
   nearest TP that has them, and the prediction says so ("calibrated-napkin");
4. the bare napkin.
A fit may be given as live samples (SampleSet), a fitted PassFit, or a measured line (LinearFit, read
back over the batches it was measured at). Every prediction carries an interval (low, high): the fit's
posterior band, which widens away from the samples; for the napkin, the spread first-principles
napkins are known to miss real stacks by (the B200 load test: 2-10x; the public sweeps in
docs/model-validation.md: 1.6-4x), and for a calibrated napkin a band that widens with the distance
in TP from the calibrated layout.

Region labels follow the batch axis in order (climb, bend, plateau, cliff): the elasticity that labels
a concurrency is the lowest seen at or below it, since a curve that has bent does not climb again
(a MoE's passes flatten as its experts saturate, which would otherwise read as a second climb).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

import numpy as np
import numpy.typing as npt

from infertune.model.catalog import GpuSpec, ModelProfile
from infertune.model.fit import FitError, LinearFit
from infertune.model.kv import CapacityAssumptions, cliff_concurrency, kv_capacity_tokens
from infertune.model.passfit import PassFit, SampleSet, fit_from_line, fit_from_samples, pass_terms, term_columns
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

# Without samples the napkin's band is its known miss: first-principles napkins land 2-10x off real
# stacks (the B200 load test); on the public sweeps of docs/model-validation.md it was 1.6-4x over.
NAPKIN_SPREAD = 3.0
# The napkin against its anchor, the B200 load test's passes at TP8 (seed 000: ~54 tok/s a stream at B=8,
# 36.8 ms at B=16), as measured / napkin by batch: 8% slow where the batch is small, 12% fast once attention
# compute bites. Before any pass is measured, replicas are sized on the napkin read that much slower where it
# was fast (`unmeasured_pass_factor`): a start on its point alone runs at the queue's edge for a whole model
# load when the napkin is that far off.
ANCHOR_PASS_RATIO = ((8.0, 0.925), (16.0, 1.136))

# A calibration carried to another TP: the band widens by this factor per octave of TP away. It holds
# every public cross-TP measurement we have: gpt-oss-120b on H100 at TP2, TP4 and TP8 (InferenceX #828,
# c=64), each TP predicted from each other at the same batch, missed by 1.23-1.51x per octave, both ways
# (TP8's calibration carried to TP4 was 1.51x fast; docs/model-validation.md, "Across TPs").
TRANSFER_SPREAD_PER_OCTAVE = 1.55
# Concurrencies below the smallest asked for, at which the region's elasticity is also probed: every
# one up to this many (so a single concurrency reads the label the whole axis gives it), a geometric
# ladder of as many beyond.
ORDER_LADDER = 512

AnyFit = LinearFit | PassFit | SampleSet


def unmeasured_pass_factor(batch: FloatArray) -> FloatArray:
    """What the napkin's pass is multiplied by to size replicas while nothing is measured: the anchor's
    measured / napkin at this batch (held beyond its two points), never below 1."""
    xs, ys = zip(*ANCHOR_PASS_RATIO, strict=True)
    factor: FloatArray = np.maximum(np.interp(np.asarray(batch, dtype=float), xs, ys), 1.0)
    return factor


def _bucketed(context: float) -> float:
    """The workload's context in steps of about 4%: it stands in only for samples without a context
    of their own, and the fit cache must not miss because the observed mean moved by a token."""
    return float(2.0 ** (round(math.log2(context) * 16) / 16)) if context > 0 else context


@dataclass(frozen=True)
class PassPrediction:
    seconds: float
    napkin_seconds: float
    source: str  # "fit", "fit+napkin", "calibrated-napkin", "napkin"
    calibration_ratio: float = 1.0
    calibrated_from_tp: int | None = None
    low_seconds: float = math.nan  # the interval; NaN only when built by hand without one
    high_seconds: float = math.nan


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
    elasticity: FloatArray  # ordered: the lowest at or below each concurrency
    per_pass_low: FloatArray
    per_pass_high: FloatArray

    @property
    def per_stream_tps(self) -> FloatArray:
        return 1.0 / self.per_pass_seconds

    @property
    def extrapolated(self) -> npt.NDArray[np.bool_]:
        """Rows a fit of this TP predicts beyond its samples: where its interval is what is known."""
        if self.source != "fit":
            return np.zeros(self.concurrency.shape, dtype=bool)
        out: npt.NDArray[np.bool_] = ~self.fit_covers
        return out

    @property
    def unmeasured(self) -> npt.NDArray[np.bool_]:
        """Rows whose per-stream speed is judged at the interval's slow end: a fit beyond its samples, and
        every row of a calibration carried from another TP (this TP never ran, and a floor missed there
        costs a restart to mend). The bare napkin, with nothing measured anywhere, keeps its point: its
        band would reject every layout before the first sample."""
        if self.source == "calibrated-napkin":
            return np.ones(self.concurrency.shape, dtype=bool)
        return self.extrapolated

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


def ordered_elasticity(concurrency: FloatArray, elasticity: FloatArray) -> FloatArray:
    """Each concurrency's elasticity as the lowest at or below it, so the regions come in order."""
    if concurrency.size < 2 or bool(np.all(concurrency[1:] >= concurrency[:-1])):  # the planner's axis
        ordered: FloatArray = np.minimum.accumulate(elasticity)
        return ordered
    order = np.argsort(concurrency, kind="stable")
    running = np.minimum.accumulate(elasticity[order])
    out = np.empty_like(elasticity)
    out[order] = running
    return out


@dataclass(frozen=True)
class _PassArrays:
    seconds: FloatArray
    napkin: FloatArray
    low: FloatArray
    high: FloatArray
    source: str
    ratio: float
    from_tp: int | None
    covers: npt.NDArray[np.bool_]


@dataclass(frozen=True)
class PerformanceModel:
    model: ModelProfile
    gpu: GpuSpec
    workload: Workload
    napkin: NapkinAssumptions = NapkinAssumptions()
    capacity: CapacityAssumptions = CapacityAssumptions()
    # Per TP: live samples, a physics fit, or a measured line (see the module docstring).
    fits: Mapping[int, AnyFit] = field(default_factory=dict)
    # One measured pass per TP: (batch, seconds), for calibration without a full fit.
    measured_points: Mapping[int, tuple[float, float]] = field(default_factory=dict)
    # KV capacity reported live by the engine (cache_config_info) for a TP; it beats the model.
    observed_capacity_tokens: Mapping[int, float] = field(default_factory=dict)
    price_per_gpu_hour: float | None = None
    queue_wait_seconds: float = 0.0
    # Resolved fits and calibration ratios, memoised per instance (the planner asks per TP, often).
    _memo: dict[tuple[str, int], object] = field(default_factory=dict, init=False, repr=False, compare=False)

    @property
    def decode_context_tokens(self) -> float:
        """Mean context a decoding stream attends over: its prompt plus half its answer."""
        return self.workload.prompt_tokens + self.workload.output_tokens / 2

    @property
    def price(self) -> float:
        return self.price_per_gpu_hour if self.price_per_gpu_hour is not None else self.gpu.price_per_gpu_hour

    def pass_fit(self, tp: int) -> PassFit | None:
        """This TP's physics fit, from whatever form it was given in; None without one (or when its
        samples cannot support one). Cached by content, so a plan does not refit unchanged samples."""
        key = ("fit", tp)
        if key not in self._memo:
            self._memo[key] = self._resolve_fit(tp)
        return self._memo[key]  # type: ignore[return-value]

    def _resolve_fit(self, tp: int) -> PassFit | None:
        given = self.fits.get(tp)
        if given is None or isinstance(given, PassFit):
            return given
        try:
            if isinstance(given, LinearFit):
                return fit_from_line(self.model, self.gpu, tp, given, self.decode_context_tokens, self.napkin)
            return fit_from_samples(self.model, self.gpu, tp, given, _bucketed(self.decode_context_tokens),
                                    self.napkin)
        except FitError:
            return None

    def _ratio_at(self, tp: int) -> float | None:
        key = ("ratio", tp)
        if key not in self._memo:
            self._memo[key] = self._measure_ratio(tp)
        return self._memo[key]  # type: ignore[return-value]

    def _measure_ratio(self, tp: int) -> float | None:
        fit = self.pass_fit(tp)
        if fit is not None:
            mid = (fit.batch_min + fit.batch_max) / 2
            seconds = self.per_pass(tp, mid).seconds  # a measured line's own value, where it was measured
            return calibration_ratio(self.model, self.gpu, tp, mid, seconds, self.decode_context_tokens, self.napkin)
        point = self.measured_points.get(tp)
        if point is not None:
            return calibration_ratio(self.model, self.gpu, tp, point[0], point[1],
                                     self.decode_context_tokens, self.napkin)
        return None

    def _nearest_calibrated_tp(self, tp: int) -> int | None:
        key = ("calibrated", 0)
        if key not in self._memo:
            self._memo[key] = tuple({t for t in self.fits if self.pass_fit(t) is not None} | set(self.measured_points))
        known: tuple[int, ...] = self._memo[key]  # type: ignore[assignment]
        if not known:
            return None
        return min(known, key=lambda t: (abs(math.log2(t) - math.log2(tp)), -t))

    def _pass_arrays(self, tp: int, batch: FloatArray, context: float | None = None,
                     bands: int | None = None) -> _PassArrays:
        """Per-pass seconds, napkin and interval; `bands` limits the interval to the leading rows that
        need it (the grid's probes do not), the rest carry the point."""
        ctx = self.decode_context_tokens if context is None else context
        overhead, weights, kv, compute = term_columns(self.model, self.gpu, tp, batch, ctx, self.napkin)
        napkin = overhead + self.napkin.overlap * np.maximum(weights + kv, compute)
        no_cover = np.zeros(batch.shape, dtype=bool)
        fit = self.pass_fit(tp)
        if fit is not None:
            if fit.napkin == self.napkin:
                terms = np.column_stack([np.full(weights.shape, overhead), weights, kv, compute])
            else:
                terms = pass_terms(self.model, self.gpu, tp, batch, ctx, fit.napkin)
            if bands is None or bands >= batch.size:
                seconds, low, high = fit.interval(terms)
            else:
                head, low_head, high_head = fit.interval(terms[:bands])
                seconds = np.concatenate([head, terms[bands:] @ fit.coef_array])
                low, high = seconds.copy(), seconds.copy()
                low[:bands], high[:bands] = low_head, high_head
            covers = fit.covers_array(batch)
            line = self.fits.get(tp)
            if isinstance(line, LinearFit):
                # A measured line is the truth where it was measured; its physics fit carries it beyond.
                exact = line.intercept_s + line.slope_s * batch
                to_line = np.where(covers, exact / seconds, 1.0)
                seconds, low, high = seconds * to_line, low * to_line, high * to_line
            return _PassArrays(seconds, napkin, low, high, "fit", 1.0, tp, covers)
        source_tp = self._nearest_calibrated_tp(tp)
        if source_tp is not None:
            ratio = self._ratio_at(source_tp) or 1.0
            seconds = overhead + ratio * (napkin - overhead)
            spread = TRANSFER_SPREAD_PER_OCTAVE ** max(abs(math.log2(tp) - math.log2(source_tp)), 0.5)
            return _PassArrays(seconds, napkin, seconds / spread, seconds * spread, "calibrated-napkin", ratio,
                               source_tp, no_cover)
        return _PassArrays(napkin, napkin, napkin / NAPKIN_SPREAD, napkin * NAPKIN_SPREAD, "napkin", 1.0, None,
                           no_cover)

    def per_pass(self, tp: int, batch: float, context: float | None = None) -> PassPrediction:
        """One pass at `batch` streams; `context` (tokens per stream) defaults to the workload's."""
        p = self._pass_arrays(tp, np.array([float(batch)]), context)
        source = "fit+napkin" if p.source == "fit" and not p.covers[0] else p.source
        return PassPrediction(float(p.seconds[0]), float(p.napkin[0]), source, p.ratio, p.from_tp,
                              float(p.low[0]), float(p.high[0]))

    def kv_capacity(self, tp: int) -> float:
        observed = self.observed_capacity_tokens.get(tp)
        if observed is not None:
            return observed
        return kv_capacity_tokens(self.model, self.gpu, tp, self.capacity, self.workload.context_tokens)

    def prefill_rate(self, tp: int) -> float:
        return prefill_tokens_per_second(self.model, self.gpu, tp, self.napkin)

    def ttft(self, tp: int, concurrency: float) -> float:
        """The B200 load test's TTFT: a request's fresh tokens prefill while sharing compute with the batch."""
        fresh = self.workload.prefill_tokens_for_ttft
        return self.queue_wait_seconds + fresh * concurrency / self.prefill_rate(tp)

    def _lifecycle(self, tp: int, concurrency: FloatArray, per_pass: FloatArray) -> tuple[FloatArray, FloatArray]:
        ttft = self.queue_wait_seconds + self.workload.prefill_tokens_for_ttft * concurrency / self.prefill_rate(tp)
        return ttft, ttft + self.workload.output_tokens * per_pass

    def per_stream_tps(self, tp: int, concurrencies: FloatArray, pessimistic: bool = False) -> FloatArray:
        """`grid(tp, concurrencies).per_stream_tps` alone, without the rest of the grid. Pessimistic: where
        a fit of this TP extrapolates, at the slow end of its interval."""
        c = np.asarray(concurrencies, dtype=float)
        p = self._pass_arrays(tp, c)
        seconds = p.seconds
        if pessimistic and p.source == "fit":
            seconds = np.where(p.covers, p.seconds, p.high)
        elif pessimistic and p.source == "calibrated-napkin":
            seconds = p.high
        tps: FloatArray = 1.0 / seconds
        return tps

    def grid(self, tp: int, concurrencies: FloatArray) -> LayoutGrid:
        """Every prediction for one TP over an array of concurrencies."""
        c = np.asarray(concurrencies, dtype=float)
        n = c.size
        # Elasticity d ln(aggregate) / d ln(c), by central differences on the same chain; the probes
        # go through the roofline in the same call as the grid itself (a third of the planner's time).
        # A ladder below the smallest concurrency lets the ordered elasticity see where the curve bent.
        low_c = float(c.min()) if n else 1.0
        ladder = np.arange(1.0, math.ceil(low_c)) if low_c <= ORDER_LADDER else np.unique(
            np.round(np.geomspace(1.0, low_c, ORDER_LADDER + 1)[:-1]))
        axis = np.concatenate([c, ladder])
        m = axis.size
        lo, hi = np.maximum(axis - 0.5, 0.5), axis + 0.5
        probes = np.concatenate([c, lo, hi])
        p = self._pass_arrays(tp, probes, bands=n)
        per_pass, napkin, covers = p.seconds[:n], p.napkin[:n], p.covers[:n]
        ttft_all, e2e_all = self._lifecycle(tp, probes, p.seconds)
        ttft, e2e = ttft_all[:n], e2e_all[:n]
        agg_lo, agg_hi = lo / e2e_all[n:n + m], hi / e2e_all[n + m:]
        elasticity = ordered_elasticity(axis, np.log(agg_hi / agg_lo) / np.log(hi / lo))[:n]
        rate = c / e2e
        output_tps = rate * self.workload.output_tokens
        processed_tps = rate * self.workload.processed_tokens
        dollars_per_second = tp * self.price / SECONDS_PER_HOUR
        with np.errstate(divide="ignore"):
            cost_processed = dollars_per_second / processed_tps * 1e6
            cost_output = dollars_per_second / output_tps * 1e6
        capacity = self.kv_capacity(tp)
        return LayoutGrid(
            tp=tp, concurrency=c, per_pass_seconds=per_pass, napkin_seconds=napkin, source=p.source,
            calibration_ratio=p.ratio, calibrated_from_tp=p.from_tp, fit_covers=covers,
            ttft_seconds=ttft, e2e_seconds=e2e, request_rate=rate, output_tps=output_tps,
            processed_tps=processed_tps, cost_per_million_processed=cost_processed,
            cost_per_million_output=cost_output, kv_capacity_tokens=capacity,
            kv_working_set_tokens=c * (self.workload.context_tokens + self.workload.resident_prefix_tokens),
            cliff_concurrency=cliff_concurrency(capacity, self.workload), elasticity=elasticity,
            per_pass_low=p.low[:n], per_pass_high=p.high[:n],
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
