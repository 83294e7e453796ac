"""The checks a re-layout must pass: settled, off cooldown, not restarting a scale-up's loading pods, judged
on a measured working set and a measured pass, paying back its rollout, and rollable within the pool.
Each returns a `Check` (planner/checks.py); `planner/guardrails.py` runs them in its chain.
"""

from __future__ import annotations

from dataclasses import replace

from infertune.planner.candidates import KV_RISK
from infertune.planner.checks import (
    Check,
    CheckContext,
    hold,
    is_relayout,
    ok,
    price_per_gpu_hour,
    scale_up_loading,
    since,
)
from infertune.planner.keep import fills_pool
from infertune.planner.rollout import peak_gpus
from infertune.planner.running import past_cliff, roomier, working_set_held
from infertune.planner.types import DecisionReason, Layout, LeftUnsafe


def check_relayout_settled(ctx: CheckContext) -> Check:
    """No re-layout while the last one is still loading or rolling, however unsafe the model now
    thinks the new shape is: its pods are not all serving yet, so no figure has judged it, and
    another restart would only push back the moment any capacity of either shape arrives."""
    if not is_relayout(ctx):
        return ok("relayout-settled")
    waited = since(ctx.state.last_relayout_at, ctx.now)
    if waited < ctx.rails.model_load_seconds:
        return hold("relayout-settled", DecisionReason.RELAYOUT_IN_PROGRESS,
                    f"the last re-layout, {waited:.0f} s ago, is still loading (model load "
                    f"{ctx.rails.model_load_seconds:.0f} s)")
    if ctx.state.rolling_out:
        return hold("relayout-settled", DecisionReason.RELAYOUT_IN_PROGRESS,
                    f"the last re-layout, {waited:.0f} s ago, is still rolling out (old pods still serve)")
    return ok("relayout-settled")


def check_relayout_keeps_capacity(ctx: CheckContext) -> Check:
    """A re-layout the pool cannot roll into without dropping a serving pod waits (see
    planner/rollout.py); a running shape the engine reports past the cliff leaves anyway."""
    if not is_relayout(ctx) or ctx.rollout is not None or ctx.applied_unsafe:
        return ok("relayout-capacity")
    assert ctx.applied is not None and ctx.proposed is not None
    waits = ("" if ctx.slo_missed or not fills_pool(ctx.plan, ctx.applied) else
             "; a move for cost alone keeps the pods the forecast and the stabilisation window want, and sheds "
             "the burst headroom only once the forecast's bursts read their whole window, so it waits")
    return hold("relayout-capacity", DecisionReason.RELAYOUT_WOULD_DROP_CAPACITY,
                f"rolling {ctx.applied.replicas} x TP{ctx.applied.tensor_parallel_size} into "
                f"TP{ctx.proposed.tensor_parallel_size} max-num-seqs {ctx.proposed.max_num_seqs} while keeping the "
                f"pods the demand needs serving does not fit the pool's {ctx.plan.sizing.pool_gpus} GPUs, even one "
                f"new pod at a time{waits}")


def check_rollout_finished(ctx: CheckContext) -> Check:
    """No scale-down mid-rollout: the Deployment would take the pods from the old shape too, and
    those carry the demand until the new ones are ready. No scale-up past the count whose surge pod
    still fits the pool either: a surge pod left Pending stalls the rollout (maxUnavailable 0)."""
    if is_relayout(ctx) or ctx.applied is None or ctx.proposed is None or not ctx.state.rolling_out:
        return ok("rollout-finished")
    if ctx.proposed.replicas < ctx.applied.replicas:
        return hold("rollout-finished", DecisionReason.ROLLOUT_IN_PROGRESS,
                    "old pods still serve beside the new layout's; the scale-down waits for the rollout")
    if ctx.proposed.replicas > ctx.applied.replicas and ctx.applied.replicas >= rollout_room(ctx, ctx.applied):
        return hold("rollout-finished", DecisionReason.ROLLOUT_IN_PROGRESS,
                    f"the pool has no room for a surge pod past {ctx.applied.replicas} replica(s) until the "
                    f"rollout ends")
    return ok("rollout-finished")


