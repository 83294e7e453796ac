"""What every guardrail check reads and returns: the context of one decision, the `Check` each returns,
and the small facts several checks share (is it a re-layout, how long since, are a scale-up's pods
still loading). The checks themselves are in `planner/guardrails.py` (scaling and the chain) and
`planner/relayout_checks.py` (what a re-layout must wait for).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from infertune.api.observation import MetricsFault, Observation
from infertune.planner.plan import Plan
from infertune.planner.rollout import Rollout
from infertune.planner.types import DecisionReason, Guardrails, Layout, PlannerState

# A metrics fault holds with its own name (SourceTimeout, PartialReplicas...), every other hold with the
# guardrail's.
Reason = DecisionReason | MetricsFault


@dataclass(frozen=True)
class Check:
    name: str
    passed: bool
    reason: Reason
    message: str = ""


@dataclass(frozen=True)
class CheckContext:
    plan: Plan
    state: PlannerState
    observation: Observation | None
    rails: Guardrails
    now: float
    proposed: Layout | None
    applied: Layout | None
    # The running shape itself no longer meets the SLO below the KV line (by the model), or the
    # engine reports it past the cliff or decoding below the floor: safety overrides thrift.
    applied_unsafe: bool
    # The running shape with the replicas this demand needs (None when unsafe): the baseline a
    # re-layout must beat, and what runs instead when a re-layout is held.
    current: Layout | None = None
    # Observed TTFT or per-stream speed is outside the SLO: a scale-up skips hysteresis and cooldown.
    slo_missed: bool = False
    # For a re-layout: how to roll into `proposed` keeping the demand served (None: no way within the pool).
    rollout: Rollout | None = None
    # By the model, the running shape's working set crosses the KV headroom line.
    over_line: bool = False


def ok(name: str, reason: Reason = DecisionReason.PASSED, message: str = "") -> Check:
    return Check(name, True, reason, message)


def hold(name: str, reason: Reason, message: str) -> Check:
    return Check(name, False, reason, message)


def since(then: float | None, now: float) -> float:
    # A time after now (a clock stepped back, a status edited by hand) counts as now: a negative wait would
    # hold a cooldown for as long as the clock lags it.
    return math.inf if then is None else max(now - then, 0.0)


def is_relayout(ctx: CheckContext) -> bool:
    return ctx.applied is not None and ctx.proposed is not None and not ctx.applied.same_shape(ctx.proposed)


def price_per_gpu_hour(ctx: CheckContext) -> float:
    choice = ctx.plan.choice
    if choice is None or choice.processed_tps <= 0:
        return 0.0
    # $/M x tokens/s x 3600 / 1e6 / GPUs recovers the price per GPU-hour the plan used.
    return choice.cost_per_million_tokens * choice.processed_tps * 3600.0 / 1e6 / choice.tp


def scale_up_loading(state: PlannerState, rails: Guardrails, now: float) -> bool:
    """Pods of the last scale-up still load: fewer pods are ready than the running shape's count, outside
    a rollout, within two model loads of the scale-up (a pod unready for longer is not coming soon). They
    serve within a load, and a rollout started now would replace them first (a Deployment removes
    unready old pods before ready ones) with pods that serve a load later."""
    applied, ready = state.applied, state.ready_replicas
    return (not state.rolling_out and applied is not None and ready is not None and ready < applied.replicas
            and since(state.last_scale_up_at, now) < 2 * rails.model_load_seconds)
