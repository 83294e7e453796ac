"""The benchmark's actuator on a pool of GPUs: a pod with no room stays Pending, serves nothing,
costs nothing, and starts (in creation order) once room appears; every policy gets at most the pool."""

from __future__ import annotations

from infertune.planner.types import Layout
from infertune_lab.bench.actuation import Actuator
from infertune_lab.bench.cases import BenchCase
from infertune_lab.bench.metrics import Slo
from infertune_lab.bench.policies import Static
from infertune_lab.bench.runner import RunSetup, run_policy
from infertune_lab.sim import Fleet, ReplicaConfig, TraceReplay
from infertune_lab.sim.scenario import Phase, Scenario
from infertune_lab.sim.trace import TraceRow
from infertune_lab.sim.traffic import CODING_AGENT

LOAD = 100.0


def actuator(pool: int) -> Actuator:
    return Actuator(Fleet(None), ReplicaConfig(num_gpu_blocks=10_000), LOAD, pool_gpus=pool)


def placed(act: Actuator) -> list[str]:
    return sorted(r.name for r in act.serving())


def test_pods_beyond_the_pool_stay_pending_and_cost_nothing() -> None:
    act = actuator(pool=16)
    act.start(Layout(4, 8, 2))
    act.apply(Layout(4, 8, 6))  # asks for 24 GPUs of 16
    assert act.held_gpus() == 16
    assert len(act.serving()) == 4 and len(act.pending) == 2
    assert len(act.pods()) == 6  # the Deployment has six pods, two of them Pending
    act.account(60.0)
    assert act.gpu_seconds == 16 * 60.0  # Pending pods hold no GPU
    assert act.timeline[-1].gpus == 16 and act.timeline[-1].pending_gpus == 8
    assert act.timeline[-1].asked_gpus == 24
    act.fleet.run_until(10 * LOAD)
    act.reconcile()
    assert len(act.pending) == 2  # no room appeared: they never load, never serve
    assert sum(act.ready(r) for r in act.serving()) == 4


def test_pending_pods_start_loading_in_creation_order_when_room_appears() -> None:
    act = actuator(pool=16)
    act.start(Layout(4, 8, 4))  # the pool is full
    act.apply(Layout(4, 8, 6))
    first, second = (p.name for p in act.pending)
    # Another workload's share of the pool is not modelled; here room appears as the pool grows.
    act.pool_gpus = 20
    act.fleet.run_until(50.0)
    act.reconcile()
    assert first in placed(act) and second not in placed(act)
    loading = act.fleet.replicas[first]
    assert loading.ready_at == 50.0 + LOAD  # its load starts when it is placed, not when created
    assert not act.ready(loading)


def test_a_scale_down_deletes_pending_pods_first() -> None:
    act = actuator(pool=16)
    act.start(Layout(4, 8, 4))
    act.apply(Layout(4, 8, 6))
    before = placed(act)
    act.apply(Layout(4, 8, 5))
    assert placed(act) == before and len(act.pending) == 1  # the newest Pending pod went
    act.apply(Layout(4, 8, 3))
    assert not act.pending and len(act.serving()) == 3


def test_a_draining_pod_holds_its_gpus_until_it_is_gone() -> None:
    act = Actuator(Fleet(TraceReplay([TraceRow(0.0, 1_000, 300)])), ReplicaConfig(num_gpu_blocks=10_000), LOAD,
                   pool_gpus=8)
    act.start(Layout(8, 16, 1))
    act.fleet.run_until(0.5)  # the one request is in flight on the TP8 pod
    act.apply(Layout(8, 16, 0))
    assert act.held_gpus() == 8 and not act.serving()  # draining: no longer a pod, still on its GPUs
    act.apply(Layout(4, 8, 2))
    assert len(act.pending) == 2  # the TP4 pods wait for the draining pod's GPUs
    act.fleet.run_until(600.0)  # the request finishes and the drained pod leaves
    act.reconcile()
    assert not act.pending and sorted(r.config.tp for r in act.serving()) == [4, 4]


def test_a_draining_pod_is_gone_at_the_end_of_its_grace_whatever_it_still_holds() -> None:
    """A pod with a queue longer than its termination grace period leaves when the kubelet kills
    it; the pods waiting for its GPUs start then, and its queue is served by them."""
    rows = [TraceRow(i * 0.01, 1_000, 3_000) for i in range(64)]
    act = Actuator(Fleet(TraceReplay(rows)), ReplicaConfig(num_gpu_blocks=10_000, max_num_seqs=2), LOAD,
                   pool_gpus=8, grace_seconds=120.0)
    act.start(Layout(8, 2, 1))
    act.fleet.run_until(1.0)
    act.apply(Layout(8, 2, 0))
    act.apply(Layout(4, 8, 2))
    act.fleet.run_until(119.0)
    act.reconcile()
    assert len(act.pending) == 2  # still draining: 64 answers of 3,000 tokens through two slots
    act.fleet.run_until(122.0)
    act.reconcile()
    assert not act.pending and act.held_gpus() == 8  # killed at 121 s; the TP4 pods load
    act.fleet.run_until(5_000.0)
    assert len(act.fleet.records) == len(rows)  # its queue was sent again, not lost