def rollout_room(ctx: CheckContext, layout: Layout) -> int:
    """The most replicas of `layout` whose rollout still fits the pool: one surge pod, and the old pods it
    keeps (of another TP, perhaps) until new ones replace them. A count past it would leave new pods
    Pending while the old ones wait for them to be ready: a rollout stalled for good.

    One surge pod, not the rollout's own surge: the rollout took the largest surge the pool held, so at that
    surge no scale-up fits while it runs, for its whole length (a model load or more), however the demand
    rises. A scale-up renders the strategy anew at the surge the new count leaves room for
    (`rollout_surge`), and the Deployment keeps every old pod the higher count needs until new ones are
    ready (random scenario 208: a 5-pod rollout with a surge of 3 filled a 32-GPU pool while the demand
    went from 1.25 to 2.94 req/s, and the fleet served on 5 pods for 840 s; docs/bench-history.md)."""
    most, pool = ctx.plan.sizing.replicas_max, ctx.plan.sizing.pool_gpus
    if pool is None:
        return most
    return max((n for n in range(1, most + 1) if _rolls_within(ctx, replace(layout, replicas=n), 1)), default=0)


def rollout_surge(ctx: CheckContext, layout: Layout) -> int:
    """The surge to render with a scale-up to `layout` mid-rollout: the rollout's own, or the largest below it
    whose rollout still fits the pool at the new count (at least one pod: `rollout_room` bounds the count)."""
    surge = ctx.state.rollout_surge
    return next((s for s in range(surge, 0, -1) if _rolls_within(ctx, layout, s)), min(surge, 1))


def _rolls_within(ctx: CheckContext, layout: Layout, surge: int) -> bool:
    """Whether the rollout in progress, to `layout` at `surge`, holds no more GPUs than the pool at any wave
    from now on: the old pods it kept, or as many of them as still live where the workload says (those
    it has replaced freed their GPUs; judged on every pod it kept, a rollout two waves in left a scale-up
    one surge pod where the old pods gone had left room for several, and the 2-hour spike's seed 9 met its
    step on 10 pods for a whole model load: docs/bench-history.md)."""
    pool, old = ctx.plan.sizing.pool_gpus, ctx.state.rolled_from
    if pool is None:
        return True
    if old is not None and ctx.state.old_pods is not None:
        old = replace(old, replicas=min(old.replicas, ctx.state.old_pods))
    if old is None or old.same_shape(layout):
        return (layout.replicas + surge) * layout.tensor_parallel_size <= pool
    return peak_gpus(old, layout, surge, ctx.state.rollout_unavailable) <= pool


def check_relayout_cooldown(ctx: CheckContext) -> Check:
    """Re-layouts are spaced by the cooldown. Only a shape that holds more KV than its pool (by the model,
    or the engine preempting) leaves within it: a stream decoding below the floor on a shape just
    rolled in is mended by the next cycles' fit, not by restarting again (that flips between shapes,
    a model load each way). A rollout that gives serving pods up waits for the cooldown whatever the
    reason: it costs capacity on the way, and right after a re-layout the cold caches of the sessions it
    moved make any shape look outgrown."""
    gives_way = ctx.rollout is not None and ctx.rollout.max_unavailable > 0
    urgent = ctx.applied_unsafe and (ctx.over_line or past_cliff(ctx.observation))
    if not is_relayout(ctx) or (urgent and not gives_way):
        return ok("relayout-cooldown")
    waited = since(ctx.state.last_relayout_at, ctx.now)
    # The dearest re-layout waits two cooldowns, so re-layouts stay at most two per two cooldowns even
    # when the last one was the urgent kind that skips its own.
    cooldown = ctx.rails.relayout_cooldown_s * (2 if gives_way else 1)
    if waited < cooldown:
        kind = " for a rollout that gives pods up" if gives_way else ""
        return hold("relayout-cooldown", DecisionReason.RELAYOUT_COOLDOWN,
                    f"last re-layout {waited:.0f} s ago (cooldown{kind} {cooldown:.0f} s)")
    return ok("relayout-cooldown")


