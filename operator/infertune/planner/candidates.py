"""Every allowed (TP, concurrency) as one table of arrays, each row judged with a reason.

A row is rejected by the first check it fails, in this order: the weights do not fit, the TP
group is larger than the pool, the working set crosses the KV headroom line, the per-stream
SLO is missed, the TTFT SLO is missed.

The KV line is judged at the operating point, not at the cap alone: `--max-num-seqs` is a cap, and
replicas sized by the queueing model run below it most of the time. At the load a replica is sized
for, the number of running streams follows the M/M/c busy-slot distribution (model/queueing.py), and
n streams of contexts spread by the workload's `context_cv` hold a working set of mean n x m and
spread m x cv x sqrt(n); a layout qualifies when the working set crosses the line no more than
KV_RISK of the time. A cap whose mean working set is past the KV capacity itself (the cliff) never
qualifies, however rarely it would fill. (Judged at the cap's tail alone, TP4 at c=8 for the load
test's traffic, mean 89%, was rejected outright; judged at the cap's mean it ran past the line
whenever a few long sessions shared a replica: on the twin, TTFT p95 19 s.)
The per-stream floor is judged the same way: a decode pass slows with the batch's summed context,
so the floor must hold for a batch that long (the speed at c x the same overshoot). At the mean,
TP8 c=20 clears 25 tok/s by 5%, and on the twin 11% of its streams decode below it. It is also judged
with the prefill that shares each decode step (`with_prefill`): for short answers behind long prompts
the decode pass alone allowed TP4 c=25, where on the twin 97% of answers decode below the floor.
Each row also carries what one replica sustains with random arrivals (model/queueing.py), which
is what replicas are sized by.

The per-stream floor is a limit on the streams that run at once, and `--max-num-seqs` only caps them.
A cap above the most streams that keep the floor (`floor_streams`) is feasible as slots that take a
burst at once, at a slower decode, instead of queueing it for a pod that is still loading, when those
slots are safe to fill (every slot busy, the working set's p95 stays under the KV line). Such a row
is sized at the rate at which more than `floor_streams` streams run no more than STREAM_FLOOR_RISK of
the time, so at its sized load it keeps the floor as the smaller cap does, below that cap's own rate:
no more replicas where one or two carry the demand, up to a quarter more GPU-hours on a busy one-shot
chat fleet (docs/bench-history.md, "A cap past the floor takes the burst"). A chat draw with 6x
bursts on a quiet fleet (random seed 606) went from 83.25% to 100% this way: static TP4 c=48 x2 reached
100% on 8 GPU-h where infertune's c=23 queued. Coding contexts meet the KV condition at TP8 only, where
a running cap such as the preset's c=14 is then kept and scaled at its lower rate: the 2-hour spike's
seeds 9 and 15 fell from 99.55% and 97.87% to 79% on the paths that followed (docs/bench-history.md).

Where a fit of the TP predicts beyond the batches it sampled, the per-pass time is an interval, not a
point, and the planner takes its slow end for the two judgements a wrong guess would hurt: the
per-stream floor (a layout is feasible only if its streams keep the SLO speed at the interval's slow end)
and the rate replicas are sized by (e2e at the slow end). Inside the sampled batches the fit is measured
and the point stands; without samples at all the napkin's 2-10x band would reject everything, so the
point stands there too until the operator has learnt, except that the replica count is then sized with
the napkin's miss at its anchor (`unmeasured_pass_factor`); the shape is still ranked on the point
(`point_rate`), so a hedge on the count does not move the start to another shape. The KV line is
judged on the working set's own p95 above, with the busy slots held for the point's e2e. (Holding them
for the slow end's, where the fit extrapolates, was tried: the interval narrows and widens as the sampled
batches move, the line's verdict flipped with it, and over the simulated week the operator re-laid out
57 times instead of 19 for 10% more GPU-hours at the same attainment.)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import IntEnum

import numpy as np
import numpy.typing as npt

from infertune.model.perf import LayoutGrid, PerformanceModel, Region, classify_region, unmeasured_pass_factor
from infertune.model.queueing import busy_distribution, load_keeping_streams, sustainable_rates
from infertune.planner.types import PlanRequest

FloatArray = npt.NDArray[np.float64]

# One-sided 95% normal quantile: the per-stream floor is judged on a batch whose context overshoots
# the mean this far one time in twenty.
WORKING_SET_Z = 1.645
# A new layout may have its working set past the KV line this share of the time at its sized load; a
# running one is torn down only past RUNNING_KV_RISK (so a shape at the boundary is not restarted
# every time the request shape moves).
KV_RISK = 0.05
# Before anything is measured (the pass is the bare napkin's, the contexts the hint's), a new layout keeps
# half that share: the shape started on is kept until RUNNING_KV_RISK, so one started on the line itself has
# no margin for contexts a little longer or passes a little slower than guessed, and once a rise fills the
# pool it can neither stay below the cliff nor be left (the 2-hour spike, seed 5: TP4 c=7 started at 5.0%,
# measured at 11.9% by 2,400 s, past the cliff for 895 s after the step; docs/bench.md).
UNMEASURED_KV_RISK = KV_RISK / 2
# A cap above the streams that keep the per-stream floor is sized so that more of them run at once no more
# than this share of the time: the same share the KV line allows a new layout.
STREAM_FLOOR_RISK = KV_RISK
# Past this share of its time prefilling, a replica's decode is as good as stalled.
MAX_PREFILL_SHARE = 0.95
RUNNING_KV_RISK = 0.25


class Verdict(IntEnum):
    FEASIBLE = 0
    WEIGHTS_DO_NOT_FIT = 1
    EXCEEDS_POOL = 2
    OVER_KV_HEADROOM = 3
    STREAM_TPS_BELOW_SLO = 4
    TTFT_ABOVE_SLO = 5


VERDICT_REASON = {
    Verdict.FEASIBLE: "Feasible",
    Verdict.WEIGHTS_DO_NOT_FIT: "WeightsDoNotFit",
    Verdict.EXCEEDS_POOL: "ExceedsPool",
    Verdict.OVER_KV_HEADROOM: "OverKVHeadroom",
    Verdict.STREAM_TPS_BELOW_SLO: "StreamTPSBelowSLO",
    Verdict.TTFT_ABOVE_SLO: "TTFTAboveSLO",
}


@dataclass(frozen=True)
class Candidate:
    tp: int
    max_num_seqs: int
    per_stream_tps: float
    ttft_seconds: float
    e2e_seconds: float
    request_rate: float
    processed_tps: float
    output_tps: float
    sustainable_rate: float  # per replica, random arrivals, within the TTFT SLO (model/queueing.py)
    cost_per_million_tokens: float  # processed tokens, the B200 load test's measure
    cost_per_million_output_tokens: float
    kv_working_set_fraction: float
    kv_tail_fraction: float  # the working set's 95th percentile over the pool with every slot busy
    kv_risk: float  # P(working set past the line) at the load the replica is sized for
    kv_capacity_tokens: float
    cliff_concurrency: float
    safe_concurrency: float
    region: Region
    pass_source: str
    feasible: bool
    reason: str
    per_pass_seconds: float = math.nan
    per_pass_low_seconds: float = math.nan  # the prediction's interval
    per_pass_high_seconds: float = math.nan
    pessimistic: bool = False  # judged at the interval's slow end (a fit extrapolating)


@dataclass(frozen=True)
class CandidateTable:
    """Column arrays over all rows; `row(i)` materialises one Candidate for display."""

    grids: tuple[LayoutGrid, ...]
    offsets: tuple[int, ...]
    tp: npt.NDArray[np.int64]
    concurrency: FloatArray
    per_stream_tps: FloatArray
    ttft_seconds: FloatArray
    cost: FloatArray
    kv_fraction: FloatArray
    kv_tail: FloatArray
    kv_risk: FloatArray  # P(working set past the line) at the sized load
    tps_tail: FloatArray  # per-stream speed when the batch's context runs to its p95
    sustainable_rate: FloatArray  # what replica counts are sized by
    point_rate: FloatArray  # the same on the pass's point: what shapes are ranked by (equal once measured)
    floor_streams: npt.NDArray[np.int64]  # a burst cap's streams that keep the floor; 0 on every other row
    headroom_line: float
    verdict: npt.NDArray[np.int64]
    # How far each row misses its worst constraint, normalised; 0 for feasible rows.
    shortfall: FloatArray
    min_stream_tps: float | None
    max_ttft_seconds: float | None
    ttft_percentile: int = 95

    def __len__(self) -> int:
        return int(self.tp.size)

    def kv_risk_at(self, i: int, scale: float, cv: float) -> float:
        """Row `i`'s KV risk with every stream's working set `scale` times what the row was judged on:
        the same busy-slot distribution at its sized load, the same line."""
        grid, j = self._grid_of(i)
        risk = kv_risk(np.array([float(self.kv_fraction[i]) * scale]), np.array([float(self.concurrency[i])]),
                       np.array([float(self.sustainable_rate[i])]), np.array([float(grid.e2e_seconds[j])]), cv,
                       self.headroom_line)
        return float(risk[0])

    def _grid_of(self, i: int) -> tuple[LayoutGrid, int]:
        k = int(np.searchsorted(self.offsets, i, side="right")) - 1
        return self.grids[k], i - self.offsets[k]

    def reason(self, i: int) -> str:
        v = Verdict(int(self.verdict[i]))
        tps, ttft, tail = float(self.per_stream_tps[i]), float(self.ttft_seconds[i]), float(self.kv_tail[i])
        grid, _ = self._grid_of(i)
        if v is Verdict.FEASIBLE and self.floor_streams[i] > 0:
            return (f"Feasible: sized at {float(self.sustainable_rate[i]):.3g} req/s a replica, where more than "
                    f"{int(self.floor_streams[i])} streams (the most that keep {self.min_stream_tps:g} tok/s) run "
                    f"{STREAM_FLOOR_RISK:.0%} of the time or less; the slots above take a burst at a slower decode "
                    f"(every slot busy: KV p95 {tail:.0%}, under the line)")
        if v is Verdict.FEASIBLE:
            return "Feasible: meets the SLO below the KV headroom line"
        if v is Verdict.WEIGHTS_DO_NOT_FIT:
            return f"WeightsDoNotFit: no HBM left for KV at TP{grid.tp}"
        if v is Verdict.EXCEEDS_POOL:
            return f"ExceedsPool: TP{grid.tp} needs more GPUs than the pool has"
        if v is Verdict.OVER_KV_HEADROOM:
            mean = float(self.kv_fraction[i])
            if mean > 1.0:
                return (f"OverKVHeadroom: every slot busy holds {mean:.0%} of the KV pool: past the cliff "
                        f"(c={grid.cliff_concurrency:.1f})")
            unmeasured = grid.source == "napkin"
            allowed = UNMEASURED_KV_RISK if unmeasured else KV_RISK
            return (f"OverKVHeadroom: at the load it is sized for, the working set crosses the "
                    f"{self.headroom_line:.0%} line {float(self.kv_risk[i]):.1%} of the time, over the "
                    f"{allowed:.1%} a new layout may take{' while nothing is measured' if unmeasured else ''} "
                    f"(every slot busy: mean {mean:.0%}, p95 {tail:.0%}; cliff at c={grid.cliff_concurrency:.1f})")
        if v is Verdict.STREAM_TPS_BELOW_SLO:
            _, j = self._grid_of(i)
            slow = " at the slow end of its interval (not measured there)" if grid.unmeasured[j] else ""
            return (f"StreamTPSBelowSLO: {float(self.tps_tail[i]):.1f} tok/s per stream in the longest batches"
                    f"{slow} (mean {tps:.1f}) < {self.min_stream_tps:g} tok/s")
        return f"TTFTAboveSLO: TTFT {ttft:.2f} s > {self.max_ttft_seconds:g} s"

    def row(self, i: int) -> Candidate:
        grid, j = self._grid_of(i)
        cliff = grid.cliff_concurrency
        return Candidate(
            tp=grid.tp,
            max_num_seqs=int(grid.concurrency[j]),
            per_stream_tps=float(grid.per_stream_tps[j]),
            ttft_seconds=float(grid.ttft_seconds[j]),
            e2e_seconds=float(grid.e2e_seconds[j]),
            request_rate=float(grid.request_rate[j]),
            sustainable_rate=float(self.sustainable_rate[i]),
            processed_tps=float(grid.processed_tps[j]),
            output_tps=float(grid.output_tps[j]),
            cost_per_million_tokens=float(grid.cost_per_million_processed[j]),
            cost_per_million_output_tokens=float(grid.cost_per_million_output[j]),
            kv_working_set_fraction=float(self.kv_fraction[i]),
            kv_tail_fraction=float(self.kv_tail[i]),
            kv_risk=float(self.kv_risk[i]),
            kv_capacity_tokens=grid.kv_capacity_tokens,
            cliff_concurrency=cliff,
            safe_concurrency=cliff * self.headroom_line,
            region=classify_region(float(grid.concurrency[j]), float(grid.elasticity[j]), cliff),
            pass_source=grid.pass_source(j),
            feasible=bool(self.verdict[i] == Verdict.FEASIBLE),
            reason=self.reason(i),
            per_pass_seconds=float(grid.per_pass_seconds[j]),
            per_pass_low_seconds=float(grid.per_pass_low[j]),
            per_pass_high_seconds=float(grid.per_pass_high[j]),
            pessimistic=bool(grid.unmeasured[j]),
        )

    def rows(self) -> list[Candidate]:
        return [self.row(i) for i in range(len(self))]


def _sizing_e2e(grid: LayoutGrid, perf: PerformanceModel, hedged: bool = True) -> FloatArray:
    """Request time replicas are sized by: at the slow end of the interval where a fit extrapolates, and
    (`hedged`) with the napkin's known miss at its anchor while nothing at all has been measured."""
    if grid.source == "napkin" and hedged:
        napkin_read_slow = grid.per_pass_seconds * unmeasured_pass_factor(grid.concurrency)
        return grid.ttft_seconds + perf.workload.output_tokens * napkin_read_slow
    slow = grid.ttft_seconds + perf.workload.output_tokens * grid.per_pass_high
    e2e: FloatArray = np.where(grid.extrapolated, slow, grid.e2e_seconds)
    return e2e


