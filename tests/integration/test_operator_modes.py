"""Tuning modes, multi-node, invalid specs, conflicts and restarts, with the real kopf operator on
kmock's emulator. Observations come from a scripted MetricsSource (see test_operator_lifecycle)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from infertune.actuate.workload import INPUT_HASH
from infertune.api.observation import Observation
from tests.integration.test_operator_lifecycle import (
    DEPLOY,
    INFD,
    LWS,
    NS,
    ScriptedSource,
    condition,
    declare,
    eventually,
    operator,
    post,
    post_policies,
    report_ready,
    resource,
    stored,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]


def busy(name: str = "kimi-k2") -> ScriptedSource:
    """Demand well above one TP4 replica's rate: the plan wants more replicas."""
    obs = Observation(namespace=NS, deployment=name, sample_time=time.time() + 60, available=True,
                      running=8.0, waiting=6.0, kv_usage=0.62, arrival_rate=1.5, ttft_p95_seconds=2.4,
                      mean_inter_token_seconds=0.021, mean_prompt_tokens=84_000, mean_cached_tokens=71_000,
                      mean_generated_tokens=1_056)
    return ScriptedSource(observations={(NS, name): obs})


async def _started(emulator: Any, doc: dict[str, Any]) -> tuple[dict[str, Any], str]:
    await post(emulator, doc, INFD)
    deployment = await eventually(lambda: stored(emulator, DEPLOY, doc["metadata"]["name"]))
    return deployment, deployment["metadata"]["annotations"][INPUT_HASH]


def _decisions(emulator: Any, name: str = "kimi-k2") -> list[dict[str, Any]]:
    return ((stored(emulator, INFD, name) or {}).get("status") or {}).get("decisions", [])


async def test_auto_mode_rolls_the_deployment_to_the_new_recommendation(kmock: Any) -> None:
    declare(kmock)
    await post_policies(kmock)
    async with operator(kmock, busy()):
        first, first_hash = await _started(kmock, resource(mode="Auto", tensorParallelSizes=[4]))
        assert first["spec"]["replicas"] == 1
        rolled = await eventually(lambda: (d := stored(kmock, DEPLOY, "kimi-k2")) and d["spec"]["replicas"] > 1
                                  and d)
        # The Deployment is written before the status: wait for the status too before stopping the operator.
        infd = await eventually(lambda: (o := stored(kmock, INFD, "kimi-k2"))
                                and ((o.get("status") or {}).get("applied") or {}).get("replicas", 0) > 1 and o)
    assert rolled["metadata"]["annotations"][INPUT_HASH] != first_hash
    assert infd["status"]["applied"]["replicas"] == rolled["spec"]["replicas"] == 4  # replicas.max
    assert any(d["action"] == "ScaleUp" for d in infd["status"]["decisions"])
    assert condition(infd, "MetricsAvailable")["status"] == "True"
    assert infd["status"]["observed"]["kvUsagePercent"] == 62


async def test_recommend_mode_only_writes_the_recommendation(kmock: Any) -> None:
    declare(kmock)
    await post_policies(kmock)
    async with operator(kmock, busy()):
        _, first_hash = await _started(kmock, resource(mode="Recommend", tensorParallelSizes=[4]))
        infd = await eventually(lambda: (o := stored(kmock, INFD, "kimi-k2"))
                                and (o.get("status", {}).get("recommendation") or {}).get("replicas", 0) > 1 and o)
        await asyncio.sleep(1.5)  # several more cycles: still nothing applied
        deployment = stored(kmock, DEPLOY, "kimi-k2")
    assert infd["status"]["recommendation"]["replicas"] == 4
    assert deployment["spec"]["replicas"] == 1
    assert deployment["metadata"]["annotations"][INPUT_HASH] == first_hash
    assert stored(kmock, INFD, "kimi-k2")["status"]["applied"]["replicas"] == 1


async def test_the_paused_annotation_holds(kmock: Any) -> None:
    declare(kmock)
    await post_policies(kmock)
    doc = resource(mode="Auto", tensorParallelSizes=[4])
    doc["metadata"]["annotations"] = {"infertune.io/paused": "true"}
    async with operator(kmock, busy()):
        _, first_hash = await _started(kmock, doc)
        await eventually(lambda: any(d["reason"] == "Paused" for d in _decisions(kmock)))
        deployment = stored(kmock, DEPLOY, "kimi-k2")
    assert deployment["spec"]["replicas"] == 1
    assert deployment["metadata"]["annotations"][INPUT_HASH] == first_hash


async def test_tp16_on_8_gpu_nodes_renders_a_leader_worker_set(kmock: Any) -> None:
    declare(kmock)
    await post_policies(kmock)
    doc = resource(tensorParallelSizes=[16])
    async with operator(kmock):
        await post(kmock, doc, INFD)
        lws = await eventually(lambda: stored(kmock, LWS, "kimi-k2"))
        infd = await eventually(lambda: (o := stored(kmock, INFD, "kimi-k2")) and o.get("status", {}).get("applied")
                                and o)
        # Ready follows the LeaderWorkerSet's own ready replicas, as it does a Deployment's.
        await report_ready(kmock, "kimi-k2", ready=lws["spec"]["replicas"], plural=LWS)
        ready = await eventually(lambda: (c := condition(stored(kmock, INFD, "kimi-k2"), "Ready"))
                                 and c["status"] == "True" and c)
    assert ready["reason"] == "WorkloadReady"
    assert stored(kmock, DEPLOY, "kimi-k2") is None
    assert lws["spec"]["leaderWorkerTemplate"]["size"] == 2
    assert infd["status"]["applied"]["workloadKind"] == "LeaderWorkerSet"
    assert lws["metadata"]["ownerReferences"][0]["uid"] == "uid-kimi-k2"


