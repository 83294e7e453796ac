"""`decide()`: the guardrail chain between a plan and an action.

Each check is a small function returning a `Check`: passed or not, with a reason. The chain
stops at the first check that holds the change, so the decision's reason is always the one
check that decided it, and every check that ran is kept for `infertune explain`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

from infertune.api.observation import MetricsFault, Observation
from infertune.planner.candidates import KV_RISK
from infertune.planner.keep import fills_pool, giving_way_rollout, kept_at_least, pods_kept
from infertune.planner.plan import Plan
from infertune.planner.rollout import Rollout, peak_gpus, reachable
from infertune.planner.running import (
    applied_unsafe,
    measured_hold_note,
    measured_working_set_holds,
    past_cliff,
    roomier,
    slo_missed,
    working_set_held,
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
)

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


@dataclass(frozen=True)
class _Context:
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


def _ok(name: str, reason: Reason = DecisionReason.PASSED, message: str = "") -> Check:
    return Check(name, True, reason, message)


def _hold(name: str, reason: Reason, message: str) -> Check:
    return Check(name, False, reason, message)


def _since(then: float | None, now: float) -> float:
    return math.inf if then is None else now - then


def check_metrics_fresh(ctx: _Context) -> Check:
    obs = ctx.observation
    if obs is None:
        return _hold("metrics", DecisionReason.METRICS_UNAVAILABLE, "no observation yet")
    if not obs.available:
        return _hold("metrics", obs.fault, obs.message or "the metrics source is not trusted")
    age = ctx.now - obs.sample_time
    if age > ctx.rails.stale_after_s:
        limit = ctx.rails.stale_after_s
        return _hold("metrics", DecisionReason.METRICS_STALE, f"newest sample is {age:.0f} s old (limit {limit:.0f} s)")
    if obs.arrival_rate is None:
        if _adds_replicas_on_floor(ctx):
            return _ok("metrics", DecisionReason.METRICS_FRESH,
                       f"the demand is at least {obs.demand_floor:.2f} req/s (a new replica has no rate yet)")
        # A replica that just became ready has no rate yet: the demand is unknown, not the hint, and its
        # floor (the rated replicas') proves only that more are needed.
        return _hold("metrics", DecisionReason.NO_DEMAND_FIGURE,
                     "no request rate yet (a new replica needs a second scrape)")
    return _ok("metrics", DecisionReason.METRICS_FRESH)


def _adds_replicas_on_floor(ctx: _Context) -> bool:
    """A scale-up of the running shape that the demand's floor alone asks for: the demand is at least
    what sized it, so waiting a scrape for the new replica's rate only delays pods a rising load needs."""
    applied, proposed = ctx.applied, ctx.proposed
    return (ctx.plan.demand_is_floor and applied is not None and proposed is not None
            and applied.same_shape(proposed) and proposed.replicas > applied.replicas)


def check_plan_feasible(ctx: _Context) -> Check:
    if ctx.proposed is None:
        return _hold("feasible", DecisionReason.NO_FEASIBLE_LAYOUT, ctx.plan.reason)
    return _ok("feasible", DecisionReason.PLAN_FEASIBLE)


def check_relayout_settled(ctx: _Context) -> Check:
    """No re-layout while the last one is still loading or rolling, however unsafe the model now
    thinks the new shape is: its pods are not all serving yet, so no figure has judged it, and
    another restart would only push back the moment any capacity of either shape arrives."""
    if not _is_relayout(ctx):
        return _ok("relayout-settled")
    waited = _since(ctx.state.last_relayout_at, ctx.now)
    if waited < ctx.rails.model_load_seconds:
        return _hold("relayout-settled", DecisionReason.RELAYOUT_IN_PROGRESS,
                     f"the last re-layout, {waited:.0f} s ago, is still loading (model load "
                     f"{ctx.rails.model_load_seconds:.0f} s)")
    if ctx.state.rolling_out:
        return _hold("relayout-settled", DecisionReason.RELAYOUT_IN_PROGRESS,
                     f"the last re-layout, {waited:.0f} s ago, is still rolling out (old pods still serve)")
    return _ok("relayout-settled")


