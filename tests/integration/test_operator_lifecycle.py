"""The real kopf operator against kmock's Kubernetes emulator: applying a resource creates the
workload and every condition; the modes; multi-node; invalid specs; conflicts and restarts."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import kmock
import kopf
import pytest
import yaml

from infertune.actuate.apply import client_from_environment
from infertune.api.observation import Observation
from infertune.controller import OperatorContext, build_registry
from infertune.observe.snapshot import Snapshot

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]
ROOT = Path(__file__).resolve().parents[2]
INFD = "infertune.io/v1alpha1/inferencedeployments"
SVPOL = "infertune.io/v1alpha1/servingpolicies"
DEPLOY = "apps/v1/deployments"
SERVICE = "v1/services"
LWS = "leaderworkerset.x-k8s.io/v1/leaderworkersets"
NS = "inference"


@dataclass
class ScriptedSource:
    """A MetricsSource whose snapshot the test sets: the poller, not Prometheus, is under test here
    (the observe suite runs the real Prometheus); this feeds the timer a known Observation."""

    name: str = "scripted"
    observations: dict[tuple[str, str], Observation] = field(default_factory=dict)

    def poll(self, expected: Any = None, now: float | None = None) -> Snapshot:
        return Snapshot(time=now or time.time(), observations=dict(self.observations), source=self.name)

    def close(self) -> None:
        pass


def declare(emulator: Any) -> None:
    info = kmock.ResourceInfo
    verbs = {"get", "list", "watch", "create", "patch", "delete"}
    emulator.resources[INFD] = info(kind="InferenceDeployment", namespaced=True, verbs=verbs,
                                    subresources={"status", "scale"}, shortnames={"infd"})
    emulator.resources[SVPOL] = info(kind="ServingPolicy", namespaced=False, verbs=verbs, shortnames={"svpol"})
    emulator.resources[DEPLOY] = info(kind="Deployment", namespaced=True, verbs=verbs, subresources={"status"})
    emulator.resources[SERVICE] = info(kind="Service", namespaced=True, verbs=verbs)
    emulator.resources[LWS] = info(kind="LeaderWorkerSet", namespaced=True, verbs=verbs, subresources={"status"})
    emulator.resources["v1/configmaps"] = info(kind="ConfigMap", namespaced=True, verbs=verbs)
    emulator.resources["v1/events"] = info(kind="Event", namespaced=True, verbs=verbs)
    # kopf's backbone: it discovers CRDs and namespaces before it starts watching anything.
    emulator.resources["apiextensions.k8s.io/v1/customresourcedefinitions"] = info(
        kind="CustomResourceDefinition", namespaced=False, verbs=verbs)
    emulator.resources["v1/namespaces"] = info(kind="Namespace", namespaced=False, verbs=verbs)


@contextlib.asynccontextmanager
async def operator(emulator: Any, source: Any = None, **settings: Any) -> AsyncIterator[OperatorContext]:
    ctx = OperatorContext(kube=client_from_environment(host=str(emulator.url).rstrip("/")), source=source,
                          **{"poll_seconds": 0.1, "cycle_seconds": 0.5, **settings})
    registry = build_registry(cycle_seconds=0.5)

    @kopf.on.login(registry=registry)
    def login(**_: Any) -> kopf.ConnectionInfo:
        return kopf.ConnectionInfo(server=str(emulator.url).rstrip("/"), insecure=True)

    # At exit kopf gives every task of the loop it did not find at startup 5 s to end (run_tasks' "hung"
    # tasks), and the emulator's handler of a keep-alive connection is such a task until its client hangs
    # up: 5 s of nothing at every stop. The test's own client connects now, before kopf starts; the
    # operator's Kubernetes client hangs up as the operator stops (below), as a stopped process's would.
    async with emulator.get("/version") as warm:
        await warm.read()
    stop, ready = asyncio.Event(), asyncio.Event()
    task = asyncio.create_task(kopf.operator(registry=registry, clusterwide=True, standalone=True,
                                             memo=kopf.Memo(ctx=ctx), stop_flag=stop, ready_flag=ready))
    await asyncio.wait_for(ready.wait(), 10)
    try:
        yield ctx
    finally:
        stop.set()
        deadline = time.monotonic() + 10
        while not task.done() and time.monotonic() < deadline:
            # Closes only idle pooled connections; one in flight finishes and is then discarded.
            ctx.kube.api.rest_client.pool_manager.clear()
            await asyncio.wait({task}, timeout=0.05)
        await asyncio.wait_for(task, max(0.0, deadline - time.monotonic()))


def resource(path: str = "examples/kimi-k2.6-b200.yaml", **tuning: Any) -> dict[str, Any]:
    doc = yaml.safe_load((ROOT / path).read_text())
    doc["spec"]["tuning"] = {**doc["spec"].get("tuning", {}), "interval": "1s", **tuning}
    doc["spec"].pop("metrics", None)  # read the operator's default source: the test's scripted one
    # The emulator assigns none of these; kopf needs them to patch.
    doc["metadata"] |= {"uid": "uid-" + doc["metadata"]["name"], "resourceVersion": "1", "generation": 1}
    return doc


async def post(emulator: Any, obj: dict[str, Any], plural: str) -> None:
    ns = obj["metadata"].get("namespace")
    group_version = plural.rsplit("/", 1)[0]
    base = f"/api/{group_version}" if group_version == "v1" else f"/apis/{group_version}"
    url = f"{base}/namespaces/{ns}/{plural.rsplit('/', 1)[1]}" if ns else f"{base}/{plural.rsplit('/', 1)[1]}"
    async with emulator.post(url, json=obj) as response:
        assert response.status < 300, await response.text()


async def post_policies(emulator: Any) -> None:
    for path in sorted((ROOT / "policies").glob("*.yaml")):
        doc = yaml.safe_load(path.read_text())
        doc["metadata"] |= {"uid": "uid-" + doc["metadata"]["name"], "resourceVersion": "1"}
        await post(emulator, doc, SVPOL)


def stored(emulator: Any, plural: str, name: str, ns: str | None = NS) -> dict[str, Any] | None:
    group_version, _, resource_plural = plural.rpartition("/")
    group, _, version = group_version.rpartition("/")
    key = (kmock.resource(group=group, version=version, plural=resource_plural), ns, name)
    obj = dict(emulator.objects.items()).get(key)
    if obj is None or obj.deleted:
        return None
    return copy.deepcopy(dict(obj.raw))


async def eventually(probe: Callable[[], Any], timeout: float = 15.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.05)


async def report_ready(emulator: Any, name: str, ready: int, ns: str = NS, plural: str = DEPLOY) -> None:
    """Plays the workload's controller: the emulator runs none, so nothing else writes its status."""
    workload = stored(emulator, plural, name, ns)
    assert workload is not None
    status = {"observedGeneration": workload["metadata"].get("generation", 1),
              # Every pod of the one template it runs, `ready` of them ready (no rollout in progress).
              "replicas": workload["spec"]["replicas"], "updatedReplicas": workload["spec"]["replicas"],
              "readyReplicas": ready,
              "availableReplicas": ready}
    group_version, _, resource_plural = plural.rpartition("/")
    async with emulator.patch(f"/apis/{group_version}/namespaces/{ns}/{resource_plural}/{name}/status",
                              json={"status": status}, headers={"Content-Type": "application/merge-patch+json"}) as r:
        assert r.status < 300, await r.text()


