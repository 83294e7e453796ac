"""Pure builders of the objects the operator owns (prometheus-operator style `make_*`): a Deployment,
or a LeaderWorkerSet when TP spans nodes, and a Service. Each carries an input hash, so an unchanged
input never causes an update (nor a rollout after an operator restart)."""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from infertune.actuate.engine import (
    TERMINATION_GRACE_SECONDS,
    engine_args,
    engine_command,
    pre_stop,
    probes,
)
from infertune.api.schema import ALLOWED_TP_SIZES, CONCURRENCY_MAX, REPLICAS_MAX
from infertune.api.spec import API_VERSION, KIND, InferenceDeploymentSpec
from infertune.planner.types import Layout
from infertune.textfile import plain_number

MANAGED_BY = "app.kubernetes.io/managed-by"
DEPLOYMENT_LABEL = "infertune.io/deployment"
INPUT_HASH = "infertune.io/input-hash"
TP_ANNOTATION = "infertune.io/tensor-parallel-size"
SEQS_ANNOTATION = "infertune.io/max-num-seqs"
LWS_API = "leaderworkerset.x-k8s.io/v1"
LWS_LEADER_LABEL = "leaderworkerset.sigs.k8s.io/worker-index"
GPU = "nvidia.com/gpu"
Obj = dict[str, Any]


class WorkloadKind(StrEnum):
    DEPLOYMENT = "Deployment"
    LEADER_WORKER_SET = "LeaderWorkerSet"


def workload_kind(layout: Layout, gpus_per_node: int) -> WorkloadKind:
    """A replica that spans nodes is a LeaderWorkerSet (one pod per node); one within a node, a Deployment."""
    return WorkloadKind.LEADER_WORKER_SET if layout.tensor_parallel_size > gpus_per_node else WorkloadKind.DEPLOYMENT


@dataclass(frozen=True)
class Owner:
    name: str
    namespace: str
    uid: str


def selector_labels(name: str) -> dict[str, str]:
    return {DEPLOYMENT_LABEL: name}


def labels(name: str) -> dict[str, str]:
    return {"app.kubernetes.io/name": "inference-engine", "app.kubernetes.io/instance": name,
            MANAGED_BY: "infertune", **selector_labels(name)}


def selector_string(name: str) -> str:
    return ",".join(f"{k}={v}" for k, v in selector_labels(name).items())


def owner_reference(owner: Owner) -> Obj:
    # controller + blockOwnerDeletion: the garbage collector deletes these objects with the resource.
    return {"apiVersion": API_VERSION, "kind": KIND, "name": owner.name, "uid": owner.uid,
            "controller": True, "blockOwnerDeletion": True}


def input_hash(obj: Obj) -> str:
    """Hash of everything the object would say, so equal inputs give equal hashes across restarts."""
    return hashlib.sha256(json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:16]


def _stamped(obj: Obj) -> Obj:
    template = obj.get("spec", {}).get("template")
    if template is not None:
        # The pod template gets the hash of the template alone: a pod-template change rolls the pods,
        # so a scale (spec.replicas) must not change it. `kubectl describe pod` shows which input a
        # pod was built from.
        template["metadata"].setdefault("annotations", {})[INPUT_HASH] = input_hash(template)
    obj["metadata"].setdefault("annotations", {})[INPUT_HASH] = input_hash(obj)
    return obj


def _metadata(owner: Owner) -> Obj:
    return {"name": owner.name, "namespace": owner.namespace, "labels": labels(owner.name),
            "ownerReferences": [owner_reference(owner)]}


def nodes_per_replica(tp: int, gpus_per_node: int) -> int:
    return max(math.ceil(tp / gpus_per_node), 1)


def _resources(spec: InferenceDeploymentSpec, gpus: int) -> Obj:
    user = spec.engine.resources
    return {"requests": {**user.requests, GPU: str(gpus)}, "limits": {**user.limits, GPU: str(gpus)}}


def _container(spec: InferenceDeploymentSpec, layout: Layout, gpus: int, args: list[str],
               command: list[str], serving: bool = True) -> Obj:
    container: Obj = {
        "name": "engine", "image": spec.engine.container_image, "command": command, "args": args,
        "ports": [{"name": "http", "containerPort": spec.engine.port, "protocol": "TCP"}],
        "env": [{"name": e.name, "value": e.value} for e in spec.engine.env],
        "resources": _resources(spec, gpus),
        "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}],
    }
    if serving:
        container |= probes("http", spec.engine.startup_seconds) | {"lifecycle": pre_stop()}
    return container