def check_relayout_keeps_capacity(ctx: _Context) -> Check:
    """A re-layout the pool cannot roll into without dropping a serving pod waits (see
    planner/rollout.py); a running shape the engine reports past the cliff leaves anyway."""
    if not _is_relayout(ctx) or ctx.rollout is not None or ctx.applied_unsafe:
        return _ok("relayout-capacity")
    assert ctx.applied is not None and ctx.proposed is not None
    waits = ("" if ctx.slo_missed or not fills_pool(ctx.plan, ctx.applied) else
             "; a move for cost alone keeps the pods the forecast and the stabilisation window want, and sheds "
             "the burst headroom only once the forecast's bursts read their whole window, so it waits")
    return _hold("relayout-capacity", DecisionReason.RELAYOUT_WOULD_DROP_CAPACITY,
                 f"rolling {ctx.applied.replicas} x TP{ctx.applied.tensor_parallel_size} into "
                 f"TP{ctx.proposed.tensor_parallel_size} max-num-seqs {ctx.proposed.max_num_seqs} while keeping the "
                 f"pods the demand needs serving does not fit the pool's {ctx.plan.sizing.pool_gpus} GPUs, even one "
                 f"new pod at a time{waits}")


def check_rollout_finished(ctx: _Context) -> Check:
    """No scale-down mid-rollout: the Deployment would take the pods from the old shape too, and
    those carry the demand until the new ones are ready. No scale-up past the count whose surge pod
    still fits the pool either: a surge pod left Pending stalls the rollout (maxUnavailable 0)."""
    if _is_relayout(ctx) or ctx.applied is None or ctx.proposed is None or not ctx.state.rolling_out:
        return _ok("rollout-finished")
    if ctx.proposed.replicas < ctx.applied.replicas:
        return _hold("rollout-finished", DecisionReason.ROLLOUT_IN_PROGRESS,
                     "old pods still serve beside the new layout's; the scale-down waits for the rollout")
    if ctx.proposed.replicas > ctx.applied.replicas and ctx.applied.replicas >= _rollout_room(ctx, ctx.applied):
        return _hold("rollout-finished", DecisionReason.ROLLOUT_IN_PROGRESS,
                     f"the pool has no room for a surge pod past {ctx.applied.replicas} replica(s) until the "
                     f"rollout ends")
    return _ok("rollout-finished")


def _rollout_room(ctx: _Context, layout: Layout) -> int:
    """The most replicas of `layout` whose rollout still fits the pool: its surge pod, and the old pods
    it keeps (of another TP, perhaps) until new ones replace them. A count past it would leave new pods
    Pending while the old ones wait for them to be ready: a rollout stalled for good."""
    most, pool = ctx.plan.sizing.replicas_max, ctx.plan.sizing.pool_gpus
    if pool is None:
        return most
    surge, old = ctx.state.rollout_surge, ctx.state.rolled_from
    if old is None or old.same_shape(layout):
        return pool // layout.tensor_parallel_size - surge
    fits = [n for n in range(1, most + 1)
            if peak_gpus(old, replace(layout, replicas=n), surge, ctx.state.rollout_unavailable) <= pool]
    return max(fits, default=0)