@pytest.mark.parametrize(("change", "field"), [
    ({"tuning": {"mode": "auto"}}, "spec.tuning.mode"),
    ({"tuning": {"concurrency": {"min": 64, "max": 4}}}, "spec.tuning.concurrency"),
    ({"tuning": {"tensorParallelSizes": [3]}}, "spec.tuning.tensorParallelSizes[0]"),
    ({"hardware": {"gpu": "a100"}}, "spec.hardware.gpu"),
    ({"engine": {"extraArgs": ["--max-num-seqs=512"]}}, "spec.engine.extraArgs[0]"),
])
async def test_an_invalid_spec_gets_an_invalid_spec_condition_and_no_workload(
        kmock: Any, change: dict[str, Any], field: str) -> None:
    declare(kmock)
    await post_policies(kmock)
    doc = resource()
    for key, value in change.items():
        doc["spec"][key] = {**doc["spec"].get(key, {}), **value}
    async with operator(kmock):
        await post(kmock, doc, INFD)
        invalid = await eventually(lambda: condition(stored(kmock, INFD, "kimi-k2"), "InvalidSpec"))
        await asyncio.sleep(1.0)  # timers run: still no workload, no crash
        assert stored(kmock, DEPLOY, "kimi-k2") is None
    assert invalid["status"] == "True" and invalid["message"].startswith(field), invalid["message"]
    assert condition(stored(kmock, INFD, "kimi-k2"), "Ready")["status"] == "False"


async def test_malformed_config_json_in_a_configmap_is_an_invalid_spec(kmock: Any) -> None:
    declare(kmock)
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "m-config", "namespace": NS,
                                                                "uid": "cm", "resourceVersion": "1"},
          "data": {"config.json": '{"num_hidden_layers": 61,'}}
    await post(kmock, cm, "v1/configmaps")
    doc = resource()
    doc["spec"].pop("policyRef")
    doc["spec"]["model"] = {"weights": "org/model", "configMapRef": {"name": "m-config"}}
    async with operator(kmock):
        await post(kmock, doc, INFD)
        invalid = await eventually(lambda: condition(stored(kmock, INFD, "kimi-k2"), "InvalidSpec"))
    assert invalid["status"] == "True"
    assert invalid["message"].startswith("spec.model.configMapRef") and "malformed config.json" in invalid["message"]
    assert stored(kmock, DEPLOY, "kimi-k2") is None


async def test_a_spec_turned_invalid_leaves_the_running_workload_untouched(kmock: Any) -> None:
    declare(kmock)
    await post_policies(kmock)
    async with operator(kmock):
        _, first_hash = await _started(kmock, resource())
        await eventually(lambda: (stored(kmock, INFD, "kimi-k2") or {}).get("status", {}).get("applied"))
        patch = {"metadata": {"generation": 2, "resourceVersion": "2"},
                 "spec": {"engine": {"extraArgs": ["--tensor-parallel-size=2"]}}}
        async with kmock.patch(f"/apis/infertune.io/v1alpha1/namespaces/{NS}/inferencedeployments/kimi-k2",
                               json=patch, headers={"Content-Type": "application/merge-patch+json"}) as resp:
            assert resp.status == 200
        invalid = await eventually(lambda: (c := condition(stored(kmock, INFD, "kimi-k2"), "InvalidSpec"))
                                   and c["status"] == "True" and c)
    assert invalid["message"].startswith("spec.engine.extraArgs[0]")
    assert stored(kmock, DEPLOY, "kimi-k2")["metadata"]["annotations"][INPUT_HASH] == first_hash


async def test_a_409_on_apply_is_retried(kmock: Any) -> None:
    declare(kmock)
    await post_policies(kmock)
    # The slice counts every matching request: the first PATCH (the create-time apply, answered 404 by
    # the emulator, then created by POST) is [0]; the scale-up's PATCH of the live Deployment is [1].
    conflict = kmock[f"patch /apis/apps/v1/namespaces/{NS}/deployments/kimi-k2"][1:2] << 409 << {
        "kind": "Status", "code": 409, "reason": "Conflict", "message": "the object has been modified"}
    async with operator(kmock, busy()):
        await _started(kmock, resource(mode="Auto", tensorParallelSizes=[4]))
        await eventually(lambda: (stored(kmock, INFD, "kimi-k2") or {}).get("status", {}).get("applied", {})
                         .get("replicas") == 4)
    patches = [r for r in list(kmock) if r.method == "PATCH" and "/deployments/" in str(r.url)]
    # The conflict happened; status.applied moved to 4 only in a later, successful run of the timer
    # (a failed apply raises before the status patch). The emulator applies even a 409'd PATCH, so
    # the retry finds the input hash already live and does not PATCH again.
    assert len(conflict) == 1 and len(patches) == 2


async def test_a_restarted_operator_does_not_roll_again(kmock: Any) -> None:
    declare(kmock)
    await post_policies(kmock)
    async with operator(kmock, busy()):
        await _started(kmock, resource(mode="Auto", tensorParallelSizes=[4]))
        await eventually(lambda: (stored(kmock, DEPLOY, "kimi-k2") or {}).get("spec", {}).get("replicas") == 4)
    before = len(list(kmock))
    async with operator(kmock):  # no metrics now: the timer holds, the resume handler re-renders
        await eventually(lambda: any("/inferencedeployments" in str(r.url) and r.method == "GET"
                                     for r in list(kmock)[before:]))
        await asyncio.sleep(1.5)
    writes = [r for r in list(kmock)[before:] if r.method in ("PATCH", "POST", "PUT")
              and ("/deployments" in str(r.url) or "/services" in str(r.url))]
    assert writes == []
    assert stored(kmock, DEPLOY, "kimi-k2")["spec"]["replicas"] == 4
