"""The old pods a re-layout keeps serving while new ones load, and when a full pool gives some up.

A Deployment replaces pods one for one by count, so what a re-layout keeps is what its rollout can
reach (planner/rollout.py): the demand's pods of the running shape, never fewer than the
stabilisation window remembers, and on a pool the running shape fills, fewer only by what the
measured demand or the forecast no longer needs.
"""

from __future__ import annotations

import math

from infertune.api.observation import Observation
from infertune.planner.plan import Plan
from infertune.planner.rollout import Demand, Rollout, giving_way
from infertune.planner.running import past_cliff, slo_missed, staying_past_cliff
from infertune.planner.types import Guardrails, Layout, PlannerState, stabilization_window


def fills_pool(plan: Plan, applied: Layout) -> bool:
    """The pool has no room for one more pod of the running shape."""
    pool = plan.sizing.pool_gpus
    return pool is not None and applied.gpus + applied.tensor_parallel_size > pool


def giving_way_rollout(plan: Plan, applied: Layout, observation: Observation | None,
                       rails: Guardrails) -> Rollout | None:
    """The plan's own shape by a rollout that gives old pods up before their replacements serve, for a running
    shape that fills the pool and cannot stay: the engine reports it past the cliff, or it misses the SLO,
    and staying queues more of the requests arriving (at the lower of the rate now and the arrival level of
    the last few minutes, arrivals alone, a queue not counted) and waiting now than the rollout's dip does,
    over the re-layout horizon past its end. The model's word alone never costs serving pods. None without
    an arrival rate, without an arrival level for a miss, or when the shape can stay."""
    arriving = None if observation is None or not observation.available else observation.arrival_rate
    chosen, pool = plan.layout, plan.sizing.pool_gpus
    if chosen is None or pool is None or arriving is None or arriving <= 0 or not fills_pool(plan, applied):
        return None
    running_rps, chosen_rps = plan.replica_peak_rps(applied), plan.replica_peak_rps(chosen)
    if running_rps is None or chosen_rps is None:
        return None
    # What staying carries: past the cliff, the pods there what they complete now (their throughput
    # collapses), the others what they carry flat out; an outgrown shape, what all its pods carry flat
    # out, against a demand that held for the last few minutes (a burst's reading, or a few polls, are no
    # reason to give pods up).
    assert observation is not None  # `arriving` came from it
    if past_cliff(observation):
        staying = staying_past_cliff(applied, observation, running_rps)
    elif slo_missed(plan, observation) and plan.sizing.level_rps is not None:
        staying, arriving = applied.replicas * running_rps, min(arriving, plan.sizing.level_rps)
    else:
        return None
    demand = Demand(arriving, max(observation.waiting or 0.0, 0.0))
    return giving_way(applied, chosen, pool, rails.model_load_seconds, running_rps, chosen_rps, demand, staying,
                      rails.relayout_horizon_s)


def kept_at_least(plan: Plan, applied: Layout, kept: int | None, observation: Observation | None,
                   unsafe: bool) -> int | None:
    """The fewest old pods a rollout may keep when the pool cannot hold `kept` of them beside a new
    one. Only when the running shape fills the pool: it could never be left otherwise, while a shape
    with room to grow keeps every pod the demand wants (a displaced session re-sends its whole context
    to a cold pod, so a rollout that sheds pods costs more than their count).

    A running shape that has to go (unsafe, or missing the SLO) keeps what the demand measured now
    needs of it. A move for cost alone keeps what the forecast needs (the recent bursts, the trend
    and the season one model load ahead) and what the stabilisation window remembers, and sheds only
    the standing burst headroom, for the rollout's loads: a demand that may arrive during them is what
    the forecast covers, and a shape the forecast's own pods fill the pool with (a hint that sized it
    for another traffic) would otherwise never make room to be left."""
    measured = None if observation is None or not observation.available else observation.demand_rate
    if kept is None or measured is None or measured <= 0 or not fills_pool(plan, applied):
        return None
    if unsafe or slo_missed(plan, observation):
        now = plan.sized(applied, over_line=True, demand_rps=measured)
        return None if now is None else now.replicas
    return _kept_for_cost(plan, applied, kept)


def _kept_for_cost(plan: Plan, applied: Layout, kept: int) -> int | None:
    """The old pods a move for cost alone keeps on a full pool: what the forecast needs of the running
    shape, and `kept` (the window's memory, sized with the headroom) net of the headroom. None (every
    pod `kept`) until the forecast's bursts read their whole window: the first minutes' figures are a few
    polls, and a trend they miss outgrows the pods kept (random seed 110, docs/bench.md)."""
    forecast, with_headroom = plan.demand_rps, plan.sizing.demand_rps
    if forecast is None or with_headroom is None or forecast <= 0 or not plan.sizing.forecast_settled:
        return None
    wanted = plan.sized(applied, demand_rps=forecast)
    if wanted is None:
        return None
    return max(wanted.replicas, math.floor(kept * forecast / with_headroom))


def pods_kept(plan: Plan, state: PlannerState, applied: Layout, current: Layout | None, unsafe: bool,
          rails: Guardrails, now: float) -> int | None:
    """Old pods a re-layout keeps serving until new ones replace them: what the demand wants of the
    running shape, never below what the stabilisation window remembers. Every pod (None) when that
    count cannot be trusted: the model no longer sizes the shape, or there is no demand figure."""
    if unsafe or current is None or plan.sizing.demand_rps is None:
        return None
    span = stabilization_window(rails)
    remembered = [r for t, r in state.recent_recommendations if now - t <= span]
    if not state.recent_recommendations:
        remembered.append(applied.replicas)
    return max([current.replicas, *remembered])