def _normal_sf(z: FloatArray) -> FloatArray:
    """P(Z > z) for a standard normal (Abramowitz and Stegun 7.1.26, error under 1.5e-7): the core
    has numpy only, which has no erf."""
    # Past 26 the tail is under 1e-290, i.e. 0 for any risk; the clip keeps x * x and exp finite.
    x = np.minimum(np.abs(z) / math.sqrt(2.0), 26.0)
    t = 1.0 / (1.0 + 0.3275911 * x)
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
    tail = 0.5 * poly * np.exp(-x * x)
    out: FloatArray = np.where(z >= 0, tail, 1.0 - tail)
    return out


def _crosses(share: FloatArray, streams: FloatArray, cv: float, line: float) -> FloatArray:
    """P(n streams of mean share `share` and relative spread `cv` hold more than `line` of the pool)."""
    mean = streams * share
    if cv <= 0:
        return (mean > line).astype(float)
    with np.errstate(divide="ignore", invalid="ignore"):
        z = np.nan_to_num((line - mean) / (cv * share * np.sqrt(streams)), nan=np.inf, posinf=np.inf, neginf=-np.inf)
    out: FloatArray = np.where(streams > 0, _normal_sf(z), 0.0)
    return out


def kv_risk(fraction: FloatArray, concurrency: FloatArray, rate: FloatArray, e2e: FloatArray, cv: float,
            line: float) -> FloatArray:
    """P(a replica's working set is past `line` of its KV pool) at `rate` requests/s, for each cap:
    over the busy-slot distribution at that load, n streams of mean share `fraction / c` and relative
    spread `cv`. The holding time is the full batch's (the longest), so the load is not understated.

    With every slot busy the risk is at its largest, so where even that is small (or the working set
    is past the pool outright) that bound is the answer; the busy-slot distribution, O(c^2) a row, is
    weighed only for the caps in between, a handful per TP."""
    share = np.where(np.isfinite(fraction), fraction, 0.0) / np.maximum(concurrency, 1.0)
    risk: FloatArray = np.where(np.isfinite(fraction), _crosses(share, concurrency, cv, line), 1.0)
    between = (risk > KV_RISK) & (fraction <= 1.0) & (rate > 0)
    if between.any():
        caps = concurrency[between].astype(np.int64)
        most = int(caps.max())
        busy = busy_distribution(caps, np.maximum(rate[between] * e2e[between], 0.0), most)
        streams = np.arange(most + 1, dtype=float)
        risk[between] = (busy * _crosses(share[between][:, None], streams, cv, line)).sum(axis=1)
    return risk


