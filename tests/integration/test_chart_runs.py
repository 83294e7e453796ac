"""What the chart renders is what runs: Helm (helm-python-sdk) installs the chart into kmock's
emulated API server, and the operator container of the Deployment it stored runs as a real process
with exactly that command line, environment and ServiceAccount (RBAC enforced), in a network
namespace of its own, for the defaults (through the README's install section, word for word) and
every charts/infertune/ci/*-values.yaml.

`make image-test` runs the same checks with the built image instead of the project's venv
(tests/image/test_image.py).
"""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.cluster_fixture import (
    REPO,
    EmulatedCluster,
    Pod,
    Runtime,
    VenvRuntime,
    console_blocks,
    console_commands,
    emulated_cluster,
    network_namespaces_available,
    readme_block,
    wait_for,
)
from tests.integration.chart_support import SCENARIOS, one, render, scenario_values

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]
RELEASE, NAMESPACE = "infertune", "infertune-system"
EXAMPLE = REPO / "examples" / "kimi-k2.6-b200.yaml"
SERVICE_ACCOUNTS = (f"{NAMESPACE}/infertune", f"{NAMESPACE}/infertune-operator", f"{NAMESPACE}/default")
# What a platform team does before `helm install` for each scenario (its values say why).
PREREQUISITES: dict[str, list[str]] = {
    "no-crds": ["kubectl apply -f crds/",  # crds.enabled=false: the CRDs are managed elsewhere
                f"kubectl create serviceaccount infertune-operator -n {NAMESPACE}"],  # serviceAccount.create=false
    "ha": [f"kubectl create secret generic prometheus-token -n {NAMESPACE} --from-literal=token=s3cret"],
    "namespaced": ["kubectl create namespace llm-prod", "kubectl create namespace llm-staging"],
}
# The operator's start, its first resume and a reconcile take 3-6 s on this machine when idle.
OPERATOR_READY_SECONDS = 60
# kopf peering: a killed replica's record expires `lifetime` (kopf's default, 60 s) after its last
# keep-alive; the standby re-checks then. Plus a reconcile and the machine's slack.
TAKEOVER_BOUND_SECONDS = 60 + 20


@pytest.fixture
def runtime() -> Runtime:
    return VenvRuntime()


@pytest.fixture
def cluster(tmp_path: Path, runtime: Runtime) -> Iterator[EmulatedCluster]:
    reason = network_namespaces_available()
    if reason:
        pytest.skip(reason)
    with emulated_cluster(tmp_path, runtime, SERVICE_ACCOUNTS) as made:
        yield made


# --- what every scenario checks --------------------------------------------------------------------
def operator_container(obj: dict[str, Any]) -> dict[str, Any]:
    container: dict[str, Any] = next(c for c in obj["spec"]["template"]["spec"]["containers"]
                                     if c["name"] == "operator")
    return container


def stored_deployment(cluster: EmulatedCluster) -> dict[str, Any]:
    found = cluster.kube.get(f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments/{RELEASE}")
    assert found, "helm install stored no operator Deployment"
    return found


def install(cluster: EmulatedCluster, scenario: str) -> None:
    for step in PREREQUISITES.get(scenario, []):
        cluster.console.run(step.split())
    cluster.console.run(f"kubectl create namespace {NAMESPACE}".split())
    cluster.console.run(["helm", "install", RELEASE, "charts/infertune", "-n", NAMESPACE,
                         "-f", f"charts/infertune/ci/{scenario}-values.yaml"])
    cluster.console.run(["kubectl", "apply", "-f", "policies/"])  # the example uses coding-agent


def check_probes_and_metrics(cluster: EmulatedCluster, pods: list[Pod]) -> None:
    """The kubelet's liveness and readiness probes (port and path from the stored Deployment) answer
    on every replica, and the operator's /metrics answers through the Service's port."""
    for pod in pods:
        for kind in ("livenessProbe", "readinessProbe"):
            probe = pod.container[kind]
            status = wait_for(f"{pod.name} {kind} {probe['httpGet']}",
                              lambda p=probe, q=pod: q.probe(p)[0] == 200 or (not q.running and -1),
                              OPERATOR_READY_SECONDS)
            assert status is True, f"{pod.name} exited:\n{pod.log()[-3000:]}"
    services = cluster.kube.items(f"/api/v1/namespaces/{NAMESPACE}/services")
    for service in services:
        address = next(a for key, (a, _) in cluster.kubelet.services.items()
                       if key == f"{service['metadata']['name']}.{NAMESPACE}")
        port = service["spec"]["ports"][0]["port"]
        body = wait_for("/metrics through the Service", lambda a=address, p=port: _get(f"http://{a}:{p}/metrics"),
                        30)
        assert "infertune_reconcile_duration_seconds" in body


def _get(url: str) -> str | None:
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=3) as answer:
            return str(answer.read().decode())
    except OSError:
        return None