def check_relayout_cooldown(ctx: _Context) -> Check:
    """Re-layouts are spaced by the cooldown. Only a shape that holds more KV than its pool (by the model,
    or the engine preempting) leaves within it: a stream decoding below the floor on a shape just
    rolled in is mended by the next cycles' fit, not by restarting again (that flips between shapes,
    a model load each way). A rollout that gives serving pods up waits for the cooldown whatever the
    reason: it costs capacity on the way, and right after a re-layout the cold caches of the sessions it
    moved make any shape look outgrown."""
    gives_way = ctx.rollout is not None and ctx.rollout.max_unavailable > 0
    urgent = ctx.applied_unsafe and (ctx.over_line or past_cliff(ctx.observation))
    if not _is_relayout(ctx) or (urgent and not gives_way):
        return _ok("relayout-cooldown")
    waited = _since(ctx.state.last_relayout_at, ctx.now)
    # The dearest re-layout waits two cooldowns, so re-layouts stay at most two per two cooldowns even
    # when the last one was the urgent kind that skips its own.
    cooldown = ctx.rails.relayout_cooldown_s * (2 if gives_way else 1)
    if waited < cooldown:
        kind = " for a rollout that gives pods up" if gives_way else ""
        return _hold("relayout-cooldown", DecisionReason.RELAYOUT_COOLDOWN,
                     f"last re-layout {waited:.0f} s ago (cooldown{kind} {cooldown:.0f} s)")
    return _ok("relayout-cooldown")


def check_scale_up_landed(ctx: _Context) -> Check:
    """A re-layout waits while pods of the last scale-up still load, unless the running shape is unsafe
    (the model or the engine finds its working set past the KV line) or a full pool gives way. Its rollout
    would replace those pods first (a Deployment removes unready pods before ready ones) with pods that
    serve a whole model load from now, not the rest of the load they are into, while the demand that
    ordered them climbs; and a demand still climbing is not the level a cheaper shape is judged on.
    Random scenario 212 (coding-agent sessions, an 810 s load): a scale-up from 2 to 4 pods, then 30 s
    later a move from c=13 to c=15 for 4 GPUs; the fleet served on 2 pods for 14 minutes, and the
    tighter shape was left as unsafe 18 minutes later, a second rollout into the next burst."""
    if (not _is_relayout(ctx) or ctx.applied_unsafe or ctx.proposed is None
            or (ctx.rollout is not None and ctx.rollout.max_unavailable > 0)
            or not _scale_up_loading(ctx.state, ctx.rails, ctx.now)):
        return _ok("scale-up-landed")
    assert ctx.applied is not None
    loading = ctx.applied.replicas - (ctx.state.ready_replicas or 0)
    return _hold("scale-up-landed", DecisionReason.SCALE_UP_LOADING,
                 f"TP{ctx.proposed.tensor_parallel_size} max-num-seqs {ctx.proposed.max_num_seqs} waits: {loading} "
                 f"pod(s) of the scale-up {_since(ctx.state.last_scale_up_at, ctx.now):.0f} s ago still load, and a "
                 f"re-layout now would restart them, a whole model load ({ctx.rails.model_load_seconds:.0f} s) from "
                 f"now")


