"""`decide()`: the guardrail chain between a plan and an action.

Each check is a small function returning a `Check`: passed or not, with a reason. The chain
stops at the first check that holds the change, so the decision's reason is always the one
check that decided it, and every check that ran is kept for `infertune explain`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

from infertune.api.observation import Observation
from infertune.planner.plan import Plan
from infertune.planner.types import Action, Guardrails, Layout, PlannerState


@dataclass(frozen=True)
class Check:
    name: str
    passed: bool
    reason: str
    message: str = ""


@dataclass(frozen=True)
class Decision:
    action: Action
    target: Layout | None  # what to apply; None keeps what runs
    recommended: Layout | None  # what the plan wanted, before the guardrails
    reason: str
    message: str
    checks: tuple[Check, ...]
    decided_at: float


@dataclass(frozen=True)
class _Context:
    plan: Plan
    state: PlannerState
    observation: Observation | None
    rails: Guardrails
    now: float
    proposed: Layout | None
    applied: Layout | None
    # The running layout itself would cross the KV line or miss the SLO: safety overrides thrift.
    applied_unsafe: bool


def _ok(name: str, reason: str = "Passed", message: str = "") -> Check:
    return Check(name, True, reason, message)


def _hold(name: str, reason: str, message: str) -> Check:
    return Check(name, False, reason, message)


def _since(then: float | None, now: float) -> float:
    return math.inf if then is None else now - then


def check_metrics_fresh(ctx: _Context) -> Check:
    obs = ctx.observation
    if obs is None:
        return _hold("metrics", "MetricsUnavailable", "no observation yet")
    if not obs.available:
        return _hold("metrics", obs.fault.value, obs.message or "the metrics source is not trusted")
    age = ctx.now - obs.sample_time
    if age > ctx.rails.stale_after_s:
        limit = ctx.rails.stale_after_s
        return _hold("metrics", "MetricsStale", f"newest sample is {age:.0f} s old (limit {limit:.0f} s)")
    return _ok("metrics", "MetricsFresh")


def check_plan_feasible(ctx: _Context) -> Check:
    if ctx.proposed is None:
        return _hold("feasible", "NoFeasibleLayout", ctx.plan.reason)
    return _ok("feasible", "PlanFeasible")


def check_relayout_cooldown(ctx: _Context) -> Check:
    if not _is_relayout(ctx) or ctx.applied_unsafe:
        return _ok("relayout-cooldown")
    waited = _since(ctx.state.last_relayout_at, ctx.now)
    if waited < ctx.rails.relayout_cooldown_s:
        return _hold("relayout-cooldown", "RelayoutCooldown",
                     f"last re-layout {waited:.0f} s ago (cooldown {ctx.rails.relayout_cooldown_s:.0f} s)")
    return _ok("relayout-cooldown")


def check_relayout_pays_back(ctx: _Context) -> Check:
    """A re-layout restarts every replica: only worth it when the saving over the horizon beats
    the GPU time burnt loading the model again."""
    if not _is_relayout(ctx) or ctx.applied is None or ctx.applied_unsafe:
        return _ok("relayout-payback")
    assert ctx.proposed is not None
    price_per_gpu_second = _price(ctx) / 3600.0
    saving = (ctx.applied.gpus - ctx.proposed.gpus) * price_per_gpu_second * ctx.rails.relayout_horizon_s
    restart = ctx.proposed.gpus * price_per_gpu_second * ctx.rails.model_load_seconds
    if saving <= restart:
        return _hold("relayout-payback", "RelayoutNotWorthIt",
                     f"saves ${saving:.2f} over {ctx.rails.relayout_horizon_s:.0f} s, restart costs ${restart:.2f}")
    return _ok("relayout-payback", "RelayoutPaysBack", f"saves ${saving:.2f}, restart costs ${restart:.2f}")


def check_hysteresis(ctx: _Context) -> Check:
    if _is_relayout(ctx) or ctx.applied is None or ctx.proposed is None:
        return _ok("hysteresis")
    delta = ctx.proposed.replicas - ctx.applied.replicas
    if delta == 0:
        return _hold("hysteresis", "UpToDate", "the running layout is the plan")
    if abs(delta) < ctx.rails.hysteresis * ctx.applied.replicas and not ctx.applied_unsafe:
        return _hold("hysteresis", "WithinHysteresis",
                     f"{delta:+d} replica(s) is within {ctx.rails.hysteresis:.0%} of {ctx.applied.replicas}")
    return _ok("hysteresis")


def check_scale_cooldowns(ctx: _Context) -> Check:
    if _is_relayout(ctx) or ctx.applied is None or ctx.proposed is None:
        return _ok("scale-cooldown")
    if ctx.proposed.replicas > ctx.applied.replicas:
        waited = _since(ctx.state.last_scale_up_at, ctx.now)
        if waited < ctx.rails.scale_up_cooldown_s and not ctx.applied_unsafe:
            return _hold("scale-cooldown", "ScaleUpCooldown",
                         f"last scale-up {waited:.0f} s ago (cooldown {ctx.rails.scale_up_cooldown_s:.0f} s)")
        return _ok("scale-cooldown")
    waited = min(_since(ctx.state.last_scale_down_at, ctx.now), _since(ctx.state.last_scale_up_at, ctx.now))
    if waited < ctx.rails.scale_down_cooldown_s:
        return _hold("scale-cooldown", "ScaleDownCooldown",
                     f"last scale change {waited:.0f} s ago (cooldown {ctx.rails.scale_down_cooldown_s:.0f} s)")
    return _ok("scale-cooldown")


def check_scale_down_stabilised(ctx: _Context) -> Check:
    """HPA's rule: scale down only to the highest count recommended within the window."""
    if _is_relayout(ctx) or ctx.applied is None or ctx.proposed is None:
        return _ok("stabilisation")
    if ctx.proposed.replicas >= ctx.applied.replicas:
        return _ok("stabilisation")
    window = [r for t, r in ctx.state.recent_recommendations if ctx.now - t <= ctx.rails.scale_down_stabilization_s]
    ceiling = max([*window, ctx.proposed.replicas])
    if ceiling >= ctx.applied.replicas:
        return _hold("stabilisation", "ScaleDownStabilizing",
                     f"{ceiling} replica(s) recommended within the last {ctx.rails.scale_down_stabilization_s:.0f} s")
    return _ok("stabilisation")


