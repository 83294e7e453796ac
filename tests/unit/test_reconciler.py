"""The Reconciler on fake time with in-memory ports: what each mode does to the workload, what a
restart with a lost status write does, and what an invalid spec does. The same object runs under
kopf (tests/integration/test_operator_*.py) and in the benchmark."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from infertune.actuate.workload import WorkloadKind, layout_of_workload
from infertune.api.observation import Observation
from infertune.controller.hub import MetricsHub
from infertune.controller.memory import MemoryCluster, MemoryReport
from infertune.controller.reconciler import Reconciler, Resource
from infertune.errors import SpecError
from infertune.observe.snapshot import Snapshot
from infertune.planner.types import Layout

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = yaml.safe_load((ROOT / "examples/kimi-k2.6-b200.yaml").read_text())
POLICY = yaml.safe_load((ROOT / "policies/coding-agent.yaml").read_text())
KEY = ("inference", "kimi-k2")
START = 1_767_225_600.0


class Clock:
    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> float:
        return self.now


class World:
    """One resource, the reconciler and its in-memory ports, on a clock the test moves."""

    def __init__(self, mode: str = "Auto", paused: bool = False) -> None:
        self.clock = Clock()
        self.cluster = MemoryCluster({"coding-agent": POLICY["spec"]})
        self.hub = MetricsHub()
        self.reconciler = Reconciler(self.cluster, self.hub, self.clock)
        self.report = MemoryReport()
        self.spec: dict[str, Any] = copy.deepcopy(EXAMPLE["spec"])
        self.spec["tuning"]["mode"] = mode
        self.annotations = {"infertune.io/paused": "true"} if paused else {}

    def resource(self) -> Resource:
        return Resource(*KEY, uid="uid-1", spec=self.spec, status=self.report.current, generation=1,
                        annotations=self.annotations)

    def converge(self) -> Any:
        return self.reconciler.converge(self.resource(), self.report)

    def tune(self, after: float = 30.0) -> Any:
        self.clock.now += after
        return self.reconciler.tune(self.resource(), self.report)

    def observe(self, rate: float, ttft_p95: float = 1.0) -> None:
        """A healthy fleet serving `rate` requests/s of coding-agent traffic, seen just now."""
        obs = Observation(namespace=KEY[0], deployment=KEY[1], sample_time=self.clock.now, available=True,
                          running=4.0, waiting=0.0, kv_usage=0.4, mean_kv_usage=0.4, preemption_rate=0.0,
                          arrival_rate=rate, completion_rate=rate, mean_prompt_tokens=84_000,
                          mean_cached_tokens=71_000, mean_generated_tokens=1_000, ttft_p50_seconds=0.5,
                          ttft_p95_seconds=ttft_p95, ttft_p99_seconds=ttft_p95, mean_inter_token_seconds=0.02)
        source = self.hub.routes[KEY].source
        self.hub.ingest(source, Snapshot(time=self.clock.now, observations={KEY: obs}))

    def running(self) -> Layout | None:
        obj = self.cluster.objects.get((WorkloadKind.DEPLOYMENT.value, *KEY))
        return None if obj is None else layout_of_workload(obj)

    def condition(self, kind: str) -> dict[str, Any]:
        return next(c for c in self.report.current["conditions"] if c["type"] == kind)


def test_create_applies_the_starting_layout_and_sets_every_condition() -> None:
    world = World()
    converged = world.converge()
    assert converged.changed and world.running() == converged.layout
    kinds = sorted(obj["kind"] for obj in world.cluster.applied)
    assert kinds == ["Deployment", "Service"]
    assert {c["type"] for c in world.report.current["conditions"]} >= {"Ready", "SLOMet", "CacheHeadroom",
                                                                       "MetricsAvailable", "Progressing"}
    assert world.condition("Progressing")["status"] == "True"
    assert world.report.current["applied"]["replicas"] == converged.layout.replicas
    assert [e[1] for e in world.report.events] == ["WorkloadApplied"]


def test_resume_with_nothing_changed_applies_nothing() -> None:
    world = World()
    world.converge()
    applied, events = len(world.cluster.applied), len(world.report.events)
    assert not world.converge().changed
    assert len(world.cluster.applied) == applied and len(world.report.events) == events


def test_a_lost_status_write_never_rolls_the_workload_back() -> None:
    """The workload runs 4 replicas; the status that recorded it was lost and says 1. A restarted
    operator reads what runs from the workload itself."""
    world = World()
    world.converge()
    world.observe(rate=1.0)
    running = world.running()
    assert running is not None
    scaled = Layout(running.tensor_parallel_size, running.max_num_seqs, 4)
    from infertune.actuate.workload import Owner, desired_objects

    resolved = world.reconciler.resolve(world.resource())
    world.cluster.apply(desired_objects(Owner("kimi-k2", "inference", "uid-1"), resolved.spec, scaled, 8))
    world.report.current["applied"] = {**world.report.current["applied"], "replicas": 1}
    restarted = Reconciler(world.cluster, world.hub, world.clock)
    restarted.converge(world.resource(), world.report)
    assert world.running() == scaled
    assert world.report.current["applied"]["replicas"] == 4


def test_a_restart_mid_rollout_keeps_the_strategy_the_workload_rolls_with() -> None:
    """A rollout that gives way runs with maxSurge 0 and maxUnavailable 1 (planner/rollout.py). A
    restarted operator re-renders the workload with the strategy it reads back, not its default: a
    surge pod re-enabled on a full pool would stay Pending and stall the rollout."""
    from infertune.actuate.workload import Owner, desired_objects, rollout_strategy_of

    world = World()
    world.converge()
    running = world.running()
    assert running is not None
    resolved = world.reconciler.resolve(world.resource())
    world.cluster.apply(desired_objects(Owner("kimi-k2", "inference", "uid-1"), resolved.spec, running, 8,
                                        max_surge=0, max_unavailable=1))
    restarted = Reconciler(world.cluster, world.hub, world.clock)
    applied = len(world.cluster.applied)
    assert not restarted.converge(world.resource(), world.report).changed
    assert len(world.cluster.applied) == applied
    obj = world.cluster.objects[(WorkloadKind.DEPLOYMENT.value, *KEY)]
    assert rollout_strategy_of(obj) == (0, 1)


def test_a_cycle_runs_once_per_interval() -> None:
    world = World()
    world.converge()
    world.observe(rate=0.5)
    assert world.tune(after=30.0) is not None
    assert world.tune(after=10.0) is None  # spec.tuning.interval is 30 s
    assert world.tune(after=20.0) is not None


@pytest.mark.parametrize("mode", ["Auto", "Recommend", "Off"])
def test_each_mode_does_what_it_says_to_a_rising_demand(mode: str) -> None:
    world = World(mode)
    first = world.converge().layout
    world.observe(rate=4.0)  # far more than the starting replicas serve
    outcome = world.tune()
    recommended = world.report.current["recommendation"]
    assert recommended["replicas"] > first.replicas  # every mode says what it would do
    running = world.running()
    assert running is not None
    if mode == "Auto":
        assert outcome.apply is not None and running.replicas > first.replicas
        assert world.report.current["applied"]["replicas"] == running.replicas
    else:
        assert outcome.apply is None and running == first
        assert outcome.action == "Hold"


def test_a_paused_resource_is_left_as_it_runs() -> None:
    world = World()
    first = world.converge().layout
    world.annotations = {"infertune.io/paused": "true"}
    world.observe(rate=4.0)
    outcome = world.tune()
    assert outcome.apply is None and outcome.reason == "Paused"
    assert world.running() == first


def test_no_decision_without_metrics() -> None:
    world = World()
    first = world.converge().layout
    outcome = world.tune()
    assert outcome.apply is None and world.running() == first
    assert world.condition("MetricsAvailable")["status"] == "Unknown"


def test_an_invalid_spec_is_reported_and_changes_nothing() -> None:
    world = World()
    first = world.converge().layout
    applied = len(world.cluster.applied)
    world.spec["hardware"]["gpu"] = "a100-80gb-nonexistent"
    assert world.tune() is None
    assert world.condition("InvalidSpec")["status"] == "True"
    assert "spec.hardware.gpu" in world.condition("InvalidSpec")["message"]
    with pytest.raises(SpecError):
        world.converge()
    assert len(world.cluster.applied) == applied and world.running() == first
    assert [e for e in world.report.events if e[1] == "InvalidSpec"]


def test_a_name_no_service_can_take_is_reported_and_nothing_is_created() -> None:
    """Admitted by a CRD from before its name rule (or an API server that runs no CEL): the Service
    the operator would create under it is refused, so nothing is created and the condition says why."""
    world = World()
    with pytest.raises(SpecError, match="RFC 1035 label"):
        world.reconciler.converge(Resource("inference", "kimi.k2", uid="uid-2", spec=world.spec), world.report)
    assert world.cluster.applied == [] and world.condition("InvalidSpec")["status"] == "True"
    assert "metadata.name 'kimi.k2'" in world.condition("Ready")["message"]


def test_a_deleted_resource_leaves_no_series_on_the_operators_metrics() -> None:
    world = World()
    world.converge()
    world.observe(rate=0.5)
    world.tune()
    exposition = world.reconciler.telemetry.exposition()
    assert 'name="kimi-k2"' in exposition
    world.reconciler.forget(KEY)
    assert 'name="kimi-k2"' not in world.reconciler.telemetry.exposition()


def test_a_started_operator_learns_the_season_the_source_remembers() -> None:
    """The days of demand Prometheus remembered when first polled become the profile status keeps,
    before any cycle of the operator's own has seen them."""
    from infertune.model.forecast import DemandPoint

    world = World()
    world.converge()
    world.observe(rate=1.0)
    days = [DemandPoint(START - 2 * 86_400 + 900 * i, 1.0 + 3.0 * ((i // 4) % 24 >= 9)) for i in range(192)]
    world.hub.seed_demand(KEY, [], days)
    world.tune()
    profile = world.report.current["demandProfile"]
    assert sum(profile["dailySamples"]) >= 192 and max(profile["daily"]) > 3.0
    assert world.hub.take_season(KEY) == []  # taken once


def test_a_lower_burst_percentile_sizes_for_fewer_of_the_recent_bursts() -> None:
    """The same bursty half hour seen by two resources: a burst of 3x filling one of its eight demand bins
    (a quarter of the 900 s load each) is held by the default 98th percentile and left to queue at the
    80th, which recommends fewer replicas."""
    def half_hour(percentile: int | None) -> dict[str, Any]:
        world = World("Recommend")
        if percentile is not None:
            world.spec["tuning"]["burstPercentile"] = percentile
        world.converge()
        for poll in range(60):
            world.observe(rate=1.5 if 15 <= poll <= 22 else 0.5)
            world.tune()
        recommended: dict[str, Any] = world.report.current["recommendation"]
        return recommended

    default, lower = half_hour(None), half_hour(80)
    assert default["demand"]["burstRps"] >= 1.3 and lower["demand"]["burstRps"] <= 0.6
    assert lower["replicas"] < default["replicas"]
