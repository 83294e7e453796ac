"""`decide()`: the guardrail chain between a plan and an action.

Each check is a small function returning a `Check`: passed or not, with a reason. The chain
stops at the first check that holds the change, so the decision's reason is always the one
check that decided it, and every check that ran is kept for `infertune explain`. The checks on
metrics and scaling are here; what a re-layout must wait for is in `planner/relayout_checks.py`,
and what every check reads (`CheckContext`) in `planner/checks.py`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

from infertune.api.observation import Observation
from infertune.planner.checks import (
    Check,
    CheckContext,
    Reason,
    hold,
    is_relayout,
    ok,
    scale_up_loading,
    since,
)
from infertune.planner.keep import fills_pool, giving_way_rollout, kept_at_least, pods_kept
from infertune.planner.plan import Plan
from infertune.planner.relayout_checks import (
    check_pass_time_measured,
    check_relayout_cooldown,
    check_relayout_keeps_capacity,
    check_relayout_pays_back,
    check_relayout_settled,
    check_rollout_finished,
    check_scale_up_landed,
    check_working_set_measured,
    rollout_room,
    rollout_surge,
)
from infertune.planner.rollout import Rollout, reachable
from infertune.planner.running import (
    applied_unsafe,
    measured_hold_note,
    measured_working_set_holds,
    past_cliff,
    slo_missed,
    working_set_level,
)
from infertune.planner.types import (
    Action,
    DecisionReason,
    Guardrails,
    Layout,
    LeftUnsafe,
    PlannerState,
    stabilization_window,
    window_maxima,
)

__all__ = ["Check", "Decision", "Reason", "decide", "next_state"]


@dataclass(frozen=True)
class Decision:
    action: Action
    target: Layout | None  # what to apply; None keeps what runs
    recommended: Layout | None  # what the plan wanted, before the guardrails
    reason: Reason
    message: str
    checks: tuple[Check, ...]
    decided_at: float
    # A re-layout's rollout: its surge (what the workload renders), waves, duration and GPU-time.
    rollout: Rollout | None = None
    # What the demand wants of the running shape (with its burst headroom): what the scale-down
    # stabilisation window remembers. None when the model no longer sizes that shape.
    running_wanted: int | None = None
    # For a re-layout away from an unsafe shape: the working set's level then (planner/running.py
    # `working_set_level`), None when unmeasured.
    unsafe_at_tokens: float | None = None
    # For a scale-up mid-rollout: the surge the workload renders anew, below the rollout's own so the new
    # count fits the pool beside it (relayout_checks.py `rollout_room`); None keeps the strategy as it is.
    max_surge: int | None = None


def check_metrics_fresh(ctx: CheckContext) -> Check:
    obs = ctx.observation
    if obs is None:
        return hold("metrics", DecisionReason.METRICS_UNAVAILABLE, "no observation yet")
    if not obs.available:
        return hold("metrics", obs.fault, obs.message or "the metrics source is not trusted")
    age = ctx.now - obs.sample_time
    if age > ctx.rails.stale_after_s:
        limit = ctx.rails.stale_after_s
        return hold("metrics", DecisionReason.METRICS_STALE,
                    f"newest sample is {age:.0f} s old (limit {limit:.0f} s)")
    if obs.arrival_rate is None:
        if _adds_replicas_on_floor(ctx):
            return ok("metrics", DecisionReason.METRICS_FRESH,
                      f"the demand is at least {obs.demand_floor:.2f} req/s (a new replica has no rate yet)")
        # A replica that just became ready has no rate yet: the demand is unknown, not the hint, and its
        # floor (the rated replicas') proves only that more are needed.
        return hold("metrics", DecisionReason.NO_DEMAND_FIGURE,
                    "no request rate yet (a new replica needs a second scrape)")
    return ok("metrics", DecisionReason.METRICS_FRESH)


def _adds_replicas_on_floor(ctx: CheckContext) -> bool:
    """A scale-up of the running shape that the demand's floor alone asks for: the demand is at least
    what sized it, so waiting a scrape for the new replica's rate only delays pods a rising load needs."""
    applied, proposed = ctx.applied, ctx.proposed
    return (ctx.plan.demand_is_floor and applied is not None and proposed is not None
            and applied.same_shape(proposed) and proposed.replicas > applied.replicas)