def _pod_spec(spec: InferenceDeploymentSpec, containers: list[Obj]) -> Obj:
    hw = spec.hardware
    return {
        "containers": containers,
        "nodeSelector": dict(hw.node_selector),
        "tolerations": [t.wire() for t in hw.tolerations],
        "terminationGracePeriodSeconds": TERMINATION_GRACE_SECONDS,
        # NCCL between ranks needs more shared memory than the container default of 64 MiB.
        "volumes": [{"name": "dshm", "emptyDir": {"medium": "Memory"}}],
    }


def _template(owner: Owner, layout: Layout, pod_spec: Obj) -> Obj:
    return {"metadata": {"labels": labels(owner.name), "annotations": {
        TP_ANNOTATION: str(layout.tensor_parallel_size), SEQS_ANNOTATION: str(layout.max_num_seqs)}},
        "spec": pod_spec}


def make_deployment(owner: Owner, spec: InferenceDeploymentSpec, layout: Layout, max_surge: int = 1,
                    max_unavailable: int = 0) -> Obj:
    tp = layout.tensor_parallel_size
    container = _container(spec, layout, tp, engine_args(spec, layout), engine_command(spec))
    return _stamped({
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": _metadata(owner),
        "spec": {
            "replicas": layout.replicas,
            "selector": {"matchLabels": selector_labels(owner.name)},
            # Never fewer serving replicas than now: a new layout comes up before an old one leaves, as
            # many at once as the planner found room for in the pool; maxUnavailable > 0 only when a full
            # pool leaves no other way out of a shape that misses the SLO (planner/rollout.py).
            "strategy": {"type": "RollingUpdate", "rollingUpdate": _rolling(max_surge, max_unavailable)},
            "progressDeadlineSeconds": spec.engine.startup_seconds + 600,
            "template": _template(owner, layout, _pod_spec(spec, [container])),
        },
    })


# vLLM spans nodes with Ray, through the helper script its image ships. The leader starts Ray, waits for
# the workers, then execs the server; the shell only ever sees this fixed text: the server's command
# line (the weights, the user's extraArgs) comes after it as positional parameters ("$@"), which no
# shell parses, so no user string is ever interpreted as shell syntax.
VLLM_MULTI_NODE_SCRIPT = "/vllm-workspace/examples/online_serving/multi-node-serving.sh"
VLLM_LEADER_SHELL = f'{VLLM_MULTI_NODE_SCRIPT} leader --ray_cluster_size="$LWS_GROUP_SIZE" && exec "$@"'
VLLM_WORKER_SHELL = f'exec {VLLM_MULTI_NODE_SCRIPT} worker --ray_address="$LWS_LEADER_ADDRESS"'


def _lws_commands(spec: InferenceDeploymentSpec, layout: Layout, nodes: int) -> tuple[Obj, Obj]:
    """Leader and worker containers. vLLM spans nodes with Ray (its multi-node-serving.sh helper);
    SGLang with its own --nnodes/--node-rank rendezvous. Every command is exec form."""
    args = engine_args(spec, layout, nodes)
    per_node = math.ceil(layout.tensor_parallel_size / nodes)
    if spec.engine.kind == "vllm":
        shell = ["/bin/sh", "-c"]
        # "$0" is a name for the shell's messages; "$@" is the server's command line, verbatim.
        leader = _container(spec, layout, per_node, [VLLM_LEADER_SHELL, "vllm-leader", *engine_command(spec), *args],
                            shell)
        worker = _container(spec, layout, per_node, [VLLM_WORKER_SHELL], shell, serving=False)
    else:
        leader = _container(spec, layout, per_node, args, engine_command(spec))
        worker = _container(spec, layout, per_node, args, engine_command(spec), serving=False)
    return leader, worker


def make_leader_worker_set(owner: Owner, spec: InferenceDeploymentSpec, layout: Layout,
                           gpus_per_node: int, max_surge: int = 1, max_unavailable: int = 0) -> Obj:
    nodes = nodes_per_replica(layout.tensor_parallel_size, gpus_per_node)
    leader, worker = _lws_commands(spec, layout, nodes)
    return _stamped({
        "apiVersion": LWS_API, "kind": "LeaderWorkerSet", "metadata": _metadata(owner),
        "spec": {
            "replicas": layout.replicas,
            "startupPolicy": "LeaderCreated",
            "rolloutStrategy": {"type": "RollingUpdate",
                                "rollingUpdateConfiguration": _rolling(max_surge, max_unavailable)},
            "leaderWorkerTemplate": {
                "size": nodes,
                "restartPolicy": "RecreateGroupOnPodRestart",
                "leaderTemplate": _template(owner, layout, _pod_spec(spec, [leader])),
                "workerTemplate": _template(owner, layout, _pod_spec(spec, [worker])),
            },
        },
    })


