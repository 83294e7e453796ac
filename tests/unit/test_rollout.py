"""Re-layouts that keep the demand served while they roll: the count applied, the pool's fullest
moment, the shape chosen when the plan's own cannot be rolled into, and no scale-down mid-rollout."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from infertune.api.observation import Observation, ReplicaObservation
from infertune.model import LinearFit, load_gpu, load_model, workload_preset
from infertune.model.forecast import DemandPoint, outlook
from infertune.planner import (
    Action,
    Guardrails,
    Layout,
    PlannerState,
    PlanRequest,
    SloTarget,
    decide,
    next_state,
    plan,
)
from infertune.planner.rollout import Demand, giving_way, peak_gpus, plan_rollout, queued_request_seconds, reachable
from infertune.planner.types import DecisionReason, stabilization_window

# The B200 load test's pass at TP8, measured: a re-layout for cost never waits on the napkin alone here.
SEED_000_TP8 = LinearFit(0.0052, 0.00165, 1.0, 7, 1, 32)
RAILS = Guardrails(model_load_seconds=600, relayout_cooldown_s=1800)
# A saving weighed over three hours: for the moves whose rollout the default span's saving does not pay back.
LONG_PAYBACK = replace(RAILS, relayout_payback_s=3 * 3600.0)
NOW = 50_000.0


def request(demand: float, pool: int = 64) -> PlanRequest:
    uniform = replace(workload_preset("coding-agent"), context_cv=0.0)
    return PlanRequest(model=load_model("kimi-k2.6"), gpu=load_gpu("b200"), workload=uniform,
                       slo=SloTarget(25.0, 3.0), tp_sizes=(4, 8), concurrency_max=48, pool_gpus=pool,
                       replicas_max=64, demand_rps=demand, fits={8: SEED_000_TP8})


def fresh(demand: float) -> Observation:
    return Observation("ns", "kimi", sample_time=NOW - 5, available=True, arrival_rate=demand)


def test_the_pool_is_fullest_where_the_larger_pods_dominate():
    # Same TP: every old pod plus the one surge pod. Up in TP: the last old pod still serves while
    # the last new one loads.
    assert peak_gpus(Layout(4, 9, 12), Layout(4, 7, 12)) == 12 * 4 + 4
    assert peak_gpus(Layout(4, 9, 12), Layout(8, 24, 12)) == 4 + 12 * 8
    # Down in TP, more replicas than run: the new ones start at once beside every old pod.
    assert peak_gpus(Layout(8, 24, 4), Layout(4, 9, 8)) == 4 * 8 + 5 * 4


def test_a_rollout_keeps_every_running_pod_until_it_is_replaced():
    fewer = plan_rollout(Layout(4, 9, 15), Layout(8, 24, 6))
    assert fewer.planned == Layout(8, 24, 6) and fewer.target == Layout(8, 24, 15)
    more = plan_rollout(Layout(8, 24, 4), Layout(4, 9, 9))
    assert more.target == Layout(4, 9, 9)


def test_a_shape_the_pool_cannot_roll_into_is_skipped_for_the_next_best():
    p = plan(request(2.0), fresh(2.0), NOW)
    running = Layout(4, 9, 15)
    ranked = replace(p, layout=Layout(8, 24, 6), ranked=(Layout(8, 24, 6), Layout(4, 7, 14)))
    # 15 TP8 pods would need 120 GPUs of a 64-GPU pool; TP4 c=7 at 15 peaks at 64.
    rollout = reachable(ranked, running, running_safe=False)
    assert rollout is not None and rollout.planned == Layout(4, 7, 14) and rollout.target == Layout(4, 7, 15)
    # A safe running shape that ranks above every reachable one is kept (and scaled) instead.
    kept = replace(p, layout=Layout(8, 24, 6), ranked=(Layout(8, 24, 6), Layout(4, 9, 12), Layout(4, 7, 14)))
    assert reachable(kept, running) is None
    # Unsafe, it is passed over.
    assert reachable(kept, running, running_safe=False) == rollout


def test_an_unreachable_cheaper_layout_holds_and_the_running_shape_follows_demand():
    p = plan(request(2.0), fresh(2.0), NOW)
    assert p.layout is not None and p.layout.tensor_parallel_size == 4
    running = replace(p.layout, replicas=12)
    tp8 = Layout(8, 21, 3)  # fewer GPUs than the running shape needs, so it would pay back
    wants_tp8 = replace(p, layout=tp8, ranked=(tp8, p.layout))
    d = decide(wants_tp8, PlannerState(applied=running), fresh(2.0), RAILS, NOW)
    assert d.action is not Action.RELAYOUT
    assert "RelayoutWouldDropCapacity" in d.reason + d.message
    # In a roomy pool, once a whole stabilisation window has seen the demand want 8 of the 12 TP4 pods,
    # the rollout keeps those 8 serving: 8 TP8 pods, all started at once, one load.
    roomy = replace(wants_tp8, sizing=replace(wants_tp8.sizing, pool_gpus=256))
    rollout = reachable(roomy, running, keep=8, load_seconds=600)
    assert rollout is not None and rollout.target == Layout(8, 21, 8) and rollout.planned == tp8
    assert rollout.max_surge == 8 and rollout.waves == 1
    # Its bill counts the 5 TP8 pods beyond the 3 the demand needs: 43,200 GPU-s, more than the 28,800 the
    # 8 GPUs claimed save in an hour. (The table's own count for TP8 c=21 at this demand saves nothing at all.)
    assert rollout.extra_gpu_seconds == (8 * 4 + 8 * 8 - 3 * 8) * 600
    seen = PlannerState(applied=running, recent_recommendations=((NOW - 5000, 8),))
    d = decide(roomy, seen, fresh(2.0), RAILS, NOW)
    assert d.action is not Action.RELAYOUT and "RelayoutNotWorthIt" in d.reason + d.message
    # With no such history (a first visit) every running pod is kept: 144 GPUs for a load.
    first_visit = reachable(roomy, running, keep=None, load_seconds=600)
    assert first_visit is not None and first_visit.peak_gpus == 12 * 4 + 12 * 8


def test_no_scale_down_and_no_new_relayout_while_old_pods_still_serve():
    p = plan(request(1.0), fresh(1.0), NOW)
    assert p.layout is not None
    rolled = replace(p.layout, replicas=p.layout.replicas + 6)
    # The re-layout 3000 s ago started the stabilisation window's history anew.
    state = PlannerState(applied=rolled, last_relayout_at=NOW - 3000, rolling_out=True,
                         recent_recommendations=((NOW - 3000, rolled.replicas),))
    d = decide(p, state, fresh(1.0), RAILS, NOW)
    assert d.action is Action.HOLD and d.reason == "RolloutInProgress"
    # Once the roll is over the extra replicas go.
    d = decide(p, replace(state, rolling_out=False), fresh(1.0), RAILS, NOW)
    assert d.action is Action.SCALE_DOWN
    # A re-layout waits for the roll too, however long ago it started.
    other = PlannerState(applied=Layout(8, 16, 6), last_relayout_at=NOW - 3000, rolling_out=True)
    d = decide(p, other, fresh(1.0), RAILS, NOW)
    assert d.action is not Action.RELAYOUT and "still rolling out" in d.message


def test_a_shape_past_the_line_by_the_model_alone_stays_when_nothing_can_roll_in():
    p = plan(request(2.0), fresh(2.0), NOW)
    running = Layout(4, 12, 15)  # the model puts c=12's mean working set past the KV line
    assert p.sized(running) is None and p.sized(running, over_line=True) is not None
    tp8 = Layout(8, 21, 2)  # cheap enough to pay back its restart
    only_tp8 = replace(p, layout=tp8, ranked=(tp8,))  # 15 TP8 pods would need 120 GPUs
    d = decide(only_tp8, PlannerState(applied=running), fresh(2.0), RAILS, NOW)
    assert d.action is not Action.RELAYOUT and "RelayoutWouldDropCapacity" in d.reason + d.message
    assert d.target is None or d.target.same_shape(running)
    # The engine preempting is the cliff itself: then the shape goes, even at a capacity dip.
    preempting = replace(fresh(2.0), preemption_rate=0.5)
    d = decide(only_tp8, PlannerState(applied=running), preempting, RAILS, NOW)
    assert d.action is Action.RELAYOUT and d.reason == "CurrentLayoutUnsafe" and d.target == tp8
    # ... by a rollout the pool holds: the surge is chosen for it, never left over from the last one.
    assert d.rollout is not None and d.rollout.peak_gpus <= 64


def test_a_preempting_shape_in_a_full_pool_gives_way_within_it():
    # 8 TP4 pods fill a 32-GPU pool and preempt. TP8 x4 has no maxUnavailable-0 rollout (its last new
    # pod loads beside the last old one: 36 GPUs), so old pods are given up before their replacements
    # serve: never past the pool, never with nothing serving.
    p = plan(request(2.0, pool=32), fresh(2.0), NOW)
    running = Layout(4, 13, 8)
    tp8 = Layout(8, 8, 4)
    only_tp8 = replace(p, layout=tp8, ranked=(tp8,))
    preempting = replace(fresh(2.0), preemption_rate=0.5)
    d = decide(only_tp8, PlannerState(applied=running), preempting, RAILS, NOW)
    assert d.action is Action.RELAYOUT and d.rollout is not None
    assert d.rollout.max_unavailable >= 1 and d.rollout.peak_gpus <= 32 and 0 < d.rollout.serving_share < 1
    assert d.target is not None and d.target.same_shape(tp8) and d.target.gpus <= 32
    assert "giving up" in d.message
    # With room in the pool, TP8 x3 rolls in without giving a pod up (24 GPUs once rolled, 28 at its fullest).
    tp8_3 = Layout(8, 8, 3)
    roomy = replace(p, layout=tp8_3, ranked=(tp8_3,), sizing=replace(p.sizing, pool_gpus=40))
    d = decide(roomy, PlannerState(applied=running), preempting, RAILS, NOW)
    assert d.action is Action.RELAYOUT and d.rollout is not None and d.rollout.peak_gpus <= 40
    assert d.rollout.max_unavailable == 0


def _pods(count: int, preempting: int, completing: float) -> tuple[ReplicaObservation, ...]:
    """`count` pods of which the first `preempting` preempt, each completing `completing` requests/s."""
    return tuple(ReplicaObservation(f"p{i}", kv_usage=0.99 if i < preempting else 0.7,
                                    preemption_rate=0.5 if i < preempting else 0.0, completion_rate=completing)
                 for i in range(count))


def test_one_pod_past_the_cliff_is_not_a_full_pool_that_serves_nothing():
    # Eight TP4 pods fill the pool; the demand is what they carry. One pod holds the longest sessions and
    # preempts: staying still has the other seven flat out and what the eighth completes, which queues
    # less than shedding pods for TP8 x4 (half the slots) for a model load a wave. Before, the fleet's
    # fullest pod stood for the fleet, staying counted as nothing, and the whole pool gave way.
    p = plan(request(2.0, pool=32), fresh(2.0), NOW)
    running, tp8 = Layout(4, 13, 8), Layout(8, 8, 4)
    only_tp8 = replace(p, layout=tp8, ranked=(tp8,))
    per_pod = p.replica_peak_rps(running)
    demand = 8 * per_pod
    one_past = replace(fresh(demand), preemption_rate=0.5, kv_usage=0.99,
                       replicas=_pods(8, preempting=1, completing=0.8 * per_pod))
    d = decide(only_tp8, PlannerState(applied=running), one_past, RAILS, NOW)
    assert d.action is not Action.RELAYOUT
    # Every pod preempting and completing next to nothing: staying carries nothing to count on, and it goes.
    all_past = replace(one_past, replicas=_pods(8, preempting=8, completing=0.0))
    d = decide(only_tp8, PlannerState(applied=running), all_past, RAILS, NOW)
    assert d.action is Action.RELAYOUT and d.rollout is not None and d.rollout.max_unavailable >= 1
    assert d.rollout.peak_gpus <= 32


def test_a_preempting_full_pool_does_not_shed_pods_without_weighing_staying():
    # The rollout that keeps nothing but the new count (TP8 x3: five of eight serving pods go at once)
    # used to go whenever the engine preempted. On a full pool it is weighed against staying like every
    # rollout that costs serving pods: with one pod of eight past the cliff, staying queues less.
    p = plan(request(2.0, pool=32), fresh(2.0), NOW)
    running, tp8_3 = Layout(4, 13, 8), Layout(8, 8, 3)
    per_pod = p.replica_peak_rps(running)
    one_past = replace(fresh(8 * per_pod), preemption_rate=0.5, kv_usage=0.99,
                       replicas=_pods(8, preempting=1, completing=0.8 * per_pod))
    d = decide(replace(p, layout=tp8_3, ranked=(tp8_3,)), PlannerState(applied=running), one_past, RAILS, NOW)
    assert d.action is not Action.RELAYOUT


def test_giving_way_waits_for_the_relayout_cooldown_even_past_the_cliff():
    # Right after a re-layout the sessions it moved re-send their contexts to cold caches, and any shape
    # looks outgrown: a rollout that costs serving pods waits for the cooldown. One that keeps every
    # pod the demand needs still leaves a preempting shape at once.
    p = plan(request(2.0, pool=32), fresh(2.0), NOW)
    running, preempting = Layout(4, 13, 8), replace(fresh(2.0), preemption_rate=0.5)
    just_rolled = PlannerState(applied=running, last_relayout_at=NOW - 900)  # loaded, within the cooldown
    tp8 = Layout(8, 8, 4)
    d = decide(replace(p, layout=tp8, ranked=(tp8,)), just_rolled, preempting, RAILS, NOW)
    assert d.action is not Action.RELAYOUT and "RelayoutCooldown" in d.reason + d.message
    tp8_3 = Layout(8, 8, 3)
    roomy = replace(p, layout=tp8_3, ranked=(tp8_3,), sizing=replace(p.sizing, pool_gpus=40))
    d = decide(roomy, just_rolled, preempting, RAILS, NOW)
    assert d.action is Action.RELAYOUT and d.rollout is not None and d.rollout.max_unavailable == 0
    # Past one cooldown it still waits (two, so re-layouts stay at most two per two cooldowns); past two it goes.
    for waited, goes in ((RAILS.relayout_cooldown_s + 60, False), (2 * RAILS.relayout_cooldown_s + 60, True)):
        state = PlannerState(applied=running, last_relayout_at=NOW - waited)
        d = decide(replace(p, layout=tp8, ranked=(tp8,)), state, preempting, RAILS, NOW)
        assert (d.action is Action.RELAYOUT) is goes
        if goes:
            assert d.rollout is not None and d.rollout.max_unavailable >= 1  # it is the giving way that went
        else:
            assert "for a rollout that gives pods up" in d.reason + d.message


def test_a_full_pool_that_meets_the_slo_keeps_its_shape_rather_than_give_way():
    p = plan(request(2.0, pool=32), fresh(2.0), NOW)
    running = Layout(4, 8, 8)  # safe by the model, and the engine reports nothing amiss
    assert p.sized(running) is not None
    tp8 = Layout(8, 8, 4)
    d = decide(replace(p, layout=tp8, ranked=(tp8,)), PlannerState(applied=running), fresh(2.0), RAILS, NOW)
    assert d.action is not Action.RELAYOUT
    assert "RelayoutWouldDropCapacity" in d.reason + d.message


def _at_level(p, rate):
    """The plan as a cycle with a few minutes of demand history at `rate` makes it."""
    return replace(p, sizing=replace(p.sizing, level_rps=rate))


def test_a_full_pool_that_misses_the_slo_gives_way_to_the_plans_shape():
    # The engine reports TTFT over the limit, and more has arrived for minutes than the running shape's
    # eight pods carry flat out: it fills the pool, so it cannot scale; staying grows the queue for good,
    # and the plan's shape (the same pods at a higher concurrency, which carry the demand) comes by
    # giving pods up.
    p = plan(request(2.0, pool=32), fresh(2.0), NOW)
    running, wider = Layout(4, 4, 8), Layout(4, 16, 8)
    carried = 8 * p.replica_peak_rps(running)
    wants_wider = _at_level(replace(p, layout=wider, ranked=(wider,)), 1.2 * carried)
    assert 8 * p.replica_peak_rps(wider) > 1.3 * carried
    overloaded = replace(fresh(1.2 * carried), ttft_p95_seconds=9.0)
    d = decide(wants_wider, PlannerState(applied=running), overloaded, RAILS, NOW)
    assert d.action is Action.RELAYOUT and d.rollout is not None and d.rollout.max_unavailable >= 1
    assert d.rollout.peak_gpus <= 32
    # Over within the re-layout horizon (one pod at a time would take eight loads, 80 minutes), and
    # never the deepest dip (shedding seven pods for one load): that backlog takes the finished shape's
    # surplus (a third more than the running one carries) far longer to clear than the dip lasts.
    assert d.rollout.duration_s <= RAILS.relayout_horizon_s and d.rollout.waves > 1
    assert d.rollout.serving_share >= 0.5
    # A miss the running pods have the capacity for (a slow request) is no reason to give a serving pod
    # up; nor is the demand alone, while the SLO holds.
    for observed in (replace(fresh(0.8 * carried), ttft_p95_seconds=9.0), fresh(1.2 * carried)):
        d = decide(wants_wider, PlannerState(applied=running), observed, RAILS, NOW)
        assert d.action is not Action.RELAYOUT
    # Nor is a burst: the reading is over what the pods carry, the last few minutes' level is not.
    d = decide(_at_level(wants_wider, 0.9 * carried), PlannerState(applied=running), overloaded, RAILS, NOW)
    assert d.action is not Action.RELAYOUT
    # Nor a few polls: without minutes of history there is no level to judge a miss on.
    d = decide(_at_level(wants_wider, None), PlannerState(applied=running), overloaded, RAILS, NOW)
    assert d.action is not Action.RELAYOUT


def test_a_full_pool_whose_scale_up_still_loads_does_not_give_way():
    # The same overloaded full pool, but the last scale-up's pods still load: 6 of the 8 are ready. Giving
    # way would count the loading pods as serving, and its rollout would replace them first (a Deployment
    # removes unready old pods before ready ones) with pods that serve a load later. It waits for them, as
    # every re-layout does (ScaleUpLoading, planner/guardrails.py); once they are ready, or two loads after
    # the scale-up (a pod unready that long is not coming), it goes.
    p = plan(request(2.0, pool=32), fresh(2.0), NOW)
    running, wider = Layout(4, 4, 8), Layout(4, 16, 8)
    carried = 8 * p.replica_peak_rps(running)
    wants_wider = _at_level(replace(p, layout=wider, ranked=(wider,)), 1.2 * carried)
    overloaded = replace(fresh(1.2 * carried), ttft_p95_seconds=9.0)
    loading = PlannerState(applied=running, ready_replicas=6, last_scale_up_at=NOW - 300)
    d = decide(wants_wider, loading, overloaded, RAILS, NOW)
    assert d.action is not Action.RELAYOUT and "2 pod(s) of the scale-up 300 s ago still load" in d.message
    for state in (replace(loading, ready_replicas=8), replace(loading, last_scale_up_at=NOW - 2 * 600 - 30)):
        d = decide(wants_wider, state, overloaded, RAILS, NOW)
        assert d.action is Action.RELAYOUT and d.rollout is not None and d.rollout.max_unavailable >= 1


def test_a_burst_with_a_queue_is_judged_against_what_arrives_not_the_queue():
    # The running pods fill the pool and carry 10% more than arrives on average; a burst reads 20% over
    # what they carry, with a queue. The demand's level counts that queue as demand and sits above the
    # burst's reading; judged against it, staying would queue for the hour and the pool would give pods
    # up. Judged against the arrivals' level, the burst passes and the pool stays.
    p = plan(request(2.0, pool=32), fresh(2.0), NOW)
    running, wider = Layout(4, 4, 8), Layout(4, 16, 8)
    carried = 8 * p.replica_peak_rps(running)
    mean, burst, waiting = carried / 1.1, 1.2 * carried, 500.0
    minutes = [NOW - 60.0 * (40 - i) for i in range(40)]
    arrivals = [DemandPoint(t, mean) for t in minutes]
    demand = [DemandPoint(t, mean + (waiting / 60.0 if i >= 20 else 0.0)) for i, t in enumerate(minutes)]
    look = outlook(burst + waiting / 60.0, demand, None, NOW, RAILS.model_load_seconds, arrivals)
    counted = outlook(burst + waiting / 60.0, demand, None, NOW, RAILS.model_load_seconds, demand).arrival_level
    assert counted is not None and counted > burst  # the level giving way used to read
    in_burst = replace(fresh(burst), ttft_p95_seconds=9.0, waiting=waiting)
    wants_wider = plan(request(2.0, pool=32), in_burst, NOW, look)
    wants_wider = replace(wants_wider, layout=wider, ranked=(wider,))
    assert wants_wider.sizing.level_rps is not None and abs(wants_wider.sizing.level_rps - mean) < 1e-6
    d = decide(wants_wider, PlannerState(applied=running), in_burst, RAILS, NOW)
    assert d.action is not Action.RELAYOUT
    # Arrivals that have held above what the pods carry still give way, queue or none.
    held = [DemandPoint(t, burst) for t in minutes]
    look = outlook(burst + waiting / 60.0, demand, None, NOW, RAILS.model_load_seconds, held)
    outgrown = replace(plan(request(2.0, pool=32), in_burst, NOW, look), layout=wider, ranked=(wider,))
    d = decide(outgrown, PlannerState(applied=running), in_burst, RAILS, NOW)
    assert d.action is Action.RELAYOUT and d.rollout is not None and d.rollout.max_unavailable >= 1


def test_giving_way_judges_the_dip_by_the_backlog_it_leaves():
    # Eight pods, two of them carrying the whole demand: shed six at once for a 900 s load and 3,600
    # requests queue, which the finished shape's 50% surplus clears in two more hours; staying queues
    # nothing. The linear view (the dip's unserved share, 0.75 of one load) missed that.
    running, proposed = Layout(4, 8, 8), Layout(4, 16, 8)
    demand = Demand(8 * 1.0)
    staying = queued_request_seconds(demand, [(8.0, 3600.0)], 3600.0)
    assert staying == 0.0
    assert giving_way(running, proposed, 32, 900.0, 1.0, 1.5, demand, staying_rps=8.0, horizon_s=3600.0) is None
    deep = queued_request_seconds(demand, [(2.0, 900.0), (12.0, 3600.0)], 4500.0)
    assert deep == pytest.approx(0.5 * 6 * 900**2 + 5400 * 5400 / 2 / 4)
    # Past the cliff the pods serve nothing to count on: the gentlest rollout that ends it goes.
    rollout = giving_way(running, proposed, 32, 900.0, 1.0, 1.5, demand, staying_rps=0.0, horizon_s=3600.0)
    assert rollout is not None and rollout.max_unavailable >= 1 and rollout.serving_share > 0


def test_giving_way_ends_within_the_horizon_its_demand_figures_vouch_for():
    # Nine TP4 pods fill a 36-GPU pool, overloaded by a step: a concurrency one higher carries 4% more a
    # pod, but one pod per 900 s load takes 135 minutes. Judged to an hour past that rollout's end, the
    # 4% outweighed the dip, as if the step were sure to last three hours; no rollout within the hour
    # pays for its dip, so the pool stays.
    running, proposed = Layout(4, 6, 9), Layout(4, 7, 9)
    demand = Demand(2.87, waiting=6.0)
    assert giving_way(running, proposed, 36, 900.0, 0.295, 0.306, demand, staying_rps=2.43, horizon_s=3600.0) is None
    # A shape that carries twice as much a pod still goes, by a rollout that ends within the hour.
    rollout = giving_way(running, proposed, 36, 900.0, 0.295, 0.6, demand, staying_rps=2.43, horizon_s=3600.0)
    assert rollout is not None and rollout.duration_s <= 3600.0


def test_giving_way_never_trades_a_full_pool_for_a_shape_that_carries_less():
    # TP8 x4 carries less than the TP4 x8 that runs: however overloaded, giving pods up for it adds the
    # dip to a shortfall the finished shape keeps for good.
    p = plan(request(2.0, pool=32), fresh(2.0), NOW)
    running, tp8 = Layout(4, 8, 8), Layout(8, 8, 4)
    assert 4 * p.replica_peak_rps(tp8) < 8 * p.replica_peak_rps(running)
    carried = 8 * p.replica_peak_rps(running)
    overloaded = replace(fresh(2.0 * carried), ttft_p95_seconds=9.0)
    d = decide(replace(p, layout=tp8, ranked=(tp8,)), PlannerState(applied=running), overloaded, RAILS, NOW)
    assert d.action is not Action.RELAYOUT


@settings(max_examples=200, deadline=None)
@given(old_tp=st.sampled_from([1, 2, 4, 8]), new_tp=st.sampled_from([1, 2, 4, 8]), pool=st.integers(8, 64),
       new_count=st.integers(1, 16), running_rps=st.floats(0.1, 4.0), new_rps=st.floats(0.1, 8.0),
       demand=st.floats(0.1, 40.0))
def test_giving_way_never_asks_past_the_pool_nor_leaves_nothing_serving(old_tp, new_tp, pool, new_count,
                                                                        running_rps, new_rps, demand):
    running = Layout(old_tp, 8, pool // old_tp)  # a full pool
    proposed = Layout(new_tp, 8, min(new_count, pool // new_tp))
    rollout = giving_way(running, proposed, pool, 600.0, running_rps, new_rps, Demand(demand), staying_rps=0.0,
                         horizon_s=3600.0)
    if rollout is None:
        return
    assert rollout.peak_gpus <= pool and rollout.max_unavailable >= 1 and rollout.serving_share > 0
    assert rollout.duration_s <= 3600.0
    assert rollout.target.same_shape(proposed) and rollout.target.replicas >= 1
    # The Deployment controller's own arithmetic, pod by pod: the rollout completes within the pool.
    old, ready, new = running.replicas, 0, 0
    count, surge, unavailable = rollout.target.replicas, rollout.max_surge, rollout.max_unavailable
    for _ in range(count):
        while True:  # one sync of the controller, to its fixed point
            grown = min(count, new + max(count + surge - old - new, 0))
            shrunk = min(old, max(count - unavailable - ready, 0))
            if (grown, shrunk) == (new, old):
                break
            new, old = grown, shrunk
        assert old * old_tp + new * new_tp <= pool  # no pod Pending
        assert old + ready > 0  # something serves while the new pods load
        ready = new  # a model load later
        if ready == count:
            break
    assert ready == count


def test_a_scale_up_mid_rollout_leaves_room_for_the_surge_pod():
    # 16 TP4 pods fill the 64-GPU pool, and the rollout's surge pod would stay Pending: stop at 15.
    p = plan(request(6.0), fresh(6.0), NOW)
    assert p.layout is not None and p.layout.tensor_parallel_size == 4 and p.layout.replicas >= 16
    rolling = PlannerState(applied=replace(p.layout, replicas=13), rolling_out=True)
    d = decide(p, rolling, fresh(6.0), RAILS, NOW)
    assert d.action is Action.SCALE_UP and d.target == replace(p.layout, replicas=15)
    d = decide(p, replace(rolling, applied=replace(p.layout, replicas=15)), fresh(6.0), RAILS, NOW)
    assert d.action is Action.HOLD and d.reason == "RolloutInProgress" and "surge pod" in d.message
    # Once the roll is over the pool is the limit again.
    d = decide(p, PlannerState(applied=replace(p.layout, replicas=13)), fresh(6.0), RAILS, NOW)
    assert d.action is Action.SCALE_UP and d.target == replace(p.layout, replicas=16)


def test_the_surge_uses_the_room_the_pool_has():
    # 8 TP8 pods fill a 64-GPU pool; the demand needs 3 of them, and the plan 6 TP4 pods. Old pods drop
    # to 6 at once (48 GPUs), so 4 TP4 pods start beside them, then the last 2: two loads, not six.
    rollout = plan_rollout(Layout(8, 17, 8), Layout(4, 24, 6), keep=3, pool_gpus=64, load_seconds=900)
    assert rollout is not None and rollout.target == Layout(4, 24, 6) and rollout.kept == 6
    assert rollout.max_surge == 4 and rollout.waves == 2 and rollout.duration_s == 1800
    assert rollout.peak_gpus == 6 * 8 + 4 * 4 <= 64
    # One pod at a time would have taken six loads; with every running pod kept the pool has no room at all.
    assert plan_rollout(Layout(8, 17, 8), Layout(4, 24, 6), keep=None, pool_gpus=64) is None
    # No pool bound: blue/green, every new pod at once.
    free = plan_rollout(Layout(4, 9, 15), Layout(8, 24, 6), pool_gpus=None, load_seconds=900)
    assert free is not None and free.max_surge == 15 and free.waves == 1


def test_a_full_pool_rolls_into_a_cheaper_shape_once_the_demand_needs_fewer_pods():
    """The held-out chat trace: the starting layout filled the pool with TP8 pods sized for a coding
    hint, the traffic needed a fraction of it, and every re-layout was refused for want of room. Now
    the running shape first drops to what the demand needs, which makes room, and the next cycle rolls
    into the cheaper shape within the pool."""
    p = plan(request(2.0), fresh(2.0), NOW)
    assert p.layout is not None and p.layout.tensor_parallel_size == 4
    running = Layout(8, 16, 8)  # 64 GPUs: the whole pool
    needed = p.sized(running)
    assert needed is not None and needed.replicas < 8
    state = PlannerState(applied=running, recent_recommendations=((NOW - 5000, needed.replicas),))
    first = decide(p, state, fresh(2.0), RAILS, NOW)
    assert first.action is Action.SCALE_DOWN and first.target == needed
    state = next_state(state, first, RAILS)
    later = NOW + 60
    second = decide(plan(request(2.0), fresh(2.0), later), state, fresh(2.0), RAILS, later)
    assert second.action is Action.RELAYOUT and second.rollout is not None
    assert second.target is not None and second.target.tensor_parallel_size == 4
    assert second.rollout.peak_gpus <= 64 and second.rollout.max_surge >= 2 and "wave" in second.message


@settings(max_examples=300, deadline=None)
@given(demand=st.floats(0.05, 12.0), tp=st.sampled_from((4, 8)), seqs=st.integers(4, 40), replicas=st.integers(1, 16),
       pool=st.sampled_from((16, 32, 48, 64)), remembered=st.lists(st.integers(1, 16), max_size=3),
       rolling=st.booleans())
def test_no_decision_ever_asks_for_more_gpus_than_the_pool(demand: float, tp: int, seqs: int, replicas: int,
                                                            pool: int, remembered: list[int], rolling: bool) -> None:
    replicas = max(1, min(replicas, pool // tp))
    running = Layout(tp, seqs, replicas)
    p = plan(request(demand, pool), fresh(demand), NOW)
    state = PlannerState(applied=running, rolling_out=rolling,
                         recent_recommendations=tuple((NOW - 100 * i, r) for i, r in enumerate(remembered)))
    d = decide(p, state, fresh(demand), RAILS, NOW)
    if d.target is not None:
        assert d.target.gpus <= pool
    if d.rollout is not None:
        assert d.rollout.peak_gpus <= pool


def missing_the_slo(demand: float) -> Observation:
    """`fresh(demand)` with every TTFT quantile over the 3 s limit."""
    return replace(fresh(demand), ttft_p50_seconds=8.0, ttft_p95_seconds=9.0, ttft_p99_seconds=10.0)


def test_a_shape_that_fills_the_pool_can_still_be_left():
    # 16 TP4 c=5 pods fill the 64-GPU pool, and the stabilisation window remembers wanting all 16.
    # Keeping them all beside a surge pod never fits, so the pool's own shape would be kept for good
    # once it has to go. Missing the SLO, the rollout keeps what the demand measured now needs of it
    # instead, within the pool.
    p = plan(request(2.0), fresh(2.0), NOW)
    assert p.layout is not None and p.layout.gpus < 64
    running = Layout(4, 5, 16)
    needed_now = p.sized(running, over_line=True, demand_rps=fresh(2.0).demand_rate)
    assert needed_now is not None and needed_now.replicas < 16
    remembered = PlannerState(applied=running, recent_recommendations=((NOW - 100, 16),))
    d = decide(p, remembered, missing_the_slo(2.0), RAILS, NOW)
    assert d.action is Action.RELAYOUT and d.rollout is not None
    assert d.rollout.peak_gpus <= 64 and d.rollout.kept >= needed_now.replicas
    # With room for one more pod of what runs, nothing is shed: every remembered pod is kept.
    roomy = replace(p, sizing=replace(p.sizing, pool_gpus=68))
    d = decide(roomy, remembered, missing_the_slo(2.0), RAILS, NOW)
    assert d.action is not Action.RELAYOUT or (d.rollout is not None and d.rollout.kept == 16)


def test_a_move_for_cost_alone_sheds_no_pod_the_window_remembers():
    # The same full pool meeting the SLO: the cheaper shape would be rolled into by shedding the pods
    # the stabilisation window still wants, for a demand that may return during the model loads. It
    # waits instead, until the window forgets them: then the pods the demand needs are kept beside
    # the new ones, none given up before its replacement serves.
    p = plan(request(2.0), fresh(2.0), NOW)
    running = Layout(4, 5, 16)
    remembered = PlannerState(applied=running, recent_recommendations=((NOW - 100, 16),))
    d = decide(p, remembered, fresh(2.0), RAILS, NOW)
    assert d.action is Action.HOLD and d.reason is DecisionReason.RELAYOUT_WOULD_DROP_CAPACITY
    assert d.target is None and "cost alone" in d.message
    later = NOW + stabilization_window(RAILS) + 60  # the window has forgotten the 16
    now_seen = replace(fresh(2.0), sample_time=later - 5)
    # (Its rollout keeps 10 pods of c=5 serving, so it asks for 10 of c=8 where 8 carry the demand: an hour's
    # saving would not pay for the 2 more, the two hours' a shape is weighed over does.)
    d = decide(plan(request(2.0), now_seen, later), remembered, now_seen, RAILS, later)
    assert d.action is Action.RELAYOUT and d.rollout is not None and d.rollout.max_unavailable == 0
    needed_now = p.sized(running, over_line=True, demand_rps=now_seen.demand_rate)
    assert needed_now is not None and d.rollout.kept >= needed_now.replicas and d.rollout.peak_gpus <= 64


def _steady(rate: float, seconds: float) -> list[DemandPoint]:
    return [DemandPoint(NOW - seconds + t, rate) for t in range(0, int(seconds), 15)]


def test_a_cost_move_on_a_pool_its_own_shape_fills_sheds_only_the_headroom_once_the_forecast_is_settled():
    # A hint sized the running shape for another traffic: its own pods, with the burst headroom and
    # the window's memory, fill the pool, so it never scales down to make room, and a surge pod fits
    # beside none of them. Once the forecast's bursts read their whole window, the move keeps what the
    # forecast needs (and the window remembers) net of the headroom, none given up before its
    # replacement serves; while the forecast rests on the first minutes it keeps waiting.
    running = Layout(4, 5, 16)
    remembered = PlannerState(applied=running, recent_recommendations=((NOW - 100, 16),))
    rate = 3.2
    seen = fresh(rate)
    for seconds, settled in ((RAILS.model_load_seconds, False), (3 * RAILS.model_load_seconds, True)):
        look = outlook(rate, _steady(rate, seconds), None, NOW, RAILS.model_load_seconds, _steady(rate, seconds))
        p = plan(request(rate), seen, NOW, look)
        assert p.sizing.forecast_settled is settled
        assert p.layout is not None and not p.layout.same_shape(running) and p.layout.gpus < running.gpus
        needs = p.sized(running)
        assert needs is not None and needs.gpus >= 60  # no room beside its own pods and the window's 16
        d = decide(p, remembered, seen, LONG_PAYBACK, NOW)  # the kept pods' count pays back over hours
        if not settled:
            assert d.action is Action.HOLD and d.reason is DecisionReason.RELAYOUT_WOULD_DROP_CAPACITY
            continue
        assert d.action is Action.RELAYOUT and d.rollout is not None
        assert d.rollout.max_unavailable == 0 and d.rollout.peak_gpus <= 64
        forecast_needs = p.sized(running, demand_rps=p.demand_rps)
        assert forecast_needs is not None and d.rollout.kept >= forecast_needs.replicas
        assert d.rollout.kept >= int(16 * p.demand_rps / p.sizing.demand_rps) and d.rollout.kept < needs.replicas


def test_a_scale_up_mid_rollout_leaves_room_for_the_old_pods_of_another_tp():
    # 7 TP8 pods (56 GPUs) roll into TP4: a scale-up of the TP4 count while they still serve must leave
    # them their GPUs, or new pods stay Pending while the old ones wait for them: stalled for good. At the
    # rollout's surge of 2 no count above 7 fits; at a surge of 1, rendered with the scale-up, 8 does.
    p = plan(request(6.0), fresh(6.0), NOW)
    assert p.layout is not None and p.layout.tensor_parallel_size == 4 and p.layout.replicas >= 14
    rolling = PlannerState(applied=replace(p.layout, replicas=7), rolling_out=True, rollout_surge=2,
                           rolled_from=Layout(8, 6, 7))
    assert peak_gpus(Layout(8, 6, 7), replace(p.layout, replicas=8), 2) > 64
    d = decide(p, rolling, fresh(6.0), RAILS, NOW)
    assert d.action is Action.SCALE_UP and d.target == replace(p.layout, replicas=8) and d.max_surge == 1
    assert peak_gpus(Layout(8, 6, 7), d.target, d.max_surge) <= 64 and "maxSurge 1 (was 2)" in d.message
    d = decide(p, replace(rolling, applied=d.target, rollout_surge=1), fresh(6.0), RAILS, NOW)
    assert d.action is not Action.SCALE_UP and "surge pod" in d.message
    # The same count with old pods of the new TP leaves room for the surge pod only.
    same_tp = replace(rolling, rolled_from=replace(p.layout, max_num_seqs=p.layout.max_num_seqs + 1, replicas=7))
    d = decide(p, same_tp, fresh(6.0), RAILS, NOW)
    assert d.action is Action.SCALE_UP and d.target is not None and d.target.replicas > 7


def test_a_scale_up_mid_rollout_counts_the_old_pods_still_live_not_those_it_kept():
    # The 2-hour spike's seed 9: 5 TP8 pods rolled into TP4, two waves in, 3 of them still live. Judged on the 5
    # kept, a scale-up had one surge pod of room (the fleet met its step on 10 pods for a model load); the 2 old
    # pods gone freed 16 GPUs, and the Deployment reports what is left.
    p = plan(request(6.0), fresh(6.0), NOW)
    assert p.layout is not None and p.layout.tensor_parallel_size == 4 and p.layout.replicas >= 14
    kept = Layout(8, 14, 5)
    rolling = PlannerState(applied=replace(p.layout, replicas=8), rolling_out=True, rollout_surge=3,
                           rolled_from=kept, last_relayout_at=NOW - 1600)
    judged_on_kept = decide(p, rolling, fresh(6.0), RAILS, NOW)
    assert judged_on_kept.target is not None and judged_on_kept.target.replicas <= 10
    assert peak_gpus(kept, judged_on_kept.target, judged_on_kept.max_surge or 3) <= 64
    d = decide(p, replace(rolling, old_pods=3), fresh(6.0), RAILS, NOW)
    assert d.action is Action.SCALE_UP and d.target is not None and d.target.replicas == 12
    surge = d.max_surge or 3
    assert peak_gpus(replace(kept, replicas=3), d.target, surge) <= 64  # never beyond the pool from here on
    assert peak_gpus(kept, d.target, surge) > 64  # what judging on the pods kept had refused
    # Every old pod gone: no surge pod is left to start, and only the pool bounds the count.
    d = decide(p, replace(rolling, old_pods=0), fresh(6.0), RAILS, NOW)
    assert d.action is Action.SCALE_UP and d.target is not None and 12 < d.target.replicas <= 64 // 4


def test_the_shape_rolled_from_survives_a_restart():
    from infertune.controller.status import state_from_status, state_to_status

    state = PlannerState(applied=Layout(4, 6, 7), last_relayout_at=NOW, rolled_from=Layout(8, 6, 7))
    assert state_from_status({"guardrails": state_to_status(state)}).rolled_from == Layout(8, 6, 7)
    d = decide(plan(request(2.0), fresh(2.0), NOW), PlannerState(applied=Layout(4, 5, 16),
               recent_recommendations=((NOW - 100, 16),)), missing_the_slo(2.0), RAILS, NOW)
    assert d.action is Action.RELAYOUT and d.rollout is not None
    after = next_state(PlannerState(applied=Layout(4, 5, 16)), d, RAILS)
    assert after.rolled_from == Layout(4, 5, d.rollout.kept)


def test_only_the_plans_own_choice_sheds_pods():
    # The pool is full of what runs; the plan's choice cannot be rolled into even by shedding pods,
    # and a next-best shape could be only by shedding them: it is not taken (it would trade one full
    # pool for another of a shape nobody chose).
    p = plan(request(2.0), fresh(2.0), NOW)
    running = Layout(4, 5, 16)
    chosen, next_best = Layout(8, 24, 8), replace(p.layout, replicas=9)
    ranked = replace(p, layout=chosen, ranked=(chosen, next_best))
    assert reachable(ranked, running, keep=16, keep_at_least=9) is None
    mine = replace(p, layout=next_best, ranked=(next_best,))
    assert reachable(mine, running, keep=16, keep_at_least=9) is not None


def test_a_rise_during_a_rollout_that_took_the_pools_room_is_still_served():
    # Random scenario 208: a move for cost rolled 5 old pods into 5 new ones of the same TP with a surge of 3,
    # every GPU of a 32-GPU pool, and the demand then rose 2.4x. Held at that surge, no scale-up fitted for the
    # rollout's 840 s and the fleet shrank to the 5 new pods as they became ready. The scale-up goes at a surge
    # the count leaves room for; the Deployment keeps the old pods the higher count needs meanwhile.
    p = plan(request(2.0, pool=32), fresh(2.0), NOW)
    assert p.layout is not None and p.layout.tensor_parallel_size == 4 and p.layout.replicas >= 7
    old = replace(p.layout, max_num_seqs=p.layout.max_num_seqs - 2, replicas=5)
    rolling = PlannerState(applied=replace(p.layout, replicas=5), rolling_out=True, rollout_surge=3, rolled_from=old,
                           last_relayout_at=NOW - 30)
    d = decide(p, rolling, fresh(2.0), RAILS, NOW)
    assert d.action is Action.SCALE_UP and d.target == replace(p.layout, replicas=7) and d.max_surge == 1
    assert (d.target.replicas + d.max_surge) * 4 <= 32  # never beyond the pool, Pending pods included
    # What runs after it: the Deployment's new strategy, read back; a count past the pool's one surge pod waits.
    d = decide(p, replace(rolling, applied=d.target, rollout_surge=1), fresh(2.0), RAILS, NOW + 60)
    assert d.action is Action.HOLD and d.reason == "RolloutInProgress"