CHECKS: tuple[Callable[[_Context], Check], ...] = (
    check_metrics_fresh,
    check_plan_feasible,
    check_relayout_cooldown,
    check_relayout_pays_back,
    check_hysteresis,
    check_scale_down_stabilised,
    check_scale_cooldowns,
)


def _is_relayout(ctx: _Context) -> bool:
    return ctx.applied is not None and ctx.proposed is not None and not ctx.applied.same_shape(ctx.proposed)


def _price(ctx: _Context) -> float:
    choice = ctx.plan.choice
    if choice is None or choice.processed_tps <= 0:
        return 0.0
    # $/M x tokens/s x 3600 / 1e6 / GPUs recovers the price per GPU-hour the plan used.
    return choice.cost_per_million_tokens * choice.processed_tps * 3600.0 / 1e6 / choice.tp


def _applied_unsafe(plan: Plan, applied: Layout | None) -> bool:
    if applied is None:
        return False
    for tp, grid in zip((g.tp for g in plan.table.grids), plan.table.grids, strict=True):
        if tp == applied.tensor_parallel_size:
            return applied.max_num_seqs > grid.cliff_concurrency * plan.table.headroom_line
    return False


def _bounded_step(applied: Layout, proposed: Layout, max_step: int) -> Layout:
    delta = max(-max_step, min(max_step, proposed.replicas - applied.replicas))
    return replace(proposed, replicas=applied.replicas + delta)


def decide(plan: Plan, state: PlannerState, observation: Observation | None, guardrails: Guardrails,
           now: float) -> Decision:
    applied = state.applied
    ctx = _Context(plan, state, observation, guardrails, now, plan.layout, applied, _applied_unsafe(plan, applied))
    checks: list[Check] = []
    for check in CHECKS:
        result = check(ctx)
        checks.append(result)
        if not result.passed:
            action = Action.NONE if result.reason in ("UpToDate", "WithinHysteresis") else Action.HOLD
            return Decision(action, None, plan.layout, result.reason, result.message, tuple(checks), now)
    proposed = plan.layout
    assert proposed is not None
    if applied is None:
        return Decision(Action.RELAYOUT, proposed, proposed, "InitialLayout", plan.reason, tuple(checks), now)
    if not applied.same_shape(proposed):
        reason = "CurrentLayoutUnsafe" if ctx.applied_unsafe else "CheaperLayout"
        return Decision(Action.RELAYOUT, proposed, proposed, reason, plan.reason, tuple(checks), now)
    target = _bounded_step(applied, proposed, guardrails.max_step_replicas)
    limited = target.replicas != proposed.replicas
    if target.replicas > applied.replicas:
        action, reason = Action.SCALE_UP, "DemandRising"
    else:
        action, reason = Action.SCALE_DOWN, "DemandFalling"
    message = f"{applied.replicas} -> {target.replicas} replica(s)"
    if limited:
        message += f" (max step {guardrails.max_step_replicas}; the plan wants {proposed.replicas})"
    return Decision(action, target, proposed, reason, message, tuple(checks), now)


def next_state(state: PlannerState, decision: Decision, rails: Guardrails, applied: bool = True) -> PlannerState:
    """The state to persist after a decision; `applied=False` (Recommend mode) records only the
    recommendation, so the guardrails keep judging what actually runs."""
    recent = tuple((t, r) for t, r in state.recent_recommendations
                   if decision.decided_at - t <= rails.scale_down_stabilization_s)
    if decision.recommended is not None:
        recent += ((decision.decided_at, decision.recommended.replicas),)
    new = replace(state, recent_recommendations=recent)
    if not applied or decision.target is None:
        return new
    now = decision.decided_at
    if decision.action is Action.RELAYOUT:
        new = replace(new, last_relayout_at=now)
    elif decision.action is Action.SCALE_UP:
        new = replace(new, last_scale_up_at=now)
    elif decision.action is Action.SCALE_DOWN:
        new = replace(new, last_scale_down_at=now)
    return replace(new, applied=decision.target)