def check_scale_up_landed(ctx: CheckContext) -> Check:
    """A re-layout waits while pods of the last scale-up still load, unless the model finds the running
    shape's working set past the KV line or a full pool gives way. Its rollout
    would replace those pods first (a Deployment removes unready pods before ready ones) with pods that
    serve a whole model load from now, not the rest of the load they are into, while the demand that
    ordered them climbs; and a demand still climbing is not the level a cheaper shape is judged on.
    Random scenario 212 (coding-agent sessions, an 810 s load): a scale-up from 2 to 4 pods, then 30 s
    later a move from c=13 to c=15 for 4 GPUs; the fleet served on 2 pods for 14 minutes, and the
    tighter shape was left as unsafe 18 minutes later, a second rollout into the next burst.
    The engine's figures alone (streams decoding below the floor, or preempting) do not lift the wait: while
    a scale-up's pods load, every pod that serves runs its cap, and what they report is the overload those
    pods are coming to relieve. Random scenario 400 (a 2.9x step on TP4 c=64), with a pod's e2e counted at
    its own prefill (tried, docs/bench-history.md): six pods ordered over four minutes, then streams below
    the floor, and a move to c=15 restarted the five still loading, a whole load from then; the draw went
    from 93.82% to 82.97%, and back to 93.82% with this wait."""
    if (not is_relayout(ctx) or (ctx.applied_unsafe and ctx.over_line) or ctx.proposed is None
            or (ctx.rollout is not None and ctx.rollout.max_unavailable > 0)
            or not scale_up_loading(ctx.state, ctx.rails, ctx.now)):
        return ok("scale-up-landed")
    assert ctx.applied is not None
    loading = ctx.applied.replicas - (ctx.state.ready_replicas or 0)
    return hold("scale-up-landed", DecisionReason.SCALE_UP_LOADING,
                f"TP{ctx.proposed.tensor_parallel_size} max-num-seqs {ctx.proposed.max_num_seqs} waits: {loading} "
                f"pod(s) of the scale-up {since(ctx.state.last_scale_up_at, ctx.now):.0f} s ago still load, and a "
                f"re-layout now would restart them, a whole model load ({ctx.rails.model_load_seconds:.0f} s) from "
                f"now")