def with_prefill(tps: FloatArray, slots: FloatArray, e2e: FloatArray, fresh_tokens: float, output_tokens: float,
                 prefill_rate: float) -> FloatArray:
    """Per-stream speed once decode shares its steps with the prefill of the requests that keep every
    slot busy: a step runs each stream's token and any prefill chunk, so a request decoding n tokens
    also waits for the prefills that start meanwhile, a Poisson count judged at its WORKING_SET_Z tail
    (a short answer sees few, so its speed varies most)."""
    pass_seconds = 1.0 / tps
    prefill_seconds = fresh_tokens / prefill_rate if prefill_rate > 0 else 0.0
    turnover = slots / e2e
    share = np.clip(turnover * prefill_seconds, 0.0, MAX_PREFILL_SHARE)
    tokens = max(output_tokens - 1.0, 1.0)  # the SLA's speed is the mean after the first token
    starts = turnover * tokens * pass_seconds / (1.0 - share)
    tail = starts + WORKING_SET_Z * np.sqrt(starts)
    out: FloatArray = tokens / (tokens * pass_seconds + tail * prefill_seconds)
    return out


def _burst_slots(request: PlanRequest, grid: LayoutGrid, cols: dict[str, list[FloatArray]], k: int, line: float,
                 rates: FloatArray, point: FloatArray) -> npt.NDArray[np.int64]:
    """TP `k`'s caps above the most streams that keep the per-stream floor, made feasible where their every
    slot busy stays under the KV line, at the rate that keeps more streams than that to STREAM_FLOOR_RISK
    of the time (module docstring). Lowers those rows' rates and clears their verdicts in place; returns
    the streams each row keeps the floor with (0 on rows left as they were)."""
    verdict, caps = cols["v"][k], cols["c"][k]
    floor_streams = np.zeros(caps.shape, dtype=np.int64)
    keeping = np.flatnonzero(verdict == Verdict.FEASIBLE)
    if request.slo.min_stream_tps is None or keeping.size == 0:
        return floor_streams
    most = int(keeping.max())
    ttft_met = (np.ones(caps.shape, dtype=bool) if request.slo.max_ttft_seconds is None
                else grid.ttft_seconds <= request.slo.max_ttft_seconds)
    rows = np.flatnonzero((verdict == Verdict.STREAM_TPS_BELOW_SLO) & ttft_met & (cols["tail"][k] <= line)
                          & (np.arange(caps.size) > most))
    if rows.size == 0:
        return floor_streams
    streams = int(caps[most])
    load = load_keeping_streams(caps[rows].astype(np.int64), np.full(rows.size, streams), STREAM_FLOOR_RISK)
    # Held for as long as `streams` running streams take: the batch the rate keeps them to.
    lowered = np.minimum(rates[rows], load / float(grid.e2e_seconds[most]))
    served, lowered = rows[lowered > 0], lowered[lowered > 0]
    point[served] *= lowered / rates[served]
    rates[served] = lowered
    verdict[served] = Verdict.FEASIBLE
    cols["short"][k][served] = 0.0
    floor_streams[served] = streams
    return floor_streams