def check_working_set_measured(ctx: _Context) -> Check:
    """A re-layout made for cost onto a shape with no more KV room per stream waits when, judged at the
    working set the fleet measures (the KV a running stream holds) rather than the request shape, that
    shape would cross the KV line more often than a new layout may. The request shape is the finished
    requests' means, and those lag a session workload warming up (its first, short turns finish first):
    a tighter shape chosen on them is outgrown within its first cooldown and rolled back, a model load
    each way. For the same reason the working set is judged at the larger of its mean over the last model
    load and over the metrics history's memory: with few streams running it swings as sessions end and
    start, and a trough is not its level (random scenario 8119, a 70 s load: streams at 82K, then 30K
    150 s later, when a move to c=13 went; they held 73K eleven minutes later, and it rolled back twice).
    Nor is the working set judged before the history has measured it for a model load (after a start or
    an operator restart): a few minutes of it are a few sessions' turns. The bench's day moved from c=6 to
    c=8 at 135 s and back at 1,065 s; the 2-hour spike's seed 13 went to c=8 at 105 s and back at 1,845 s,
    and met the spike on a fleet just rolled (docs/bench.md, History).
    For one re-layout horizon after a shape was left as unsafe, the working set is judged at no less than
    its level then: the history's 15 minutes forget a level the sessions return to, and a move back on a
    trough meets the next rise under the re-layout cooldown (random scenario 19: TP4 c=13 left with the
    level at 44K tokens a stream, back at 2,625 s on a 41K trough, at 99% of its KV within five minutes;
    docs/bench.md).
    A move to more room, a running shape the model or the engine finds unsafe, and a full pool giving
    way do not wait."""
    obs = ctx.observation
    held = working_set_held(obs)
    if (not _is_relayout(ctx) or ctx.applied_unsafe or held is None or obs is None or ctx.proposed is None
            or (ctx.rollout is not None and ctx.rollout.max_unavailable > 0)):
        return _ok("working-set-measured")
    assert ctx.applied is not None
    if roomier(ctx.proposed, ctx.applied):
        return _ok("working-set-measured")
    measured_for, load = obs.stream_context_measured_seconds, ctx.rails.model_load_seconds
    if measured_for is not None and measured_for < load:
        return _hold("working-set-measured", DecisionReason.WORKING_SET_UNSETTLED,
                     f"TP{ctx.proposed.tensor_parallel_size} max-num-seqs {ctx.proposed.max_num_seqs} waits: the "
                     f"running streams' working set has been measured for {measured_for:.0f} s, less than a model "
                     f"load ({load:.0f} s), and a tighter shape is judged on its level, not on what the first "
                     f"streams held")
    left = _left_unsafe_within_horizon(ctx)
    judged = held if left is None else max(held, left.stream_tokens)
    risk = ctx.plan.kv_risk_measured(ctx.proposed, judged)
    if risk is None or risk <= KV_RISK:
        return _ok("working-set-measured")
    planned = ctx.plan.workload.context_tokens
    if left is not None and judged > held:
        holds = (f"a running stream held {judged:,.0f} tokens of KV (its level then) when "
                 f"TP{left.tensor_parallel_size} max-num-seqs {left.max_num_seqs} was left as unsafe "
                 f"{ctx.now - left.at:,.0f} s ago, within a re-layout horizon (it holds {held:,.0f} now)")
    else:
        over = "the last load" if held == obs.stream_context_tokens else "the metrics history"
        holds = f"a running stream holds {held:,.0f} tokens of KV (its mean over {over})"
    return _hold("working-set-measured", DecisionReason.WORKING_SET_ABOVE_PLAN,
                 f"TP{ctx.proposed.tensor_parallel_size} max-num-seqs {ctx.proposed.max_num_seqs} waits: {holds} "
                 f"where the finished requests say {planned:,.0f}, and at that working set it would be past the KV "
                 f"line {risk:.0%} of the time (a new layout: at most {KV_RISK:.0%})")


def _left_unsafe_within_horizon(ctx: _Context) -> LeftUnsafe | None:
    left = ctx.state.left_unsafe
    if left is None or _since(left.at, ctx.now) > ctx.rails.relayout_horizon_s:
        return None
    return left


def check_pass_time_measured(ctx: _Context) -> Check:
    """A re-layout made for cost waits while the per-pass time it was chosen on is the bare napkin, with
    nothing measured at any TP: first-principles napkins miss real stacks by 2-10x (docs/model-validation.md),
    so the shape that looks cheapest on it is a guess, and it is paid for with a model load and a cooldown
    before a measured fit could move it back. The first fit comes minutes after the pods serve. A running
    shape the model or the engine finds unsafe does not wait, nor does a full pool giving way."""
    if (not _is_relayout(ctx) or ctx.applied_unsafe or ctx.proposed is None
            or (ctx.rollout is not None and ctx.rollout.max_unavailable > 0)):
        return _ok("pass-time-measured")
    if ctx.plan.pass_source(ctx.proposed) != "napkin":
        return _ok("pass-time-measured")
    return _hold("pass-time-measured", DecisionReason.PASS_TIME_UNMEASURED,
                 f"TP{ctx.proposed.tensor_parallel_size} max-num-seqs {ctx.proposed.max_num_seqs} waits: it is cheaper "
                 f"by the napkin alone, and no pass has been measured yet at any TP")