def make_service(owner: Owner, spec: InferenceDeploymentSpec, multi_node: bool) -> Obj:
    selector = selector_labels(owner.name)
    if multi_node:
        selector = {**selector, LWS_LEADER_LABEL: "0"}  # only leaders serve HTTP
    return _stamped({
        "apiVersion": "v1", "kind": "Service", "metadata": _metadata(owner),
        "spec": {"type": "ClusterIP", "selector": selector,
                 "ports": [{"name": "http", "port": spec.engine.port, "targetPort": "http",
                            "protocol": "TCP"}]},
    })


def desired_objects(owner: Owner, spec: InferenceDeploymentSpec, layout: Layout,
                    gpus_per_node: int, max_surge: int = 1, max_unavailable: int = 0) -> list[Obj]:
    """Everything the operator applies for one resource at one layout, workload first."""
    multi = workload_kind(layout, gpus_per_node) is WorkloadKind.LEADER_WORKER_SET
    workload = (make_leader_worker_set(owner, spec, layout, gpus_per_node, max_surge, max_unavailable) if multi
                else make_deployment(owner, spec, layout, max_surge, max_unavailable))
    return [workload, make_service(owner, spec, multi)]


def _pod_template(obj: Obj) -> Obj:
    spec = obj.get("spec") or {}
    if obj.get("kind") == WorkloadKind.LEADER_WORKER_SET:
        return dict((spec.get("leaderWorkerTemplate") or {}).get("leaderTemplate") or {})
    return dict(spec.get("template") or {})


def layout_of_workload(obj: Obj) -> Layout | None:
    """The layout a rendered (or live) workload runs: its replicas, and the TP and max-num-seqs its pod
    template records. None for an object that is no workload of ours or carries no layout."""
    if obj.get("kind") not in tuple(WorkloadKind):
        return None
    notes = (_pod_template(obj).get("metadata") or {}).get("annotations") or {}
    if not isinstance(notes, dict):
        return None
    return layout_read_back(notes.get(TP_ANNOTATION), notes.get(SEQS_ANNOTATION),
                            (obj.get("spec") or {}).get("replicas", 1))


def layout_read_back(tp: object, max_num_seqs: object, replicas: object) -> Layout | None:
    """A layout read back from what anyone may edit (a workload's annotations and replicas, the resource's
    status): None unless each figure is one the operator could have applied, a TP of ALLOWED_TP_SIZES and
    max-num-seqs and replicas within the CRD's bounds. The operator re-applies the layout it reads back, so
    an annotation edited to TP 3 (which splits no model's heads) or max-num-seqs 100,000 must not become
    the workload it renders; the caller falls back to what it recorded, or to a first visit's plan."""
    counts = (_count_read_back(tp), _count_read_back(max_num_seqs), _count_read_back(replicas))
    if counts[0] not in ALLOWED_TP_SIZES or counts[1] is None or not 1 <= counts[1] <= CONCURRENCY_MAX:
        return None
    if counts[2] is None or counts[2] > REPLICAS_MAX:
        return None
    return Layout(counts[0], counts[1], counts[2])


def _count_read_back(value: object) -> int | None:
    """A non-negative count written as an integer, or as the ASCII digits an annotation holds; not a bool,
    a fraction, a sign, `1_0` or another script's digits, which int() would take."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value >= 0 else None
    count = plain_number(value, integer=True) if isinstance(value, str) and value[:1] not in "+-" else None
    return count if isinstance(count, int) else None


def _rolling(max_surge: int, max_unavailable: int) -> Obj:
    if max_surge < 0 or max_unavailable < 0 or max_surge + max_unavailable == 0:
        raise ValueError(f"a rollout needs maxSurge or maxUnavailable above 0, got {max_surge}/{max_unavailable}")
    return {"maxUnavailable": max_unavailable, "maxSurge": max_surge}


def rollout_strategy_of(obj: Obj) -> tuple[int, int]:
    """The rolling update's (maxSurge, maxUnavailable) as pod counts. What the operator renders when a
    value is not a count it wrote (absent, a percentage): surge 1, none unavailable."""
    spec = obj.get("spec") or {}
    strategy = spec.get("strategy") or spec.get("rolloutStrategy") or {}
    rolling = strategy.get("rollingUpdate") or strategy.get("rollingUpdateConfiguration") or {}
    surge, unavailable = rolling.get("maxSurge"), rolling.get("maxUnavailable")
    counts = [v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else None for v in (surge, unavailable)]
    if counts[0] is None or counts[1] is None or counts[0] + counts[1] == 0:
        return 1, 0
    return counts[0], counts[1]