def test_a_policy_that_asks_for_more_than_the_pool_gets_only_the_pool() -> None:
    """Static asks for 20 TP4 replicas (80 GPUs) on a 64-GPU pool: it runs 16, pays for 64 GPUs,
    and its result says so."""
    shape = CODING_AGENT
    case = BenchCase("flat", 600.0, seed=1, scenario=Scenario("flat", 600.0, shape, (Phase(0.0, 0.01),)),
                     warmup=0.0)
    setup = RunSetup(case, ReplicaConfig(model="kimi-k2.6", gpu="b200"), 60.0, Slo(3.0, 25.0), 6.0, pool_gpus=64)
    result = run_policy(setup, Static(Layout(4, 8, 20))).result
    assert result.peak_gpus == 64
    assert result.peak_pending_gpus == 16
    assert result.gpu_hours == 64 * 600.0 / 3600


def _rolls_within_the_pool(act: Actuator, target: Layout, surge: int, unavailable: int, loads: int) -> None:
    """Applies the strategy and runs `loads` model loads: never a Pending pod, never more than the pool,
    never nothing ready; at the end only the target's pods serve."""
    act.apply(target, surge, unavailable)
    t = 0.0
    while t < loads * LOAD:
        assert not act.pending and act.held_gpus() <= act.pool_gpus
        assert any(act.ready(r) for r in act.serving())
        t += LOAD / 4
        act.fleet.run_until(t)
        act.reconcile()
    shapes = {(r.config.tp, r.config.max_num_seqs) for r in act.serving()}
    assert shapes == {(target.tensor_parallel_size, target.max_num_seqs)}
    assert len(act.serving()) == target.replicas


def test_a_rollout_that_gives_way_completes_within_a_full_pool() -> None:
    """TP4 x8 fills 32 GPUs; TP8 x4 has no maxUnavailable-0 rollout there. With the strategy the
    planner renders for it (planner/rollout.py, giving_way), the bench's Deployment controller rolls
    it without a Pending pod and without ever leaving nothing serving."""
    from infertune.planner.rollout import Demand, giving_way

    running, proposed = Layout(4, 8, 8), Layout(8, 8, 4)
    rollout = giving_way(running, proposed, 32, LOAD, 1.0, 2.5, Demand(6.0), staying_rps=0.0, horizon_s=3600.0)
    assert rollout is not None and rollout.max_unavailable >= 1
    act = actuator(pool=32)
    act.start(running)
    _rolls_within_the_pool(act, rollout.target, rollout.max_surge, rollout.max_unavailable, rollout.waves + 2)


def test_max_unavailable_alone_moves_a_rollout() -> None:
    """maxSurge 0, maxUnavailable 1 at the same count: only the old pods the controller may give up
    make room, one at a time (with maxUnavailable ignored nothing would ever start)."""
    act = actuator(pool=32)
    act.start(Layout(4, 8, 8))
    _rolls_within_the_pool(act, Layout(4, 6, 8), surge=0, unavailable=1, loads=8 + 2)


def test_the_hinted_start_bound_moves_once_at_its_time_and_rolls_within_the_full_pool() -> None:
    """bench_hinted_start's move-once: the start serves until the move's time, then one re-layout rolls
    a pod at a time on the full pool (no surge pod to stay Pending) and ends on the new shape; later
    ticks change nothing."""
    from infertune_lab.bench.policies import MoveOnce

    start, then = Layout(4, 6, 8), Layout(4, 18, 8)
    policy = MoveOnce(start, then, at=60.0, max_unavailable=1)
    act = actuator(pool=32)
    act.start(policy.start())
    policy.tick(30.0, act)
    assert act.target == start and act.relayouts == 0
    t = 60.0
    while t < 60.0 + (then.replicas + 2) * LOAD:
        act.fleet.run_until(t)
        policy.tick(t, act)
        act.reconcile()
        assert not act.pending and act.held_gpus() <= 32
        assert sum(act.ready(r) for r in act.serving()) >= then.replicas - 1  # one pod given up at a time
        t += LOAD / 4
    assert act.target == then and act.relayouts == 1
    assert {(r.config.tp, r.config.max_num_seqs) for r in act.serving()} == {(4, 18)}
    assert len(act.serving()) == then.replicas