def check_relayout_pays_back(ctx: _Context) -> Check:
    """A re-layout restarts every replica and, while it rolls, pays for old and new pods at once:
    only worth it when what it saves over the horizon beats that (planner/rollout.py), and when it
    saves more than the hysteresis share of the GPUs: two shapes within a replica of each other trade
    places with every small change of the demand or the fit, and each trade is a model load."""
    if not _is_relayout(ctx) or ctx.applied is None or ctx.applied_unsafe or ctx.rollout is None:
        return _ok("relayout-payback")
    if ctx.rollout.max_unavailable > 0:
        # Giving way has weighed its dip's queue against staying's (planner/rollout.py): a
        # shape that cannot stay is not judged by what it saves.
        return _ok("relayout-payback", DecisionReason.RELAYOUT_PAYS_BACK,
                   "the running shape fills the pool and cannot stay; the rollout's dip queues less than staying")
    assert ctx.proposed is not None
    price_per_gpu_second = _price(ctx) / 3600.0
    baseline = ctx.current or ctx.applied
    if baseline.gpus - ctx.proposed.gpus < ctx.rails.hysteresis * baseline.gpus:
        # A dearer shape is proposed when the running one is inside the risk a running shape may run at
        # but over the one a new shape may start at (planner/candidates.py): it saves nothing.
        saved = ("more than now" if ctx.proposed.gpus > baseline.gpus
                 else f"less than {ctx.rails.hysteresis:.0%} saved")
        return _hold("relayout-payback", DecisionReason.RELAYOUT_NOT_WORTH_IT,
                     f"TP{ctx.proposed.tensor_parallel_size} max-num-seqs {ctx.proposed.max_num_seqs} needs "
                     f"{ctx.proposed.gpus} GPUs against {baseline.gpus}: {saved}")
    # Weighed in GPU-seconds: every GPU of the pool costs the same, so the price only names the figures (and
    # a price of 0, an on-premises pool's, would otherwise hold every move for cost as saving $0).
    saving = (baseline.gpus - ctx.proposed.gpus) * ctx.rails.relayout_horizon_s
    restart = ctx.rollout.extra_gpu_seconds
    if saving <= restart:
        return _hold("relayout-payback", DecisionReason.RELAYOUT_NOT_WORTH_IT,
                     f"saves {_priced(saving, price_per_gpu_second)} over {ctx.rails.relayout_horizon_s:.0f} s; "
                     f"the rollout costs {_priced(restart, price_per_gpu_second)} ({ctx.rollout.describe()})")
    return _ok("relayout-payback", DecisionReason.RELAYOUT_PAYS_BACK,
               f"saves {_priced(saving, price_per_gpu_second)}, the rollout costs "
               f"{_priced(restart, price_per_gpu_second)}")


def _priced(gpu_seconds: float, price_per_gpu_second: float) -> str:
    """GPU time in dollars, or in GPU-hours where the pool has no price."""
    if price_per_gpu_second > 0:
        return f"${gpu_seconds * price_per_gpu_second:.2f}"
    return f"{gpu_seconds / 3600.0:.1f} GPU-h"


def check_hysteresis(ctx: _Context) -> Check:
    if _is_relayout(ctx) or ctx.applied is None or ctx.proposed is None:
        return _ok("hysteresis")
    delta = ctx.proposed.replicas - ctx.applied.replicas
    if delta == 0:
        return _hold("hysteresis", DecisionReason.UP_TO_DATE, "the running layout is the plan")
    urgent = ctx.applied_unsafe or (ctx.slo_missed and delta > 0)
    if abs(delta) < ctx.rails.hysteresis * ctx.applied.replicas and not urgent:
        return _hold("hysteresis", DecisionReason.WITHIN_HYSTERESIS,
                     f"{delta:+d} replica(s) is within {ctx.rails.hysteresis:.0%} of {ctx.applied.replicas}")
    return _ok("hysteresis")


