"""The operator scenarios against the real cluster in KUBECONFIG (opt in with `pytest --kube`).

Needs the CRDs installed (`kubectl apply -f crds/`) and rights to create namespaces. The operator
runs in-process, cluster-wide; each test uses its own namespace and deletes it afterwards. Unlike
the emulator, the API server validates (schema and CEL), assigns uids and resourceVersions, and
garbage-collects the owned objects through their owner references.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import kopf
import pytest
import yaml

from infertune.actuate.apply import KubeClient, client_from_environment
from infertune.controller import OperatorContext, build_registry
from infertune.errors import ApiError

pytestmark = [pytest.mark.kube, pytest.mark.timeout(180)]
ROOT = Path(__file__).resolve().parents[2]
API = "infertune.io/v1alpha1"


@pytest.fixture
def kube() -> KubeClient:
    return client_from_environment()


@pytest.fixture
def namespace(kube: KubeClient) -> Iterator[str]:
    name = f"infertune-e2e-{uuid.uuid4().hex[:6]}"
    kube._call("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    yield name
    kube._call("DELETE", f"/api/v1/namespaces/{name}")


@contextlib.asynccontextmanager
async def running(kube: KubeClient) -> AsyncIterator[None]:
    registry = build_registry(cycle_seconds=2.0)
    kopf.on.login(registry=registry)(kopf.login_via_client)
    stop, ready = asyncio.Event(), asyncio.Event()
    ctx = OperatorContext(kube=kube, cycle_seconds=2.0)
    task = asyncio.create_task(kopf.operator(registry=registry, clusterwide=True, standalone=True,
                                             memo=kopf.Memo(ctx=ctx), stop_flag=stop, ready_flag=ready))
    await asyncio.wait_for(ready.wait(), 30)
    try:
        yield
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)


def _doc(namespace: str, **tuning: Any) -> dict[str, Any]:
    doc = yaml.safe_load((ROOT / "examples/kimi-k2.6-b200.yaml").read_text())
    doc["metadata"]["namespace"] = namespace
    doc["spec"].pop("policyRef")
    doc["spec"]["tuning"] |= tuning
    return doc


async def _eventually(probe: Callable[[], Any], timeout: float = 60) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := await asyncio.to_thread(probe)):
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.5)
    return value


async def test_applying_a_resource_creates_an_owned_workload(kube: KubeClient, namespace: str) -> None:
    async with running(kube):
        kube.apply(_doc(namespace))
        deployment = await _eventually(lambda: kube.get("apps/v1", "Deployment", namespace, "kimi-k2"))
        infd = await _eventually(lambda: (o := kube.get(API, "InferenceDeployment", namespace, "kimi-k2"))
                                 and (o.get("status") or {}).get("applied") and o)
    assert deployment["metadata"]["ownerReferences"][0]["uid"] == infd["metadata"]["uid"]
    assert kube.get("v1", "Service", namespace, "kimi-k2") is not None
    types = {c["type"] for c in infd["status"]["conditions"]}
    assert types >= {"Ready", "SLOMet", "CacheHeadroom", "MetricsAvailable", "Progressing"}


async def test_recommend_mode_leaves_the_workload_alone(kube: KubeClient, namespace: str) -> None:
    async with running(kube):
        kube.apply(_doc(namespace, mode="Recommend"))
        first = await _eventually(lambda: kube.get("apps/v1", "Deployment", namespace, "kimi-k2"))
        await asyncio.sleep(6)
        later = kube.get("apps/v1", "Deployment", namespace, "kimi-k2")
    assert later is not None and later["metadata"]["annotations"] == first["metadata"]["annotations"]


def test_the_api_server_rejects_invalid_specs(kube: KubeClient, namespace: str) -> None:
    for change in ({"mode": "auto"}, {"concurrency": {"min": 64, "max": 4}}, {"tensorParallelSizes": [3]}):
        with pytest.raises(ApiError) as info:
            kube.apply(_doc(namespace, **change))
        assert info.value.status == 422