def apply_example(cluster: EmulatedCluster, namespace: str, name: str = "kimi-k2",
                  metrics: dict[str, Any] | None = None) -> dict[str, Any]:
    """The example, in `namespace`; `metrics` replaces its spec.metrics (its own Prometheus URL)."""
    doc = yaml.safe_load(EXAMPLE.read_text())
    doc["metadata"] |= {"namespace": namespace, "name": name}
    if metrics is not None:
        doc["spec"]["metrics"] = metrics
    cluster.kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    applied: dict[str, Any] = cluster.kube.apply(doc)
    return applied


def reconciled(cluster: EmulatedCluster, namespace: str, name: str = "kimi-k2",
               timeout: float = OPERATOR_READY_SECONDS) -> dict[str, Any]:
    """The example's Deployment and Service exist and its status carries every condition."""
    def done() -> dict[str, Any] | None:
        infd = cluster.kube.get(f"/apis/infertune.io/v1alpha1/namespaces/{namespace}/inferencedeployments/{name}")
        types = {c["type"] for c in ((infd or {}).get("status") or {}).get("conditions") or []}
        if infd is None or not {"Ready", "SLOMet", "CacheHeadroom", "MetricsAvailable", "InvalidSpec"} <= types:
            return None
        if not cluster.kube.get(f"/apis/apps/v1/namespaces/{namespace}/deployments/{name}"):
            return None
        if not cluster.kube.get(f"/api/v1/namespaces/{namespace}/services/{name}"):
            return None
        return infd

    infd: dict[str, Any] = wait_for(f"{namespace}/{name} reconciled", done, timeout)
    conditions = {c["type"]: c for c in infd["status"]["conditions"]}
    assert conditions["InvalidSpec"]["status"] == "False"
    assert infd["status"]["observedGeneration"] == 1
    return infd


def infd_now(cluster: EmulatedCluster, namespace: str, name: str = "kimi-k2") -> dict[str, Any]:
    return cluster.kube.get(f"/apis/infertune.io/v1alpha1/namespaces/{namespace}/inferencedeployments/{name}") or {}


def operator_requests(cluster: EmulatedCluster, pod: Pod | None = None) -> list[dict[str, Any]]:
    """The audit log's entries made with the operator's ServiceAccount (from one pod, if given)."""
    return [e for e in cluster.server.audit() if str(e.get("user", "")).startswith("system:serviceaccount:")
            and not str(e["user"]).endswith(":default") and (pod is None or e["source"] == pod.address)]


WRITES = {"create", "update", "patch", "delete", "deletecollection"}


