"""`plan()`: the cheapest layout that meets the SLO below the KV headroom line, sized for demand.

Pure and deterministic: the same request, observation and `now` always give the same plan.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from infertune.api.observation import Observation
from infertune.model.forecast import DemandOutlook
from infertune.model.perf import PerformanceModel
from infertune.model.workload import Workload
from infertune.planner.candidates import RUNNING_KV_RISK, Candidate, CandidateTable, Verdict, build_table
from infertune.planner.types import Layout, PlanRequest


@dataclass(frozen=True)
class Sizing:
    """What replica sizing used, so `Plan.sized()` can size any shape for the same demand."""

    demand_rps: float | None = None  # with the demand headroom; None: no demand figure
    replicas_min: int = 1
    replicas_max: int = 64
    pool_gpus: int | None = None
    # The arrival level now (the last few minutes' mean of the arrival rate, model/forecast.py), with no
    # burst, forecast or queue on top: what a decision that costs serving pods for a model load is judged
    # on. None: no history.
    level_rps: float | None = None
    # The forecast's burst figure reads its whole window (model/forecast.py): what shedding the standing
    # headroom for a rollout's loads rests on.
    forecast_settled: bool = False
    # The highest demand read within the last model load, with the same standing headroom as
    # `demand_rps` and never below it: what a move for cost must still save at (relayout_checks.py). None:
    # no outlook.
    recent_peak_rps: float | None = None


@dataclass(frozen=True)
class Plan:
    feasible: bool
    reason: str
    choice: Candidate | None
    layout: Layout | None
    table: CandidateTable
    workload: Workload
    demand_rps: float | None
    needed_replicas: int | None  # for the demand, before min/max and the pool clamp it
    capacity_shortfall_gpus: int
    closest: Candidate | None  # when infeasible: the candidate that misses by the least
    decided_at: float
    sizing: Sizing = Sizing()
    # GPUs the burst headroom adds to the chosen layout beyond what the demand itself needs.
    headroom_gpus: int = 0
    # Every feasible shape sized for the demand, best first (the choice leads): where the guardrails
    # look when the choice cannot be reached from what runs without dropping capacity.
    ranked: tuple[Layout, ...] = ()
    # The demand is a floor (a new replica has no rate yet): it may add replicas, never remove or re-shape.
    demand_is_floor: bool = False

    @property
    def needed_gpus(self) -> int:
        if self.choice is None or self.needed_replicas is None:
            return 0 if self.layout is None else self.layout.gpus
        return self.needed_replicas * self.choice.tp

    def candidates(self) -> list[Candidate]:
        return self.table.rows()

    def sized(self, shape: Layout, over_line: bool = False, demand_rps: float | None = None) -> Layout | None:
        """`shape`'s TP and concurrency with the replicas this demand needs. None when that shape
        cannot run safely at all (weights, pool, or, unless `over_line`, a mean working set over the
        KV headroom line). A new shape must keep the working set's tail under the line; a running one
        is torn down only when its mean crosses it, so a request shape drifting across the tail test
        does not restart every replica. A shape that only misses the SLO by the model's estimate is
        still sized, since the engine's own figures judge that. `demand_rps` sizes for another demand
        than the plan's."""
        table = self.table
        row = self._row(shape)
        if row is None:
            return None
        over = table.kv_risk[row] > RUNNING_KV_RISK or table.kv_fraction[row] > 1.0
        if Verdict(int(table.verdict[row])) in _UNSAFE or (over and not over_line):
            return None
        demand = self.sizing.demand_rps if demand_rps is None else demand_rps
        low, high, pool = self.sizing.replicas_min, self.sizing.replicas_max, self.sizing.pool_gpus
        if pool is not None:
            high = min(high, pool // shape.tensor_parallel_size)
        rate = self._replica_rps(row)
        needed = low if not demand or rate <= 0 else max(low, math.ceil(demand / rate))
        return Layout(shape.tensor_parallel_size, shape.max_num_seqs, max(1, min(needed, high)))

    def kv_risk_measured(self, shape: Layout, stream_tokens: float) -> float | None:
        """`shape`'s KV risk at its sized load with each running stream holding `stream_tokens` of KV (as
        the fleet measured it) instead of the request shape's context; the resident prefixes returning
        sessions keep cached stay the plan's. None for a shape the plan did not consider."""
        row = self._row(shape)
        workload = self.workload
        planned = workload.context_tokens + workload.resident_prefix_tokens
        if row is None or planned <= 0:
            return None
        scale = (stream_tokens + workload.resident_prefix_tokens) / planned
        return self.table.kv_risk_at(row, scale, workload.context_cv)

    def replica_rps(self, shape: Layout) -> float | None:
        """The request rate one replica of `shape` carries (what `sized` divides the demand by); None
        for a shape the plan did not consider."""
        row = self._row(shape)
        return None if row is None else self._replica_rps(row)

    def replica_peak_rps(self, shape: Layout) -> float | None:
        """The request rate one replica of `shape` serves with every slot busy (what drains a queue,
        above the rate replicas are sized by); None for a shape the plan did not consider."""
        row = self._row(shape)
        return None if row is None else float(np.concatenate([g.request_rate for g in self.table.grids])[row])

    def pass_source(self, shape: Layout) -> str | None:
        """What `shape`'s per-pass time rests on (perf.py: "fit", "fit+napkin", "calibrated-napkin" or
        "napkin", the last with nothing measured at any TP); None for a shape the plan did not consider."""
        row = self._row(shape)
        return None if row is None else self.table.row(row).pass_source

    def _row(self, shape: Layout) -> int | None:
        """`shape`'s row of the candidate table (TP and concurrency); None for a shape not considered."""
        hit = np.flatnonzero((self.table.tp == shape.tensor_parallel_size)
                             & (self.table.concurrency == shape.max_num_seqs))
        return None if hit.size == 0 else int(hit[0])

    def _replica_rps(self, row: int) -> float:
        return float(_rates(self.table, np.array([row]))[0])


_UNSAFE = (Verdict.WEIGHTS_DO_NOT_FIT, Verdict.EXCEEDS_POOL)


def effective_workload(base: Workload, observation: Observation | None) -> Workload:
    """The hint until metrics exist; then the observed request shape, keeping the hint's ratios
    for what the metrics cannot see (the TTFT-driving median and resident prefixes)."""
    if observation is None or not observation.available:
        return base
    prompt, generated = observation.mean_prompt_tokens, observation.mean_generated_tokens
    if prompt is None or generated is None or prompt <= 0 or generated <= 0:
        return base
    cached = observation.mean_cached_tokens
    if cached is None:
        cached = prompt * base.cached_fraction
    cached = min(max(cached, 0.0), prompt)
    fresh = prompt - cached
    return replace(base, fresh_tokens=fresh, cached_tokens=cached, output_tokens=generated,
                   ttft_fresh_tokens=base.ttft_fresh_for(fresh))


def observed_demand(request: PlanRequest, observation: Observation | None,
                    outlook: DemandOutlook | None = None) -> float | None:
    """Requests/s to size for. The hint only until metrics exist: once they do, a missing rate is
    unknown (the guardrails hold), never the hint. With an outlook (model/forecast.py), the demand
    one model load ahead: the largest of the current rate, the recent bursts, the trend and the season.
    While a replica that just became ready has no rate yet, the current rate is the rated replicas' (plus
    the queue), a floor of the demand."""
    if observation is None or not observation.available:
        return request.demand_rps
    current = observation.demand_read
    if current is None:
        return None
    return max(current, outlook.sized) if outlook is not None else current


def _replica_bounds(request: PlanRequest, tp: np.ndarray) -> np.ndarray:
    upper = np.full(tp.shape, request.replicas_max, dtype=np.int64)
    if request.pool_gpus is not None:
        upper = np.minimum(upper, request.pool_gpus // tp)
    return upper


def plan(request: PlanRequest, observation: Observation | None, now: float,
         outlook: DemandOutlook | None = None) -> Plan:
    workload = effective_workload(request.workload, observation)
    perf = PerformanceModel(
        model=request.model, gpu=request.gpu, workload=workload, napkin=request.napkin,
        capacity=request.capacity, fits=request.fits, measured_points=request.measured_points,
        observed_capacity_tokens=request.observed_capacity_tokens, price_per_gpu_hour=request.price_per_gpu_hour,
    )
    table = build_table(request, perf)
    demand = observed_demand(request, observation, outlook)
    floor = demand is not None and observation is not None and observation.demand_floor is not None
    feasible = np.flatnonzero(table.verdict == Verdict.FEASIBLE)
    if feasible.size == 0:
        return replace(_infeasible(request, table, workload, demand, now), demand_is_floor=floor)

    tp = table.tp[feasible]
    rate = _rates(table, feasible)
    upper = _replica_bounds(request, tp)
    spared = _spared(demand, request.demand_headroom, outlook)
    if demand is not None and spared is not None:
        needed = _replicas_for(spared, rate)
        bare = np.maximum(_replicas_for(demand, rate), request.replicas_min)
        # Shapes are ranked on the pass's point; the count above carries any hedge on it (candidates.py).
        ranked_needed = _replicas_for(spared, _rates(table, feasible, point=True))
    else:
        needed = np.zeros(tp.shape, dtype=np.int64)
        bare = np.full(tp.shape, request.replicas_min, dtype=np.int64)
        ranked_needed = needed
    needed = np.maximum(needed, request.replicas_min)
    serves = needed <= upper
    replicas = np.minimum(needed, np.maximum(upper, 0))
    fleet = np.minimum(np.maximum(ranked_needed, request.replicas_min), np.maximum(upper, 0)) * tp
    cost = table.cost[feasible]
    tps = table.per_stream_tps[feasible]
    served = replicas * rate
    # Rank: can serve the demand, then fewest GPUs, then $/token, then faster streams, then smaller TP.
    keys = (tp, -tps, cost, fleet, ~serves) if serves.any() else (tp, -tps, cost, -served)
    order = np.lexsort(keys)
    best = int(order[0])
    row = int(feasible[best])
    choice = table.row(row)
    chosen_replicas = max(int(replicas[best]), 0)
    headroom_gpus = max(chosen_replicas - min(int(bare[best]), chosen_replicas), 0) * choice.tp
    shortfall = max(int(needed[best]) - chosen_replicas, 0) * choice.tp
    layout = Layout(choice.tp, choice.max_num_seqs, chosen_replicas) if chosen_replicas > 0 else None
    reason = _why(choice, chosen_replicas, demand, shortfall, int(feasible.size), len(table), floor)
    ranked = tuple(Layout(int(tp[i]), int(table.concurrency[feasible[i]]), int(replicas[i]))
                   for i in order if replicas[i] > 0)
    return Plan(
        feasible=layout is not None, reason=reason, choice=choice, layout=layout, table=table, workload=workload,
        demand_rps=demand, needed_replicas=int(needed[best]), capacity_shortfall_gpus=shortfall,
        closest=None, decided_at=now, sizing=_sizing(request, demand, outlook), ranked=ranked,
        headroom_gpus=headroom_gpus, demand_is_floor=floor,
    )


# More replicas than any pool holds (spec.hardware.poolGpus is at most 131,072 GPUs): a count past it only
# says "short", and an uncapped one could pass int64 and wrap to a small count.
_REPLICAS_CAP = 2**40


def _replicas_for(demand: float, rate: np.ndarray) -> np.ndarray:
    """Replicas of each row that carry `demand` at its per-replica `rate`."""
    with np.errstate(divide="ignore", invalid="ignore"):
        count = np.where(rate > 0, np.ceil(demand / rate), _REPLICAS_CAP)
    out: np.ndarray = np.nan_to_num(np.minimum(count, _REPLICAS_CAP), nan=_REPLICAS_CAP).astype(np.int64)
    return out


def _spared(demand: float | None, headroom: float, outlook: DemandOutlook | None) -> float | None:
    """The demand with the standing headroom: kept above the rate now and the level the trend and the season
    forecast, while the recent bursts' quantile is a spare of its own and gets none on top. `demand` is the
    largest of the outlook's figures (`observed_demand`), so the bursts' quantile is in it already."""
    if demand is None or demand <= 0:
        return None
    if outlook is None or outlook.burst is None:
        return demand * (1.0 + headroom)
    level = max(v for v in (outlook.current, outlook.trend, outlook.seasonal) if v is not None)
    return max(level * (1.0 + headroom), demand)


def _sizing(request: PlanRequest, demand: float | None, outlook: DemandOutlook | None) -> Sizing:
    wanted = _spared(demand, request.demand_headroom, outlook)
    level = None if outlook is None else outlook.arrival_level
    settled = outlook is not None and outlook.full_window and outlook.burst is not None
    peak = None
    if wanted is not None and outlook is not None and outlook.recent_peak is not None:
        peak = max(outlook.recent_peak * (1.0 + request.demand_headroom), wanted)
    return Sizing(wanted, request.replicas_min, request.replicas_max, request.pool_gpus, level, settled, peak)


def _rates(table: CandidateTable, rows: np.ndarray, point: bool = False) -> np.ndarray:
    """What one replica of each row sustains with random arrivals: the rate replicas are sized by (`point`:
    on the pass's point, what shapes are ranked by). A row whose TTFT misses the SLO even unloaded has no
    such rate; a running shape in that state is still sized (see `sized`), by its flat-out rate, rather
    than by a zero that asks for every GPU."""
    flat_out = np.concatenate([g.request_rate for g in table.grids])[rows]
    sustainable = (table.point_rate if point else table.sustainable_rate)[rows]
    rates: np.ndarray = np.where(sustainable > 0, sustainable, flat_out)
    return rates


def _why(choice: Candidate, replicas: int, demand: float | None, shortfall: int, feasible: int, total: int,
         floor: bool = False) -> str:
    at_least = "at least " if floor else ""
    demand_text = (f"{replicas} replica(s) for {at_least}{demand:.2f} req/s" if demand is not None
                   else f"{replicas} replica(s) (no demand figure yet)")
    text = (f"TP{choice.tp} max-num-seqs {choice.max_num_seqs}: ${choice.cost_per_million_tokens:.3f}/M tokens, "
            f"{choice.per_stream_tps:.1f} tok/s per stream, TTFT {choice.ttft_seconds:.2f} s, "
            f"KV working set {choice.kv_working_set_fraction:.0%} ({choice.region.value}); "
            f"cheapest of {feasible} feasible of {total} candidates; {demand_text}")
    if shortfall:
        text += f"; the pool is {shortfall} GPU(s) short of the demand"
    return text


def _infeasible(request: PlanRequest, table: CandidateTable, workload: Workload, demand: float | None,
                now: float) -> Plan:
    closest = None
    if len(table):
        i = int(np.lexsort((table.tp, table.shortfall))[0])
        closest = table.row(i)
    reason = "NoFeasibleLayout: no candidate meets the SLO below the KV headroom line"
    if closest is not None and math.isfinite(float(table.shortfall.min())):
        reason += (f"; closest is TP{closest.tp} max-num-seqs {closest.max_num_seqs}, which misses by "
                   f"{closest.reason}")
    elif closest is not None:
        reason += f"; {closest.reason}"
    return Plan(
        feasible=False, reason=reason, choice=None, layout=None, table=table, workload=workload,
        demand_rps=demand, needed_replicas=None, capacity_shortfall_gpus=0, closest=closest, decided_at=now,
        sizing=_sizing(request, demand, None),
    )