def condition(obj: dict[str, Any] | None, kind: str) -> dict[str, Any] | None:
    for c in ((obj or {}).get("status") or {}).get("conditions", []):
        if c["type"] == kind:
            return c
    return None


def args_of(deployment: dict[str, Any]) -> list[str]:
    return deployment["spec"]["template"]["spec"]["containers"][0]["args"]


def flag(args: list[str], name: str) -> str:
    return args[args.index(name) + 1]


async def test_applying_a_resource_creates_the_workload_and_every_condition(kmock: Any) -> None:
    declare(kmock)
    await post_policies(kmock)
    async with operator(kmock):
        await post(kmock, resource(), INFD)
        deployment = await eventually(lambda: stored(kmock, DEPLOY, "kimi-k2"))
        service = await eventually(lambda: stored(kmock, SERVICE, "kimi-k2"))
        infd = await eventually(lambda: condition(stored(kmock, INFD, "kimi-k2"), "Ready")
                                and stored(kmock, INFD, "kimi-k2"))
        types = {c["type"]: c["status"] for c in infd["status"]["conditions"]}
        assert set(types) >= {"Ready", "SLOMet", "CacheHeadroom", "MetricsAvailable", "Progressing", "InvalidSpec"}
        assert types["InvalidSpec"] == "False"
        assert types["MetricsAvailable"] == "Unknown"  # no metrics yet: unknown, not zero
        assert infd["status"]["observedGeneration"] == 1
        # Applied is not ready: Ready waits for the Deployment's ready replicas, as `kubectl wait` would.
        assert condition(infd, "Ready")["status"] == "False"
        assert condition(infd, "Ready")["reason"] in {"WorkloadPending", "ReplicasNotReady"}
        await report_ready(kmock, "kimi-k2", ready=1)
        ready = await eventually(lambda: (c := condition(stored(kmock, INFD, "kimi-k2"), "Ready"))
                                 and c["status"] == "True" and c)
    assert ready["reason"] == "WorkloadReady" and ready["message"] == "1/1 replicas ready"
    args = args_of(deployment)
    applied = infd["status"]["applied"]
    assert flag(args, "--tensor-parallel-size") == str(applied["tensorParallelSize"])
    assert flag(args, "--max-num-seqs") == str(applied["maxNumSeqs"])
    assert deployment["spec"]["replicas"] == applied["replicas"]
    gpus = deployment["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"]
    assert gpus == str(applied["tensorParallelSize"])
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert deployment["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert service["spec"]["selector"].items() <= labels.items()
    for obj in (deployment, service):
        (ref,) = obj["metadata"]["ownerReferences"]
        assert (ref["kind"], ref["name"], ref["uid"], ref["controller"]) == (
            "InferenceDeployment", "kimi-k2", "uid-kimi-k2", True)
