"""Restart and ordering safety of the Reconciler, on fake time with in-memory ports: a resource applied
before its ServingPolicy or ConfigMap waits and resumes; a deleted policy keeps governing with its last
known spec (across a restart too); an object infertune did not create is never adopted; and no lost
status write rolls a workload back."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from infertune.actuate.workload import WorkloadKind, layout_of_workload
from infertune.controller.memory import MemoryReport
from infertune.controller.reconciler import Reconciler
from infertune.errors import OwnershipError, PendingError
from tests.unit.test_hf_config import LLAMA_8B
from tests.unit.test_reconciler import KEY, POLICY, World


class LossyReport(MemoryReport):
    """A Report whose status writes are lost (the API server took the apply, then the operator died)."""

    def status(self, new: Any) -> None:
        pass


def test_a_resource_applied_before_its_policy_waits_and_then_resumes() -> None:
    world = World()
    world.cluster.policies.clear()
    with pytest.raises(PendingError):
        world.converge()
    ready, policy = world.condition("Ready"), world.condition("PolicyResolved")
    assert (ready["status"], ready["reason"]) == ("False", "PolicyNotFound")
    assert (policy["status"], policy["reason"]) == ("False", "PolicyNotFound")
    assert "coding-agent" in ready["message"] and "waiting" in ready["message"]
    assert world.condition("InvalidSpec")["status"] == "False"
    assert world.cluster.applied == [] and world.tune() is None
    world.cluster.policies["coding-agent"] = copy.deepcopy(POLICY["spec"])
    assert world.converge().changed and world.running() is not None
    assert world.condition("PolicyResolved")["status"] == "True"
    assert world.report.current["policy"]["name"] == "coding-agent"


def test_a_model_configmap_applied_after_the_resource_is_waited_for() -> None:
    world = World()
    world.spec["model"] = {"weights": "meta-llama/Llama-3.1-8B", "configMapRef": {"name": "llama"}}
    with pytest.raises(PendingError):
        world.converge()
    assert world.condition("Ready")["reason"] == "ConfigMapNotFound"
    assert world.condition("InvalidSpec")["status"] == "False"
    world.cluster.config_maps[(KEY[0], "llama")] = {"config.json": json.dumps(LLAMA_8B)}
    assert world.converge().changed


@pytest.mark.parametrize("restarted", [False, True], ids=["same-operator", "after-a-restart"])
def test_a_deleted_policy_keeps_governing_with_its_last_known_spec(restarted: bool) -> None:
    world = World()
    world.converge()
    world.observe(rate=0.5)
    assert world.tune() is not None
    slo = world.reconciler.resolve(world.resource()).request.slo
    del world.cluster.policies["coding-agent"]
    if restarted:
        world.reconciler = Reconciler(world.cluster, world.hub, world.clock)
    world.observe(rate=0.5)
    outcome = world.tune()
    assert outcome is not None  # still tuning, with the policy it had
    policy = world.condition("PolicyResolved")
    assert (policy["status"], policy["reason"]) == ("False", "PolicyDeleted") and "last known" in policy["message"]
    assert world.condition("InvalidSpec")["status"] == "False"
    assert world.reconciler.resolve(world.resource()).request.slo == slo
    world.cluster.policies["coding-agent"] = copy.deepcopy(POLICY["spec"])
    world.observe(rate=0.5)
    world.tune()
    assert world.condition("PolicyResolved")["status"] == "True"


def _foreign(world: World, owner: dict[str, Any] | None) -> dict[str, Any]:
    """A Deployment of the resource's name that somebody else created, labels and layout notes copied."""
    world.converge()
    ours = copy.deepcopy(world.cluster.objects[(WorkloadKind.DEPLOYMENT.value, *KEY)])
    world.cluster.objects.clear()
    ours["metadata"]["ownerReferences"] = [] if owner is None else [owner]
    ours["spec"]["replicas"] = 7
    world.cluster.objects[(WorkloadKind.DEPLOYMENT.value, *KEY)] = ours
    world.report = MemoryReport()
    world.reconciler = Reconciler(world.cluster, world.hub, world.clock)
    return copy.deepcopy(ours)


@pytest.mark.parametrize("owner", [None, {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "team-b",
                                          "uid": "uid-team-b", "controller": True}], ids=["no-owner", "another-owner"])
def test_an_object_infertune_did_not_create_is_never_adopted(owner: dict[str, Any] | None) -> None:
    world = World()
    foreign = _foreign(world, owner)
    with pytest.raises(OwnershipError):
        world.converge()
    ready = world.condition("Ready")
    assert (ready["status"], ready["reason"]) == ("False", "OwnershipConflict")
    assert "Deployment inference/kimi-k2" in ready["message"]
    assert world.cluster.objects == {(WorkloadKind.DEPLOYMENT.value, *KEY): foreign}  # untouched, no Service either
    assert [e[1] for e in world.report.events] == ["OwnershipConflict"]
    world.observe(rate=4.0)
    assert world.tune() is None and world.cluster.objects[(WorkloadKind.DEPLOYMENT.value, *KEY)] == foreign


def test_a_lost_status_write_after_a_scale_never_rolls_the_workload_back() -> None:
    """The timer scaled the workload up; the status write that recorded it was lost and the operator
    restarted: the next cycle reads what runs from the workload itself."""
    world = World()
    first = world.converge().layout
    world.observe(rate=4.0)
    world.reconciler.tune(world.resource(), LossyReport())  # applied, status lost
    world.clock.now += 30.0
    scaled = world.running()
    assert scaled is not None and scaled.replicas > first.replicas
    assert world.report.current["applied"]["replicas"] == first.replicas  # what status still says
    world.reconciler = Reconciler(world.cluster, world.hub, world.clock)
    world.observe(rate=4.0)
    world.converge()
    world.tune()
    assert world.running() is not None and world.running().replicas >= scaled.replicas  # type: ignore[union-attr]
    assert world.report.current["applied"]["replicas"] == world.running().replicas  # type: ignore[union-attr]
    assert all(layout_of_workload(obj) != first for obj in world.cluster.applied[-2:] if obj["kind"] == "Deployment")