def check_plan_feasible(ctx: CheckContext) -> Check:
    if ctx.proposed is None:
        return hold("feasible", DecisionReason.NO_FEASIBLE_LAYOUT, ctx.plan.reason)
    return ok("feasible", DecisionReason.PLAN_FEASIBLE)


def check_hysteresis(ctx: CheckContext) -> Check:
    if is_relayout(ctx) or ctx.applied is None or ctx.proposed is None:
        return ok("hysteresis")
    delta = ctx.proposed.replicas - ctx.applied.replicas
    if delta == 0:
        return hold("hysteresis", DecisionReason.UP_TO_DATE, "the running layout is the plan")
    urgent = ctx.applied_unsafe or (ctx.slo_missed and delta > 0)
    if abs(delta) < ctx.rails.hysteresis * ctx.applied.replicas and not urgent:
        return hold("hysteresis", DecisionReason.WITHIN_HYSTERESIS,
                    f"{delta:+d} replica(s) is within {ctx.rails.hysteresis:.0%} of {ctx.applied.replicas}")
    return ok("hysteresis")


def check_scale_cooldowns(ctx: CheckContext) -> Check:
    if is_relayout(ctx) or ctx.applied is None or ctx.proposed is None:
        return ok("scale-cooldown")
    if ctx.proposed.replicas > ctx.applied.replicas:
        waited = since(ctx.state.last_scale_up_at, ctx.now)
        if waited < ctx.rails.scale_up_cooldown_s and not (ctx.applied_unsafe or ctx.slo_missed):
            return hold("scale-cooldown", DecisionReason.SCALE_UP_COOLDOWN,
                        f"last scale-up {waited:.0f} s ago (cooldown {ctx.rails.scale_up_cooldown_s:.0f} s)")
        return ok("scale-cooldown")
    waited = min(since(ctx.state.last_scale_down_at, ctx.now), since(ctx.state.last_scale_up_at, ctx.now))
    if waited < ctx.rails.scale_down_cooldown_s:
        return hold("scale-cooldown", DecisionReason.SCALE_DOWN_COOLDOWN,
                    f"last scale change {waited:.0f} s ago (cooldown {ctx.rails.scale_down_cooldown_s:.0f} s)")
    return ok("scale-cooldown")


def check_scale_down_stabilised(ctx: CheckContext) -> Check:
    """HPA's rule: scale down only to the highest count recommended within the window."""
    if is_relayout(ctx) or ctx.applied is None or ctx.proposed is None:
        return ok("stabilisation")
    if ctx.proposed.replicas >= ctx.applied.replicas:
        return ok("stabilisation")
    ceiling = _stabilisation_ceiling(ctx, ctx.proposed.replicas)
    if ceiling >= ctx.applied.replicas:
        return hold("stabilisation", DecisionReason.SCALE_DOWN_STABILIZING,
                    f"{ceiling} replica(s) recommended within the last {stabilization_window(ctx.rails):.0f} s")
    return ok("stabilisation")


def _stabilisation_ceiling(ctx: CheckContext, proposed_replicas: int) -> int:
    """The highest count of the running shape recommended within the stabilisation window, this one
    included. With no history yet (a first visit, or status lost) what runs counts as recommended now,
    as the HPA seeds its window: nothing is released before a whole window of demand figures exists."""
    span = stabilization_window(ctx.rails)
    recent = [r for t, r in ctx.state.recent_recommendations if ctx.now - t <= span]
    if not ctx.state.recent_recommendations and ctx.applied is not None:
        recent.append(ctx.applied.replicas)
    return max([proposed_replicas, *recent])


CHECKS: tuple[Callable[[CheckContext], Check], ...] = (
    check_metrics_fresh,
    check_plan_feasible,
    check_relayout_settled,
    check_relayout_cooldown,
    check_scale_up_landed,
    check_working_set_measured,
    check_relayout_pays_back,
    check_relayout_keeps_capacity,
    check_pass_time_measured,
    check_rollout_finished,
    check_hysteresis,
    check_scale_down_stabilised,
    check_scale_cooldowns,
)