def check_scale_cooldowns(ctx: _Context) -> Check:
    if _is_relayout(ctx) or ctx.applied is None or ctx.proposed is None:
        return _ok("scale-cooldown")
    if ctx.proposed.replicas > ctx.applied.replicas:
        waited = _since(ctx.state.last_scale_up_at, ctx.now)
        if waited < ctx.rails.scale_up_cooldown_s and not (ctx.applied_unsafe or ctx.slo_missed):
            return _hold("scale-cooldown", DecisionReason.SCALE_UP_COOLDOWN,
                         f"last scale-up {waited:.0f} s ago (cooldown {ctx.rails.scale_up_cooldown_s:.0f} s)")
        return _ok("scale-cooldown")
    waited = min(_since(ctx.state.last_scale_down_at, ctx.now), _since(ctx.state.last_scale_up_at, ctx.now))
    if waited < ctx.rails.scale_down_cooldown_s:
        return _hold("scale-cooldown", DecisionReason.SCALE_DOWN_COOLDOWN,
                     f"last scale change {waited:.0f} s ago (cooldown {ctx.rails.scale_down_cooldown_s:.0f} s)")
    return _ok("scale-cooldown")


def check_scale_down_stabilised(ctx: _Context) -> Check:
    """HPA's rule: scale down only to the highest count recommended within the window."""
    if _is_relayout(ctx) or ctx.applied is None or ctx.proposed is None:
        return _ok("stabilisation")
    if ctx.proposed.replicas >= ctx.applied.replicas:
        return _ok("stabilisation")
    ceiling = _stabilisation_ceiling(ctx, ctx.proposed.replicas)
    if ceiling >= ctx.applied.replicas:
        return _hold("stabilisation", DecisionReason.SCALE_DOWN_STABILIZING,
                     f"{ceiling} replica(s) recommended within the last {stabilization_window(ctx.rails):.0f} s")
    return _ok("stabilisation")


def _stabilisation_ceiling(ctx: _Context, proposed_replicas: int) -> int:
    """The highest count of the running shape recommended within the stabilisation window, this one
    included. With no history yet (a first visit, or status lost) what runs counts as recommended now,
    as the HPA seeds its window: nothing is released before a whole window of demand figures exists."""
    span = stabilization_window(ctx.rails)
    recent = [r for t, r in ctx.state.recent_recommendations if ctx.now - t <= span]
    if not ctx.state.recent_recommendations and ctx.applied is not None:
        recent.append(ctx.applied.replicas)
    return max([proposed_replicas, *recent])


