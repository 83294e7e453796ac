"""The owned workloads as a cluster would receive them: engine flags the operator owns, GPUs,
scheduling, probes and drain, owner references, the input hash, and the multi-node LeaderWorkerSet."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from infertune.actuate.workload import INPUT_HASH, Owner, desired_objects, rollout_strategy_of
from infertune.api.policy import parse_policy
from infertune.api.spec import InferenceDeploymentSpec, parse_spec
from infertune.cli import main
from infertune.planner.request import resolve
from infertune.planner.types import Layout

ROOT = Path(__file__).resolve().parents[2]
OWNER = Owner("kimi-k2", "inference", "0b4f-uid")


def _spec(**engine: Any) -> InferenceDeploymentSpec:
    raw = yaml.safe_load((ROOT / "examples/kimi-k2.6-b200.yaml").read_text())["spec"]
    raw["engine"].update(engine)
    return parse_spec(raw)


def _render(layout: Layout, gpus_per_node: int = 8, **engine: Any) -> list[dict[str, Any]]:
    return desired_objects(OWNER, _spec(**engine), layout, gpus_per_node)


def _flag(args: list[str], name: str) -> str:
    return args[args.index(name) + 1]


def test_deployment_carries_the_layout_and_passes_user_args_through() -> None:
    deployment, service = _render(Layout(4, 8, 2))
    assert deployment["kind"] == "Deployment" and deployment["spec"]["replicas"] == 2
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    args = container["args"]
    assert _flag(args, "--tensor-parallel-size") == "4"
    assert _flag(args, "--max-num-seqs") == "8"
    assert _flag(args, "--gpu-memory-utilization") == "0.90"
    assert args[-3:] == ["--trust-remote-code", "--enable-prefix-caching", "--max-model-len=131072"]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "4"
    assert container["readinessProbe"]["httpGet"]["path"] == "/health"
    assert container["livenessProbe"]["httpGet"]["path"] == "/health"
    assert "preStop" in container["lifecycle"]
    pod = deployment["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-B200"}
    assert pod["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    assert pod["terminationGracePeriodSeconds"] >= 60
    assert deployment["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    annotations = deployment["spec"]["template"]["metadata"]["annotations"]
    assert annotations["infertune.io/tensor-parallel-size"] == "4"
    assert annotations["infertune.io/max-num-seqs"] == "8"
    for obj in (deployment, service):
        assert obj["metadata"]["ownerReferences"] == [{
            "apiVersion": "infertune.io/v1alpha1", "kind": "InferenceDeployment", "name": "kimi-k2",
            "uid": "0b4f-uid", "controller": True, "blockOwnerDeletion": True}]
        assert obj["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "infertune"
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert deployment["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert service["spec"]["selector"].items() <= labels.items()


def test_input_hash_changes_only_with_the_inputs() -> None:
    first = _render(Layout(4, 8, 2))[0]["metadata"]["annotations"][INPUT_HASH]
    assert _render(Layout(4, 8, 2))[0]["metadata"]["annotations"][INPUT_HASH] == first
    assert _render(Layout(4, 16, 2))[0]["metadata"]["annotations"][INPUT_HASH] != first
    assert _render(Layout(4, 8, 2), image="vllm/vllm-openai:v0.12.0")[0]["metadata"]["annotations"][
        INPUT_HASH] != first


def test_tp16_on_8_gpu_nodes_is_a_leader_worker_set() -> None:
    lws, service = _render(Layout(16, 32, 1), gpus_per_node=8)
    assert lws["apiVersion"] == "leaderworkerset.x-k8s.io/v1" and lws["kind"] == "LeaderWorkerSet"
    template = lws["spec"]["leaderWorkerTemplate"]
    assert template["size"] == 2
    for role in ("leaderTemplate", "workerTemplate"):
        container = template[role]["spec"]["containers"][0]
        assert container["resources"]["limits"]["nvidia.com/gpu"] == "8"
    leader_args = template["leaderTemplate"]["spec"]["containers"][0]["args"]
    assert leader_args[leader_args.index("--tensor-parallel-size") + 1] == "16"
    assert service["spec"]["selector"]["leaderworkerset.sigs.k8s.io/worker-index"] == "0"


def test_sglang_gets_its_own_flags() -> None:
    deployment = _render(Layout(8, 32, 1), kind="sglang", image="lmsysorg/sglang:v0.5.3", extraArgs=[])[0]
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    assert _flag(args, "--tp-size") == "8" and _flag(args, "--max-running-requests") == "32"
    assert _flag(args, "--mem-fraction-static") == "0.90" and "--tensor-parallel-size" not in args


@pytest.mark.parametrize("layout", [Layout(4, 8, 2), Layout(16, 32, 1)], ids=["deployment", "lws"])
def test_rendered_core_objects_validate_against_kubernetes(layout: Layout) -> None:
    for obj in _render(layout):
        if obj["apiVersion"] in ("apps/v1", "v1"):
            kubernetes_validate.validate(obj, "1.30", strict=True)


def test_render_command_prints_the_objects(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["render", "-f", str(ROOT / "examples/kimi-k2.6-b200.yaml"),
                 "--policy", str(ROOT / "policies/coding-agent.yaml"),
                 "--tp", "8", "--max-num-seqs", "16", "--replicas", "3"]) == 0
    docs = list(yaml.safe_load_all(capsys.readouterr().out))
    assert [d["kind"] for d in docs] == ["Deployment", "Service"]
    args = docs[0]["spec"]["template"]["spec"]["containers"][0]["args"]
    assert _flag(args, "--tensor-parallel-size") == "8" and docs[0]["spec"]["replicas"] == 3


def test_render_command_rejects_a_bad_spec_in_one_line(tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    doc = yaml.safe_load((ROOT / "examples/kimi-k2.6-b200.yaml").read_text())
    doc["spec"]["tuning"]["mode"] = "auto"
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(doc))
    assert main(["render", "-f", str(bad), "--policy", str(ROOT / "policies/coding-agent.yaml")]) == 2
    err = capsys.readouterr().err.strip()
    assert "spec.tuning.mode" in err and len(err.splitlines()) == 1


def test_policy_merge_reaches_the_rendered_defaults() -> None:
    raw = yaml.safe_load((ROOT / "examples/gpt-oss-120b.yaml").read_text())["spec"]
    policy = parse_policy(yaml.safe_load((ROOT / "policies/batch.yaml").read_text())["spec"])
    resolved = resolve(parse_spec(raw), policy)
    assert resolved.request.slo.max_ttft_seconds == 60 and resolved.request.slo.min_stream_tps is None


def test_render_refuses_a_tp_the_resource_does_not_allow(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["render", "-f", str(ROOT / "examples/kimi-k2.6-b200.yaml"),
                 "--policy", str(ROOT / "policies/coding-agent.yaml"), "--tp", "16"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == ("infertune render: error: --tp: 16 is not one of the resource's tensorParallelSizes (4, 8)")


@pytest.mark.parametrize(("flags", "says"), [
    # The example allows replicas 1..4, max-num-seqs 4..64 and a pool of 32 GPUs.
    (["--replicas", "1024", "--tp", "8"], "--replicas: 1024 is more than the resource's spec.tuning.replicas.max (4)"),
    (["--replicas", "3", "--tp", "8", "--max-num-seqs", "128"],
     "--max-num-seqs: 128 is outside the resource's spec.tuning.concurrency (4..64)"),
    (["--replicas", "3", "--tp", "8"], "--replicas: 3 x TP8 is 24 GPUs, more than the resource's "
                                       "spec.hardware.poolGpus (16)"),
])
def test_render_refuses_a_layout_the_operator_would_never_apply(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                                flags: list[str], says: str) -> None:
    doc = yaml.safe_load((ROOT / "examples/kimi-k2.6-b200.yaml").read_text())
    doc["spec"]["hardware"]["poolGpus"] = 16
    resource = tmp_path / "resource.yaml"
    resource.write_text(yaml.safe_dump(doc))
    assert main(["render", "-f", str(resource), "--policy", str(ROOT / "policies/coding-agent.yaml"), *flags]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith(f"infertune render: error: {says}") and err.count("\n") == 1, err


def test_scaling_changes_the_object_but_not_the_pod_template() -> None:
    """A pod-template change rolls every pod; a scale must only change spec.replicas."""
    three, five = _render(Layout(4, 8, 3))[0], _render(Layout(4, 8, 5))[0]
    template_hash = three["spec"]["template"]["metadata"]["annotations"][INPUT_HASH]
    assert five["spec"]["template"] == three["spec"]["template"]
    assert five["metadata"]["annotations"][INPUT_HASH] != three["metadata"]["annotations"][INPUT_HASH]
    retuned = _render(Layout(4, 6, 3))[0]
    assert retuned["spec"]["template"]["metadata"]["annotations"][INPUT_HASH] != template_hash


@pytest.mark.parametrize("layout", [Layout(8, 8, 4), Layout(16, 8, 2)])
def test_a_rollout_that_gives_way_renders_and_reads_back_its_strategy(layout: Layout) -> None:
    """Both workload kinds render maxUnavailable/maxSurge as the planner chose and read them back;
    the strategy is not part of the pod template, so choosing it rolls nothing by itself."""
    workload = desired_objects(OWNER, _spec(), layout, 8, max_surge=0, max_unavailable=1)[0]
    assert rollout_strategy_of(workload) == (0, 1)
    if workload["kind"] == "Deployment":
        kubernetes_validate.validate(workload, "1.30", strict=True)
    plain = desired_objects(OWNER, _spec(), layout, 8)[0]
    assert rollout_strategy_of(plain) == (1, 0)
    template = "template" if workload["kind"] == "Deployment" else "leaderWorkerTemplate"
    assert workload["spec"][template] == plain["spec"][template]
    with pytest.raises(ValueError, match="maxSurge or maxUnavailable"):
        desired_objects(OWNER, _spec(), layout, 8, max_surge=0, max_unavailable=0)


def test_a_strategy_the_operator_did_not_write_reads_as_its_default() -> None:
    for rolling in ({"maxSurge": "25%", "maxUnavailable": "25%"}, {}, {"maxSurge": 0, "maxUnavailable": 0},
                    {"maxSurge": -1, "maxUnavailable": 2}, {"maxSurge": True, "maxUnavailable": 1}):
        assert rollout_strategy_of({"spec": {"strategy": {"rollingUpdate": rolling}}}) == (1, 0)
    assert rollout_strategy_of({"spec": {"strategy": {"rollingUpdate": {"maxSurge": 3, "maxUnavailable": 0}}}}) \
        == (3, 0)