def _stabilised(ctx: CheckContext) -> CheckContext:
    """A scale-down goes only as far as the highest count recommended within the window (HPA)."""
    proposed, applied = ctx.proposed, ctx.applied
    if proposed is None or applied is None or not applied.same_shape(proposed) or proposed.replicas >= applied.replicas:
        return ctx
    ceiling = _stabilisation_ceiling(ctx, proposed.replicas)
    return replace(ctx, proposed=replace(proposed, replicas=min(ceiling, applied.replicas)))


def _rolled(ctx: CheckContext, proposed: Layout) -> tuple[Layout, str]:
    """The re-layout to apply (at the count its rollout needs) and what to say of it."""
    message = ctx.plan.reason
    chosen = ctx.plan.layout
    if chosen is not None and not chosen.same_shape(proposed):
        message = (f"TP{proposed.tensor_parallel_size} max-num-seqs {proposed.max_num_seqs} x{proposed.replicas}, "
                   f"the best shape the pool can roll into while serving the demand (the plan's "
                   f"TP{chosen.tensor_parallel_size} max-num-seqs {chosen.max_num_seqs} cannot); {message}")
    rollout = ctx.rollout
    if rollout is None:
        return proposed, message
    message = f"{message}; {rollout.describe()}"
    if rollout.target.replicas < proposed.replicas:
        return rollout.target, (f"{message}; applied at {rollout.target.replicas} replica(s): the pool holds no more "
                                f"of them beside the old pods, the rest follow once the rollout is over")
    if rollout.target.replicas == proposed.replicas:
        return proposed, message
    return rollout.target, (f"{message}; applied at {rollout.target.replicas} replica(s), so the old pods the demand "
                            f"needs serve until new ones are ready (the extra ones go once the rollout is over)")


def _max_step(applied: Layout, proposed: Layout, rails: Guardrails) -> int:
    """The most replicas one decision moves towards `proposed`: a scale-up the step, or the running count's
    share when that is more; a scale-down the step."""
    if proposed.replicas > applied.replicas:
        return max(rails.max_step_replicas, math.ceil(applied.replicas * rails.scale_up_share))
    return rails.max_step_replicas


def _bounded_step(applied: Layout, proposed: Layout, rails: Guardrails) -> Layout:
    step = _max_step(applied, proposed, rails)
    delta = max(-step, min(step, proposed.replicas - applied.replicas))
    return replace(proposed, replicas=applied.replicas + delta)


def _chain(ctx: CheckContext, checks: list[Check]) -> Decision | None:
    """Runs the checks; the holding Decision, or None when every check passed."""
    for check in CHECKS:
        result = check(ctx)
        checks.append(result)
        if not result.passed:
            quiet = result.reason in (DecisionReason.UP_TO_DATE, DecisionReason.WITHIN_HYSTERESIS)
            action = Action.NONE if quiet else Action.HOLD
            return Decision(action, None, ctx.plan.layout, result.reason, result.message, tuple(checks), ctx.now)
    return None


