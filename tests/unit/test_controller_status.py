"""The status pieces the timer writes: Ready from the workload's rollout, CacheHeadroom from the cliff
early warning, the observed figures that carry the warning's headroom and time to the cliff, and the
guardrails' memory read back."""

from __future__ import annotations

import math

import pytest

from infertune.api.observation import MetricsFault, Observation
from infertune.controller.status import (
    WorkloadState,
    demand_figures,
    headroom_condition,
    observed,
    ready_condition,
    state_from_status,
)
from infertune.model.early_warning import CliffReason, CliffWarning, PressurePoint, cliff_warning
from infertune.model.forecast import DemandPoint, outlook
from infertune.planner.types import SloTarget

OBS = Observation(namespace="ns", deployment="d", sample_time=1000.0, available=True, kv_usage=0.5, running=4.0)


def test_ready_needs_every_desired_replica_ready() -> None:
    assert ready_condition(WorkloadState(desired=4, ready=4), applied=True).status == "True"
    rolling = ready_condition(WorkloadState(desired=4, ready=2), applied=True)
    assert (rolling.status, rolling.reason, rolling.message) == ("False", "ReplicasNotReady", "2/4 replicas ready")


def test_ready_waits_for_the_workload_controller_to_catch_up() -> None:
    stale = WorkloadState(desired=2, ready=2, current=False)  # status from before the last apply
    assert ready_condition(stale, applied=True).status == "False"
    assert ready_condition(None, applied=True).reason == "WorkloadPending"
    assert ready_condition(None, applied=False).reason == "FirstVisit"


def test_workload_state_reads_a_deployment() -> None:
    deployment = {"metadata": {"generation": 3}, "spec": {"replicas": 3},
                  "status": {"observedGeneration": 2, "readyReplicas": 3, "updatedReplicas": 1}}
    state = WorkloadState.from_object(deployment)
    assert (state.desired, state.ready, state.updated, state.current) == (3, 3, 1, False)
    assert WorkloadState.from_object({"spec": {"replicas": 1}}).ready == 0  # no status yet: none ready


def test_a_deployment_is_mid_rollout_while_pods_of_an_older_template_live() -> None:
    def deployment(status: dict[str, object]) -> WorkloadState:
        return WorkloadState.from_object({"spec": {"replicas": 10}, "status": status})

    # Two waves into a re-layout: 3 old pods serve beside 10 new ones, 7 of them ready. updatedReplicas
    # (10) is no longer below readyReplicas (10): only the pods of each template say old pods still serve.
    rolling = deployment({"replicas": 13, "updatedReplicas": 10, "readyReplicas": 10})
    assert rolling.mid_rollout and rolling.old_pods == 3
    done = deployment({"replicas": 10, "updatedReplicas": 10, "readyReplicas": 8})  # a scale-up loading
    assert not done.mid_rollout and done.old_pods == 0
    # Ready waits for the rollout's end, not for as many ready pods as desired: old ones count among them.
    ready = ready_condition(rolling, applied=True)
    assert (ready.status, ready.reason, ready.message) == (
        "False", "RollingOut", "10/10 replicas ready, 3 pod(s) of the layout before still serve")
    assert ready_condition(deployment({"replicas": 10, "updatedReplicas": 10, "readyReplicas": 10}),
                           applied=True).status == "True"
    # Read before the controller has seen the new template, every old pod still counts as updated.
    stale = WorkloadState.from_object({"metadata": {"generation": 4}, "spec": {"replicas": 10},
                                       "status": {"observedGeneration": 3, "replicas": 8, "updatedReplicas": 8,
                                                  "readyReplicas": 8}})
    assert stale.old_pods is None
    # Without a pod count, the ready pods still tell a rollout's start; a count that is not one is not read.
    assert deployment({"updatedReplicas": 2, "readyReplicas": 8}).mid_rollout
    for garbage in ("13", -1, 2.5, True, None):
        state = deployment({"replicas": garbage, "updatedReplicas": 10, "readyReplicas": 10})
        assert state.old_pods is None and not state.mid_rollout
        assert deployment({"readyReplicas": garbage}).ready == 0  # read as none ready, not a traceback