def actuations(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Successful writes on what the operator manages (not kopf's peering keep-alives)."""
    return [e for e in entries if e.get("verb") in WRITES and e["code"] < 300 and e.get("group") != "kopf.dev"]


def log_lines(pod: Pod) -> list[str]:
    return [line for line in pod.log().splitlines() if line.strip()]


# --- the README's install section, word for word ---------------------------------------------------
def test_the_readme_install_section_runs_word_for_word(cluster: EmulatedCluster) -> None:
    (block,) = console_blocks(readme_block("install"))
    commands = console_commands(block)
    assert [c[:2] for c in commands if c[0] == "helm"] == [["helm", "install"], ["helm", "test"]]
    for command in commands:  # an unknown command or flag fails the test: the README says no more
        cluster.console.run(command)
    pods = cluster.operator_pods()
    assert len(pods) == 1
    check_probes_and_metrics(cluster, pods)
    installed = yaml.safe_load(EXAMPLE.read_text())["metadata"]
    infd = reconciled(cluster, installed["namespace"], installed["name"])
    assert infd["metadata"]["finalizers"] == ["infertune.io/finalizer"]
    # The helm test hook ran as a pod and passed (Config.test raises otherwise).
    assert any(p.container["name"] == "metrics" and p.process is not None and p.process.returncode == 0
               for p in cluster.kubelet.pods)


# --- the image's own command line ------------------------------------------------------------------
def test_the_images_default_command_runs_the_operator(cluster: EmulatedCluster) -> None:
    """What `docker run IMAGE` runs: ENTRYPOINT and CMD, no arguments from a chart. The chart is
    installed for its CRDs, RBAC and ServiceAccount only; this pod is the only operator."""
    cluster.console.on_installed = lambda release, namespace: None  # no Deployment controller
    cluster.console.run(f"kubectl create namespace {NAMESPACE}".split())
    cluster.console.run(["helm", "install", RELEASE, "charts/infertune", "-n", NAMESPACE])
    cluster.console.run(["kubectl", "apply", "-f", "policies/"])
    container = {"name": "operator", "image": "infertune"}  # no command, no args: the image's own
    pod = cluster.kubelet.start_pod({"metadata": {"labels": {}}, "spec": {
        "serviceAccountName": RELEASE, "containers": [container]}}, NAMESPACE, "docker-run")
    for port, path in ((8080, "/healthz"), (9090, "/metrics")):  # the CMD's ports
        body = wait_for(f"{path} on :{port}", lambda p=port, q=path: _get(f"http://{pod.address}:{p}{q}")
                        or (not pod.running and "exited"), OPERATOR_READY_SECONDS)
        assert body != "exited", pod.log()[-3000:]
    apply_example(cluster, "inference")
    reconciled(cluster, "inference")
    lines = log_lines(pod)
    assert lines and all(isinstance(json.loads(line), dict) for line in lines)  # the CMD's --log-format=json


# --- every ci scenario -----------------------------------------------------------------------------
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_what_the_chart_renders_runs(cluster: EmulatedCluster, scenario: str) -> None:
    values = scenario_values(scenario)
    install(cluster, scenario)
    deployment = stored_deployment(cluster)
    container = operator_container(deployment)
    # What Helm stored is what the chart renders, and what runs is that container's command line.
    rendered = operator_container(one(render(values), "Deployment"))
    assert {k: container.get(k) for k in ("command", "args", "env", "livenessProbe", "readinessProbe")} == \
           {k: rendered.get(k) for k in ("command", "args", "env", "livenessProbe", "readinessProbe")}
    pods = cluster.operator_pods()
    assert len(pods) == deployment["spec"]["replicas"]
    check_probes_and_metrics(cluster, pods)
    watched = (values.get("operator") or {}).get("watchNamespaces") or ["inference"]
    args = container["args"]
    # The operator's default Prometheus when the chart gives one (the example names its own), else
    # the pods themselves (no-monitoring: "every InferenceDeployment uses spec.metrics.source: Pods").
    default_prometheus = any(a.startswith("--prometheus-url=") for a in args)
    apply_example(cluster, watched[0], metrics={"source": "Prometheus" if default_prometheus else "Pods"})
    reconciled(cluster, watched[0])
    if values.get("tests", {}).get("enabled", True):
        cluster.console.run(["helm", "test", RELEASE, "-n", NAMESPACE])
    for pod in pods:
        lines = log_lines(pod)
        if "--log-format=json" in args:
            assert lines and all(isinstance(json.loads(line), dict) for line in lines), lines[:5]
        if "--verbose" in args:  # operator.extraArgs in no-crds
            assert any(json.loads(line).get("severity") == "debug" for line in lines)
    if any(a.startswith("--prometheus-token-secret=") for a in args):
        secret = next(a for a in args if a.startswith("--prometheus-token-secret=")).split("=", 1)[1]
        # The first poll of the default Prometheus reads the token (every --poll-seconds, 15 s).
        reads = wait_for("the operator reads its Prometheus token", lambda: [
            e for e in operator_requests(cluster) if e.get("resource") == "secrets"], 45)
        assert {(e["namespace"], e["name"], e["code"]) for e in reads} == {(NAMESPACE, secret, 200)}
        # That Prometheus does not exist here: the resource says so, with the URL from the chart.
        url = next(a for a in args if a.startswith("--prometheus-url=")).split("=", 1)[1]
        metrics = wait_for("MetricsAvailable=False", lambda: next(
            (c for c in (infd_now(cluster, watched[0]).get("status") or {}).get("conditions", [])
             if c["type"] == "MetricsAvailable" and c["status"] == "False"), None), 45)
        assert url.split("//")[1].split(":")[0] in metrics["message"], metrics
    # RBAC: the operator never needed more than the chart grants (a 403 shows a missing rule; a
    # namespaced kopf refused Namespaces retried for a minute before it started).
    denied = {(e["verb"], e.get("resource")) for e in operator_requests(cluster) if e["code"] == 403}
    assert not denied, denied


# --- high availability -----------------------------------------------------------------------------
def test_ha_one_replica_acts_and_the_standby_takes_over_when_it_is_killed(cluster: EmulatedCluster) -> None:
    install(cluster, "ha")
    pods = cluster.operator_pods()
    assert len(pods) == 2
    check_probes_and_metrics(cluster, pods)
    peering = "infertune-ha"
    path = f"/apis/kopf.dev/v1/clusterkopfpeerings/{peering}"
    both = wait_for("both replicas in the peering object",
                    lambda: (status := (cluster.kube.get(path) or {}).get("status") or {})
                    and {p.name for p in pods} <= set(status) and status, OPERATOR_READY_SECONDS)
    # The replica that started first has the higher priority and acts; the other stands by.
    active_name = max(both, key=lambda k: both[k]["priority"])
    active = next(p for p in pods if p.name == active_name)
    standby = next(p for p in pods if p is not active)
    apply_example(cluster, "inference")
    reconciled(cluster, "inference")
    time.sleep(3)  # room for a double actuation to show up
    before_kill = actuations(operator_requests(cluster))
    assert before_kill and {e["source"] for e in before_kill} == {active.address}, \
        {e["source"] for e in before_kill}

    killed_at = time.time()
    active.kill(signal.SIGKILL)
    apply_example(cluster, "inference", name="kimi-k2-second")
    reconciled(cluster, "inference", "kimi-k2-second", timeout=TAKEOVER_BOUND_SECONDS)
    took_over = min(e["time"] for e in actuations(operator_requests(cluster, standby)))
    after = actuations(operator_requests(cluster))
    # No double actuation: every write before the kill came from the active replica, every write
    # after it from the standby, and each workload was created once.
    assert all(e["source"] == active.address for e in after if e["time"] < killed_at)
    assert all(e["source"] == standby.address for e in after if e["time"] > killed_at + 1)
    creations = [(e["resource"], e["namespace"], e["name"]) for e in after
                 if e["created"] and e["resource"] in ("deployments", "services")]
    assert sorted(creations) == sorted(set(creations)) and len(creations) == 4, creations  # 2 examples x 2
    assert took_over - killed_at <= TAKEOVER_BOUND_SECONDS
    print(f"standby took over {took_over - killed_at:.1f} s after SIGKILL (bound {TAKEOVER_BOUND_SECONDS} s)")


# --- namespaced ------------------------------------------------------------------------------------
def test_a_namespaced_operator_touches_nothing_outside_its_namespaces(cluster: EmulatedCluster) -> None:
    watched = scenario_values("namespaced")["operator"]["watchNamespaces"]
    install(cluster, "namespaced")
    check_probes_and_metrics(cluster, cluster.operator_pods())
    outside = apply_example(cluster, "inference")
    apply_example(cluster, watched[1])
    reconciled(cluster, watched[1])
    time.sleep(3)  # a cycle's worth of room to touch what it must not
    left_alone = cluster.kube.get("/apis/infertune.io/v1alpha1/namespaces/inference/inferencedeployments/kimi-k2")
    assert left_alone is not None
    assert "status" not in left_alone and not left_alone["metadata"].get("finalizers")
    assert left_alone["metadata"].get("annotations") == outside["metadata"].get("annotations")
    assert cluster.kube.get("/apis/apps/v1/namespaces/inference/deployments/kimi-k2") is None
    touched = {e.get("namespace") for e in operator_requests(cluster) if e.get("verb") and e["code"] < 400}
    # Cluster-scoped reads (None) are ServingPolicies, CRDs and Namespaces' names; every namespaced
    # request is in a watched namespace.
    assert touched <= {None, *watched}, touched
    cluster_scoped = {(e["resource"], e["verb"]) for e in operator_requests(cluster)
                      if e.get("verb") and e.get("namespace") is None and e["code"] < 400}
    assert {r for r, _ in cluster_scoped} <= {"servingpolicies", "customresourcedefinitions", "namespaces"}
    assert {v for _, v in cluster_scoped} <= {"get", "list", "watch"}, cluster_scoped