def _act(ctx: CheckContext, checks: list[Check]) -> Decision:
    wanted = ctx.proposed  # what the demand asks for: the stabilisation window remembers this
    ctx = _stabilised(ctx)
    proposed, applied, rails = ctx.proposed, ctx.applied, ctx.rails
    assert proposed is not None and wanted is not None
    if applied is None:
        return Decision(Action.RELAYOUT, proposed, proposed, DecisionReason.INITIAL_LAYOUT, ctx.plan.reason,
                        tuple(checks), ctx.now)
    if not applied.same_shape(proposed):
        target, message = _rolled(ctx, proposed)
        if not ctx.applied_unsafe:
            return Decision(Action.RELAYOUT, target, proposed, DecisionReason.CHEAPER_LAYOUT, message, tuple(checks),
                            ctx.now, ctx.rollout)
        return Decision(Action.RELAYOUT, target, proposed, DecisionReason.CURRENT_LAYOUT_UNSAFE, message,
                        tuple(checks), ctx.now, ctx.rollout, unsafe_at_tokens=working_set_level(ctx.observation))
    target = _bounded_step(applied, proposed, rails)
    surge = None
    if ctx.state.rolling_out and target.replicas > applied.replicas:
        target = replace(target, replicas=min(target.replicas, rollout_room(ctx, target)))
        lowered = rollout_surge(ctx, target)
        surge = lowered if lowered < ctx.state.rollout_surge else None
    limited = target.replicas != proposed.replicas
    if target.replicas > applied.replicas:
        action, reason = Action.SCALE_UP, DecisionReason.SLO_MISSED if ctx.slo_missed else DecisionReason.DEMAND_RISING
    else:
        action, reason = Action.SCALE_DOWN, DecisionReason.DEMAND_FALLING
    message = f"{applied.replicas} -> {target.replicas} replica(s)"
    if limited:
        message += f" (max step {_max_step(applied, proposed, rails)}; the plan wants {proposed.replicas})"
    elif proposed.replicas > wanted.replicas:
        message += (f" (demand wants {wanted.replicas}; {proposed.replicas} were recommended within the last "
                    f"{stabilization_window(rails):.0f} s)")
    if ctx.plan.demand_is_floor and ctx.plan.demand_rps is not None:
        message += f", for at least {ctx.plan.demand_rps:.2f} req/s (a new replica has no rate yet)"
    if surge is not None:
        message += (f"; the rollout in progress goes on at maxSurge {surge} (was {ctx.state.rollout_surge}), so the "
                    f"count fits the pool beside it and the old pods serve until new ones replace them")
    return Decision(action, target, wanted, reason, message, tuple(checks), ctx.now,
                    running_wanted=wanted.replicas, max_surge=surge)


# Holds under which the running shape still follows demand: a better shape must wait, or none meets
# the SLO by the model (overload inflates the predicted TTFT), but more replicas of what runs still help.


_RELAYOUT_HOLDS = (DecisionReason.RELAYOUT_IN_PROGRESS, DecisionReason.RELAYOUT_COOLDOWN,
                   DecisionReason.WORKING_SET_ABOVE_PLAN, DecisionReason.WORKING_SET_UNSETTLED,
                   DecisionReason.PASS_TIME_UNMEASURED, DecisionReason.SCALE_UP_LOADING,
                   DecisionReason.RELAYOUT_NOT_WORTH_IT,
                   DecisionReason.RELAYOUT_WOULD_DROP_CAPACITY, DecisionReason.NO_FEASIBLE_LAYOUT)


def decide(plan: Plan, state: PlannerState, observation: Observation | None, guardrails: Guardrails,
           now: float) -> Decision:
    applied = state.applied
    current = None if applied is None else plan.sized(applied)
    measured_hold = (applied is not None and current is None
                     and measured_working_set_holds(plan, applied, observation))
    if measured_hold and applied is not None:
        current = plan.sized(applied, over_line=True)
    decision = _decide(plan, state, observation, guardrails, now, current)
    if measured_hold and applied is not None and (decision.target is None or decision.target.same_shape(applied)):
        # The model's verdict was overruled: say so, or `explain` shows a shape kept over the line unasked.
        decision = replace(decision, message=f"{decision.message}; {measured_hold_note(plan, applied, observation)}")
    return decision