CHECKS: tuple[Callable[[_Context], Check], ...] = (
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


def _is_relayout(ctx: _Context) -> bool:
    return ctx.applied is not None and ctx.proposed is not None and not ctx.applied.same_shape(ctx.proposed)


def _price(ctx: _Context) -> float:
    choice = ctx.plan.choice
    if choice is None or choice.processed_tps <= 0:
        return 0.0
    # $/M x tokens/s x 3600 / 1e6 / GPUs recovers the price per GPU-hour the plan used.
    return choice.cost_per_million_tokens * choice.processed_tps * 3600.0 / 1e6 / choice.tp


def _stabilised(ctx: _Context) -> _Context:
    """A scale-down goes only as far as the highest count recommended within the window (HPA)."""
    proposed, applied = ctx.proposed, ctx.applied
    if proposed is None or applied is None or not applied.same_shape(proposed) or proposed.replicas >= applied.replicas:
        return ctx
    ceiling = _stabilisation_ceiling(ctx, proposed.replicas)
    return replace(ctx, proposed=replace(proposed, replicas=min(ceiling, applied.replicas)))


def _rolled(ctx: _Context, proposed: Layout) -> tuple[Layout, str]:
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


def _scale_up_loading(state: PlannerState, rails: Guardrails, now: float) -> bool:
    """Pods of the last scale-up still load: fewer pods are ready than the running shape's count, outside
    a rollout, within two model loads of the scale-up (a pod unready for longer is not coming soon). They
    serve within a load, and a rollout started now would replace them first (a Deployment removes
    unready old pods before ready ones) with pods that serve a load later."""
    applied, ready = state.applied, state.ready_replicas
    return (not state.rolling_out and applied is not None and ready is not None and ready < applied.replicas
            and _since(state.last_scale_up_at, now) < 2 * rails.model_load_seconds)


def _bounded_step(applied: Layout, proposed: Layout, max_step: int) -> Layout:
    delta = max(-max_step, min(max_step, proposed.replicas - applied.replicas))
    return replace(proposed, replicas=applied.replicas + delta)


def _chain(ctx: _Context, checks: list[Check]) -> Decision | None:
    """Runs the checks; the holding Decision, or None when every check passed."""
    for check in CHECKS:
        result = check(ctx)
        checks.append(result)
        if not result.passed:
            quiet = result.reason in (DecisionReason.UP_TO_DATE, DecisionReason.WITHIN_HYSTERESIS)
            action = Action.NONE if quiet else Action.HOLD
            return Decision(action, None, ctx.plan.layout, result.reason, result.message, tuple(checks), ctx.now)
    return None


def _act(ctx: _Context, checks: list[Check]) -> Decision:
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
    target = _bounded_step(applied, proposed, rails.max_step_replicas)
    if ctx.state.rolling_out and target.replicas > applied.replicas:
        target = replace(target, replicas=min(target.replicas, _rollout_room(ctx, target)))
    limited = target.replicas != proposed.replicas
    if target.replicas > applied.replicas:
        action, reason = Action.SCALE_UP, DecisionReason.SLO_MISSED if ctx.slo_missed else DecisionReason.DEMAND_RISING
    else:
        action, reason = Action.SCALE_DOWN, DecisionReason.DEMAND_FALLING
    message = f"{applied.replicas} -> {target.replicas} replica(s)"
    if limited:
        message += f" (max step {rails.max_step_replicas}; the plan wants {proposed.replicas})"
    elif proposed.replicas > wanted.replicas:
        message += (f" (demand wants {wanted.replicas}; {proposed.replicas} were recommended within the last "
                    f"{stabilization_window(rails):.0f} s)")
    if ctx.plan.demand_is_floor and ctx.plan.demand_rps is not None:
        message += f", for at least {ctx.plan.demand_rps:.2f} req/s (a new replica has no rate yet)"
    return Decision(action, target, wanted, reason, message, tuple(checks), ctx.now,
                    running_wanted=wanted.replicas)


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
        if rollout is None and not _scale_up_loading(state, guardrails, now):
            # Giving way weighs the running pods' capacity against the rollout's; with some still
            # loading, staying gains them within a load, while the rollout would cancel them.
            rollout = giving_way_rollout(plan, applied, observation, guardrails)
        if rollout is not None:
            proposed = rollout.planned
        elif unsafe:
            # No shape can roll in within the pool: the running shape stays, and keeps scaling to spread
            # its working set thinner.
            current, unsafe = plan.sized(applied, over_line=True), False
    ctx = _Context(plan, state, observation, guardrails, now, proposed, applied, unsafe,
                   None if unsafe else current, slo_missed(plan, observation), rollout,
                   over_line=applied is not None and current is None)
    checks: list[Check] = []
    held = _chain(ctx, checks)
    if held is None:
        return _act(ctx, checks)
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
    new = replace(state, recent_recommendations=recent)
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