def check_working_set_measured(ctx: CheckContext) -> Check:
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
    and met the spike on a fleet just rolled (docs/bench-history.md).
    For one re-layout horizon after a shape was left as unsafe, the working set is judged at no less than
    its level then: the history's 15 minutes forget a level the sessions return to, and a move back on a
    trough meets the next rise under the re-layout cooldown (random scenario 19: TP4 c=13 left with the
    level at 44K tokens a stream, back at 2,625 s on a 41K trough, at 99% of its KV within five minutes;
    docs/bench.md).
    A move to more room, a running shape the model or the engine finds unsafe, and a full pool giving
    way do not wait."""
    obs = ctx.observation
    held = working_set_held(obs)
    if (not is_relayout(ctx) or ctx.applied_unsafe or held is None or obs is None or ctx.proposed is None
            or (ctx.rollout is not None and ctx.rollout.max_unavailable > 0)):
        return ok("working-set-measured")
    assert ctx.applied is not None
    if roomier(ctx.proposed, ctx.applied):
        return ok("working-set-measured")
    measured_for, load = obs.stream_context_measured_seconds, ctx.rails.model_load_seconds
    if measured_for is not None and measured_for < load:
        return hold("working-set-measured", DecisionReason.WORKING_SET_UNSETTLED,
                    f"TP{ctx.proposed.tensor_parallel_size} max-num-seqs {ctx.proposed.max_num_seqs} waits: the "
                    f"running streams' working set has been measured for {measured_for:.0f} s, less than a model "
                    f"load ({load:.0f} s), and a tighter shape is judged on its level, not on what the first "
                    f"streams held")
    left = _left_unsafe_within_horizon(ctx)
    judged = held if left is None else max(held, left.stream_tokens)
    risk = ctx.plan.kv_risk_measured(ctx.proposed, judged)
    if risk is None or risk <= KV_RISK:
        return ok("working-set-measured")
    planned = ctx.plan.workload.context_tokens
    if left is not None and judged > held:
        holds = (f"a running stream held {judged:,.0f} tokens of KV (its level then) when "
                 f"TP{left.tensor_parallel_size} max-num-seqs {left.max_num_seqs} was left as unsafe "
                 f"{ctx.now - left.at:,.0f} s ago, within a re-layout horizon (it holds {held:,.0f} now)")
    else:
        over = "the last load" if held == obs.stream_context_tokens else "the metrics history"
        holds = f"a running stream holds {held:,.0f} tokens of KV (its mean over {over})"
    return hold("working-set-measured", DecisionReason.WORKING_SET_ABOVE_PLAN,
                f"TP{ctx.proposed.tensor_parallel_size} max-num-seqs {ctx.proposed.max_num_seqs} waits: {holds} "
                f"where the finished requests say {planned:,.0f}, and at that working set it would be past the KV "
                f"line {risk:.0%} of the time (a new layout: at most {KV_RISK:.0%})")


def _left_unsafe_within_horizon(ctx: CheckContext) -> LeftUnsafe | None:
    left = ctx.state.left_unsafe
    if left is None or since(left.at, ctx.now) > ctx.rails.relayout_horizon_s:
        return None
    return left


def check_pass_time_measured(ctx: CheckContext) -> Check:
    """A re-layout made for cost waits while the per-pass time it was chosen on is the bare napkin, with
    nothing measured at any TP: first-principles napkins miss real stacks by 2-10x (docs/model-validation.md),
    so the shape that looks cheapest on it is a guess, and it is paid for with a model load and a cooldown
    before a measured fit could move it back. The first fit comes minutes after the pods serve. A running
    shape the model or the engine finds unsafe does not wait, nor does a full pool giving way."""
    if (not is_relayout(ctx) or ctx.applied_unsafe or ctx.proposed is None
            or (ctx.rollout is not None and ctx.rollout.max_unavailable > 0)):
        return ok("pass-time-measured")
    if ctx.plan.pass_source(ctx.proposed) != "napkin":
        return ok("pass-time-measured")
    return hold("pass-time-measured", DecisionReason.PASS_TIME_UNMEASURED,
                f"TP{ctx.proposed.tensor_parallel_size} max-num-seqs {ctx.proposed.max_num_seqs} waits: it is cheaper "
                f"by the napkin alone, and no pass has been measured yet at any TP")


def check_relayout_pays_back(ctx: CheckContext) -> Check:
    """A re-layout restarts every replica and, while it rolls, pays for old and new pods at once:
    only worth it when what it saves over the payback span (`relayout_payback_s`, two hours by default:
    the shape it brings runs for hours) beats that (planner/rollout.py), and when it saves more than the
    hysteresis share of the GPUs, at the demand and within that share of it: two shapes within a replica
    of each other trade places with every small change of the demand or the fit, and each trade is a
    model load."""
    if not is_relayout(ctx) or ctx.applied is None or ctx.applied_unsafe or ctx.rollout is None:
        return ok("relayout-payback")
    if ctx.rollout.max_unavailable > 0:
        # Giving way has weighed its dip's queue against staying's (planner/rollout.py): a
        # shape that cannot stay is not judged by what it saves.
        return ok("relayout-payback", DecisionReason.RELAYOUT_PAYS_BACK,
                  "the running shape fills the pool and cannot stay; the rollout's dip queues less than staying")
    assert ctx.proposed is not None
    price_per_gpu_second = price_per_gpu_hour(ctx) / 3600.0
    baseline = ctx.current or ctx.applied
    shape = f"TP{ctx.proposed.tensor_parallel_size} max-num-seqs {ctx.proposed.max_num_seqs}"
    if baseline.gpus - ctx.proposed.gpus < ctx.rails.hysteresis * baseline.gpus:
        # A dearer shape is proposed when the running one is inside the risk a running shape may run at
        # but over the one a new shape may start at (planner/candidates.py): it saves nothing.
        saved = ("more than now" if ctx.proposed.gpus > baseline.gpus
                 else f"less than {ctx.rails.hysteresis:.0%} saved")
        return hold("relayout-payback", DecisionReason.RELAYOUT_NOT_WORTH_IT,
                    f"{shape} needs {ctx.proposed.gpus} GPUs against {baseline.gpus}: {saved}")
    least = _saving_across_band(ctx, baseline, ctx.proposed)
    if least < ctx.rails.hysteresis * baseline.gpus:
        return hold("relayout-payback", DecisionReason.RELAYOUT_NOT_WORTH_IT,
                    f"{shape} saves {baseline.gpus - ctx.proposed.gpus} GPU(s) at this demand but {least} "
                    f"within {ctx.rails.hysteresis:.0%} of it: the saving is the replica counts' rounding")
    at_peak = _saving_at_recent_peak(ctx, baseline, ctx.proposed)
    if at_peak is not None and at_peak[1] < ctx.rails.hysteresis * baseline.gpus:
        return hold("relayout-payback", DecisionReason.RELAYOUT_NOT_WORTH_IT,
                    f"{shape} saves {baseline.gpus - ctx.proposed.gpus} GPU(s) at this demand but {at_peak[1]} at "
                    f"{at_peak[0]:.2f} req/s, the highest demand read within the last model load "
                    f"({ctx.rails.model_load_seconds:.0f} s) with the headroom: the saving lasts only while the "
                    f"demand's dip does")
    # Weighed in GPU-seconds: every GPU of the pool costs the same, so the price only names the figures (and
    # a price of 0, an on-premises pool's, would otherwise hold every move for cost as saving $0).
    saving = (baseline.gpus - ctx.proposed.gpus) * ctx.rails.relayout_payback_s
    restart = ctx.rollout.extra_gpu_seconds
    if saving <= restart:
        return hold("relayout-payback", DecisionReason.RELAYOUT_NOT_WORTH_IT,
                    f"saves {_priced(saving, price_per_gpu_second)} over {ctx.rails.relayout_payback_s:.0f} s; "
                    f"the rollout costs {_priced(restart, price_per_gpu_second)} ({ctx.rollout.describe()})")
    return ok("relayout-payback", DecisionReason.RELAYOUT_PAYS_BACK,
              f"saves {_priced(saving, price_per_gpu_second)}, the rollout costs "
              f"{_priced(restart, price_per_gpu_second)}")


def _saving_across_band(ctx: CheckContext, baseline: Layout, proposed: Layout) -> int:
    """The fewest GPUs `proposed` saves over `baseline` with the demand anywhere within the hysteresis share
    of the figure sized for: two shapes whose pods carry different rates round to whole pods differently,
    and a saving that a demand a few percent off turns into none or a loss is rounding, not thrift."""
    demand = ctx.plan.sizing.demand_rps
    saved = baseline.gpus - proposed.gpus
    if demand is None or demand <= 0:
        return saved
    for factor in (1.0 - ctx.rails.hysteresis, 1.0 + ctx.rails.hysteresis):
        there = _saved_at(ctx, baseline, proposed, demand * factor)
        if there is not None:
            saved = min(saved, there)
    return saved


def _saved_at(ctx: CheckContext, baseline: Layout, proposed: Layout, demand_rps: float) -> int | None:
    """The GPUs `proposed` saves over `baseline` with both sized for `demand_rps`; None when one cannot be."""
    stay = ctx.plan.sized(baseline, over_line=True, demand_rps=demand_rps)
    move = ctx.plan.sized(proposed, over_line=True, demand_rps=demand_rps)
    return None if stay is None or move is None else stay.gpus - move.gpus


def _saving_at_recent_peak(ctx: CheckContext, baseline: Layout, proposed: Layout) -> tuple[float, int] | None:
    """(the demand, the GPUs `proposed` saves over `baseline` there) at the highest demand read within the last
    model load, when that lies past the hysteresis band. Both shapes sized for it: the new pods start at the
    count the rollout keeps, and the stabilisation window lets them go only once the demand has stayed low
    for as long, so a saving that such a swing turns into none is a dip's, and the move trades the running
    shape's pods for a shape that ends up as large. None when there is no such reading, or a shape cannot
    be sized for it."""
    demand, peak = ctx.plan.sizing.demand_rps, ctx.plan.sizing.recent_peak_rps
    if demand is None or peak is None or peak <= demand * (1.0 + ctx.rails.hysteresis):
        return None
    saved = _saved_at(ctx, baseline, proposed, peak)
    return None if saved is None else (peak, saved)


def _priced(gpu_seconds: float, price_per_gpu_second: float) -> str:
    """GPU time in dollars, or in GPU-hours where the pool has no price."""
    if price_per_gpu_second > 0:
        return f"${gpu_seconds * price_per_gpu_second:.2f}"
    return f"{gpu_seconds / 3600.0:.1f} GPU-h"