def _decide(plan: Plan, state: PlannerState, observation: Observation | None, guardrails: Guardrails,
            now: float, current: Layout | None) -> Decision:
    applied = state.applied
    unsafe = applied_unsafe(plan, applied, current, observation)
    proposed, rollout = plan.layout, None
    if plan.demand_is_floor and applied is not None:
        # A floor of the demand sizes the running shape up, or nothing: which shape is best, and how
        # many pods fewer would do, wait for every replica's rate.
        proposed = None if unsafe else current
    elif applied is not None and proposed is not None and not applied.same_shape(proposed):
        kept = pods_kept(plan, state, applied, current, unsafe, guardrails, now)
        rollout = reachable(plan, applied, running_safe=not unsafe, keep=kept,
                            load_seconds=guardrails.model_load_seconds,
                            keep_at_least=kept_at_least(plan, applied, kept, observation, unsafe))
        if rollout is None and unsafe and past_cliff(observation) and not fills_pool(plan, applied):
            # The engine preempts: the shape goes even if the pods it keeps meanwhile serve less than the
            # demand, but only by a rollout the pool holds (a Pending surge pod stalls it for good). On a
            # full pool that sheds pods for every wave's load, so it is weighed against staying instead
            # (giving way, below): pods past the cliff still complete what they measurably complete.
            rollout = reachable(plan, applied, running_safe=False, keep=0, load_seconds=guardrails.model_load_seconds)
        if rollout is None and not scale_up_loading(state, guardrails, now):
            # Giving way weighs the running pods' capacity against the rollout's; with some still
            # loading, staying gains them within a load, while the rollout would cancel them.
            rollout = giving_way_rollout(plan, applied, observation, guardrails)
        if rollout is not None:
            proposed = rollout.planned
        elif unsafe:
            # No shape can roll in within the pool: the running shape stays, and keeps scaling to spread
            # its working set thinner.
            current, unsafe = plan.sized(applied, over_line=True), False
    ctx = CheckContext(plan, state, observation, guardrails, now, proposed, applied, unsafe,
                   None if unsafe else current, slo_missed(plan, observation), rollout,
                   over_line=applied is not None and current is None)
    checks: list[Check] = []
    held = _chain(ctx, checks)
    if held is None:
        return _act(ctx, checks)
    if held.reason == DecisionReason.SCALE_UP_LOADING and ctx.current is None and not ctx.over_line:
        # Held on the engine's word alone (relayout_checks.py `check_scale_up_landed`): the running shape is
        # what the model still sizes, and it scales on while the pods it ordered load.
        ctx = replace(ctx, current=current, applied_unsafe=False)
    trusted = held.checks[-1].name != "metrics" and ctx.current is not None
    held = replace(held, running_wanted=ctx.current.replicas if trusted and ctx.current is not None else None)
    if held.reason not in _RELAYOUT_HOLDS or ctx.current is None or applied is None:
        return held
    fallback = replace(ctx, proposed=ctx.current)
    if held.reason == DecisionReason.NO_FEASIBLE_LAYOUT and ctx.current.replicas <= applied.replicas:
        return held  # best effort adds capacity; it never removes it on a plan that failed
    scaled = _chain(fallback, checks) or _act(fallback, checks)
    if scaled.target is None:
        return held  # nothing to scale either: the held re-layout is the news
    shape = f"TP{applied.tensor_parallel_size} max-num-seqs {applied.max_num_seqs}"
    return replace(scaled, recommended=plan.layout, running_wanted=ctx.current.replicas,
                   message=f"{scaled.message}, keeping {shape} ({held.reason}: {held.message})")


def next_state(state: PlannerState, decision: Decision, rails: Guardrails, applied: bool = True) -> PlannerState:
    """The state to persist after a decision; `applied=False` (Recommend mode) records only the
    recommendation, so the guardrails keep judging what actually runs. The stabilisation window
    remembers what the demand wanted of the running shape; a re-layout starts it anew."""
    now = decision.decided_at
    recent = tuple((t, r) for t, r in state.recent_recommendations if now - t <= stabilization_window(rails))
    if not state.recent_recommendations and state.applied is not None:
        recent += ((now, state.applied.replicas),)  # the HPA's seed: what runs counts as recommended
    if decision.running_wanted is not None:
        recent += ((now, decision.running_wanted),)
    new = replace(state, recent_recommendations=window_maxima(recent))
    if not applied or decision.target is None:
        return new
    if decision.action is Action.RELAYOUT:
        rolled_from = (None if state.applied is None or decision.rollout is None or decision.rollout.kept < 1
                       else replace(state.applied, replicas=decision.rollout.kept))
        new = replace(new, last_relayout_at=now, recent_recommendations=((now, decision.target.replicas),),
                      rolled_from=rolled_from)
        if decision.unsafe_at_tokens is not None and state.applied is not None:
            left = state.applied
            new = replace(new, left_unsafe=LeftUnsafe(left.tensor_parallel_size, left.max_num_seqs,
                                                      decision.unsafe_at_tokens, now))
    elif decision.action is Action.SCALE_UP:
        new = replace(new, last_scale_up_at=now)
    elif decision.action is Action.SCALE_DOWN:
        new = replace(new, last_scale_down_at=now)
    return replace(new, applied=decision.target)
