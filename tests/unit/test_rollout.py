"""Re-layouts that keep the demand served while they roll: the count applied, the pool's fullest
moment, the shape chosen when the plan's own cannot be rolled into, and no scale-down mid-rollout."""

from __future__ import annotations

from dataclasses import replace

from infertune.api.observation import Observation
from infertune.model import load_gpu, load_model, workload_preset
from infertune.planner import Action, Guardrails, Layout, PlannerState, PlanRequest, SloTarget, decide, plan
from infertune.planner.rollout import peak_gpus, plan_rollout, reachable

RAILS = Guardrails(model_load_seconds=600, relayout_cooldown_s=1800)
NOW = 50_000.0


def request(demand: float, pool: int = 64) -> PlanRequest:
    uniform = replace(workload_preset("coding-agent"), context_cv=0.0)
    return PlanRequest(model=load_model("kimi-k2.6"), gpu=load_gpu("b200"), workload=uniform,
                       slo=SloTarget(25.0, 3.0), tp_sizes=(4, 8), concurrency_max=48, pool_gpus=pool,
                       replicas_max=64, demand_rps=demand)


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
    # In a pool with room for 12 TP8 pods the same re-layout goes ahead, at 12 until the roll is over.
    roomy = replace(wants_tp8, sizing=replace(wants_tp8.sizing, pool_gpus=256))
    d = decide(roomy, PlannerState(applied=running), fresh(2.0), RAILS, NOW)
    assert d.action is Action.RELAYOUT and d.target == Layout(8, 21, 12) and d.recommended == tp8
    assert "no running pod goes before a new one is ready" in d.message


def test_no_scale_down_and_no_new_relayout_while_old_pods_still_serve():
    p = plan(request(1.0), fresh(1.0), NOW)
    assert p.layout is not None
    rolled = replace(p.layout, replicas=p.layout.replicas + 6)
    state = PlannerState(applied=rolled, last_relayout_at=NOW - 3000, rolling_out=True)
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