@pytest.mark.parametrize(("usages", "preemptions", "status", "reason"), [
    ([0.30, 0.30, 0.30, 0.30], 0.0, "True", "HeadroomOK"),
    ([0.50, 0.56, 0.62, 0.68], 0.0, "False", "ApproachingCliff"),  # 0.2%/s: the cliff in ~160 s
    ([0.93, 0.93, 0.93, 0.93], 0.0, "False", "ApproachingCliff"),  # above the 90% line, flat
    ([0.60, 0.60, 0.60, 0.60], 0.5, "False", "Preempting"),
    ([0.95, 0.97, 0.985, 0.99], 0.0, "False", "PastCliff"),  # the gauge tops out below 1.0
])
def test_cache_headroom_follows_the_early_warning(usages: list[float], preemptions: float, status: str,
                                                 reason: str) -> None:
    points = [PressurePoint(1000.0 + 30 * i, u) for i, u in enumerate(usages)]
    warning = cliff_warning(points, 1090.0, preemptions)
    condition = headroom_condition(OBS, warning)
    assert (condition.status, condition.reason) == (status, reason)


def test_no_trusted_metrics_means_unknown_headroom_not_ok() -> None:
    faulted = Observation(namespace="ns", deployment="d", sample_time=1000.0, available=False,
                          fault=MetricsFault.TIMEOUT)
    warning = CliffWarning(0.5, math.inf, CliffReason.OK, "fine")
    assert headroom_condition(faulted, warning).status == "Unknown"
    assert headroom_condition(OBS, None).status == "Unknown"


def test_observed_figures_carry_headroom_and_time_to_cliff() -> None:
    warning = CliffWarning(0.32, 412.4, CliffReason.APPROACHING, "rising")
    figures = observed(OBS, SloTarget(), warning)
    assert figures["kvHeadroomPercent"] == 32 and figures["timeToCliffSeconds"] == 412
    calm = observed(OBS, SloTarget(), CliffWarning(0.7, math.inf, CliffReason.OK, "fine"))
    assert "timeToCliffSeconds" not in calm  # not approaching: absent, not a huge number


@pytest.mark.parametrize("left", [
    {"tensorParallelSize": 4, "maxNumSeqs": 13, "streamTokens": float("nan"), "at": 1.0},
    {"tensorParallelSize": 4, "maxNumSeqs": 13, "streamTokens": -5.0, "at": 1.0},
    {"tensorParallelSize": 0, "maxNumSeqs": 13, "streamTokens": 51_000.0, "at": 1.0},
    {"tensorParallelSize": 4, "maxNumSeqs": 13, "streamTokens": "lots", "at": 1.0},
    {"tensorParallelSize": 4, "maxNumSeqs": 13, "at": float("inf")},
    "TP4 c=13",
])
def test_a_shape_left_as_unsafe_that_status_garbles_is_forgotten_not_trusted(left: object) -> None:
    """An edited or garbled status.guardrails.leftUnsafe loses that memory (the working set is then judged on
    what the history measures) and keeps the rest of the guardrails' state."""
    state = state_from_status({"guardrails": {"leftUnsafe": left, "lastRelayoutAt": 100.0}})
    assert state.left_unsafe is None and state.last_relayout_at == 100.0


def test_the_status_shows_the_highest_demand_read_within_the_last_load():
    """What a move for cost is judged at besides the figure sized for (planner/relayout_checks.py), in
    status.recommendation.demand, as the CRD describes it."""
    figures = demand_figures(outlook(0.8, [DemandPoint(9_500.0, 1.6), DemandPoint(9_900.0, 0.7)], None, 10_000.0,
                                     900.0))
    assert figures["currentRps"] == 0.8 and figures["recentPeakRps"] == 1.6
    nothing_else = demand_figures(outlook(0.8, [], None, 10_000.0, 900.0))
    assert nothing_else["recentPeakRps"] == 0.8