def build_table(request: PlanRequest, perf: PerformanceModel) -> CandidateTable:
    concurrencies = np.arange(request.concurrency_min, request.concurrency_max + 1, dtype=float)
    line = 1.0 - request.kv_headroom
    grids: list[LayoutGrid] = []
    offsets: list[int] = []
    keys = ("tp", "c", "tps", "tps_tail", "ttft", "cost", "frac", "tail", "rate", "risk", "v", "short")
    cols: dict[str, list[FloatArray]] = {k: [] for k in keys}
    spread = 1.0 + WORKING_SET_Z * perf.workload.context_cv / np.sqrt(np.maximum(concurrencies, 1.0))
    n = 0
    for tp in sorted(set(request.tp_sizes)):
        grid = perf.grid(tp, concurrencies)
        grids.append(grid)
        offsets.append(n)
        n += concurrencies.size
        tps = grid.per_stream_tps
        tps_tail = with_prefill(perf.per_stream_tps(tp, concurrencies * spread, pessimistic=True), concurrencies,
                                grid.e2e_seconds, perf.workload.fresh_tokens, perf.workload.output_tokens,
                                perf.prefill_rate(tp))
        frac = grid.kv_working_set_fraction
        tail = frac * spread
        verdict = np.full(concurrencies.shape, Verdict.FEASIBLE, dtype=np.int64)
        short = np.zeros(concurrencies.shape)
        # Checks run from the least to the most fundamental so the most fundamental wins.
        if request.slo.max_ttft_seconds is not None:
            miss = grid.ttft_seconds > request.slo.max_ttft_seconds
            verdict[miss] = Verdict.TTFT_ABOVE_SLO
            short += np.maximum(grid.ttft_seconds / request.slo.max_ttft_seconds - 1.0, 0.0)
        if request.slo.min_stream_tps is not None:
            miss = tps_tail < request.slo.min_stream_tps
            verdict[miss] = Verdict.STREAM_TPS_BELOW_SLO
            short += np.maximum(1.0 - tps_tail / request.slo.min_stream_tps, 0.0)
        if request.pool_gpus is not None and tp > request.pool_gpus:
            verdict[:] = Verdict.EXCEEDS_POOL
            short[:] = math.inf
        if grid.kv_capacity_tokens <= 0:
            verdict[:] = Verdict.WEIGHTS_DO_NOT_FIT
            short[:] = math.inf
        cols["tp"].append(np.full(concurrencies.shape, tp, dtype=float))
        cols["c"].append(concurrencies)
        cols["tps"].append(tps)
        cols["tps_tail"].append(tps_tail)
        cols["ttft"].append(grid.ttft_seconds)
        cols["cost"].append(grid.cost_per_million_processed)
        cols["frac"].append(frac)
        cols["tail"].append(tail)
        cols["v"].append(verdict.astype(float))
        cols["short"].append(short)
    # Every TP at once: the queueing search is a handful of numpy passes however many TPs there are.
    # A TP whose weights leave no KV pool never serves, and sustains nothing.
    serving = [i for i, g in enumerate(grids) if g.kv_capacity_tokens > 0]

    def rates_of(hedged: bool) -> FloatArray:
        out = np.zeros((len(grids), concurrencies.size))
        if serving:
            out[serving] = sustainable_rates(concurrencies, concurrencies,
                                             np.stack([_sizing_e2e(grids[i], perf, hedged) for i in serving]),
                                             np.stack([grids[i].ttft_seconds for i in serving]),
                                             request.slo.max_ttft_seconds, request.slo.ttft_percentile)
        return out

    rates = rates_of(hedged=True)
    point = rates_of(hedged=False) if any(g.source == "napkin" for g in grids) else rates.copy()
    floor_streams = [_burst_slots(request, grid, cols, k, line, rates[k], point[k]) for k, grid in enumerate(grids)]
    cols["rate"] = list(rates)
    # The KV line at the operating point, now that each row's sized load is known; it is the most
    # fundamental check after the weights and the pool.
    # Every TP in one call, as the queueing search is.
    risks = kv_risk(np.concatenate(cols["frac"]), np.tile(concurrencies, len(grids)), np.concatenate(list(rates)),
                    np.concatenate([g.e2e_seconds for g in grids]), perf.workload.context_cv, line)
    cols["risk"] = list(risks.reshape(len(grids), concurrencies.size)) if grids else []
    for grid, verdict_col, short_col, frac, risk, tail in zip(grids, cols["v"], cols["short"], cols["frac"],
                                                             cols["risk"], cols["tail"], strict=True):
        allowed = UNMEASURED_KV_RISK if grid.source == "napkin" else KV_RISK
        over = ((risk > allowed) | (frac > 1.0)) & (verdict_col != Verdict.EXCEEDS_POOL) & (
            verdict_col != Verdict.WEIGHTS_DO_NOT_FIT)
        verdict_col[over] = Verdict.OVER_KV_HEADROOM
        short_col += np.where(over, np.maximum(tail / line - 1.0, 1e-3), 0.0) if line > 0 else 0.0
    cat = {k: np.concatenate(v) if v else np.zeros(0) for k, v in cols.items()}
    return CandidateTable(
        grids=tuple(grids), offsets=tuple(offsets), tp=cat["tp"].astype(np.int64), concurrency=cat["c"],
        per_stream_tps=cat["tps"], tps_tail=cat["tps_tail"], ttft_seconds=cat["ttft"], cost=cat["cost"],
        kv_fraction=cat["frac"], kv_tail=cat["tail"], kv_risk=cat["risk"], sustainable_rate=cat["rate"],
        point_rate=point.reshape(-1), headroom_line=line,
        floor_streams=np.concatenate(floor_streams) if floor_streams else np.zeros(0, dtype=np.int64),
        verdict=cat["v"].astype(np.int64), shortfall=cat["short"],
        min_stream_tps=request.slo.min_stream_tps, max_ttft_seconds=request.slo.max_ttft_seconds,
        ttft_percentile=request.slo.ttft_percentile,
    )
