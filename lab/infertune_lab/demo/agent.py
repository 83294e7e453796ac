"""The fleet agent: the kubelet (and the Deployment controller) of the demo's emulated cluster.

It lists the Deployments the operator owns (label `infertune.io/deployment`) over HTTP and keeps
`spec.replicas` simulated vLLM replicas of each one's current pod template running in a LiveFleet,
each built from the container's args (`ReplicaConfig.from_args`) and routable only after the model
load delay. A new template rolls as the Deployment's strategy says (maxUnavailable 0: the new
replicas load while the old ones serve, then the old ones drain); a scale-down drains. For every
replica there is a Pod object (template labels, an ownerReference, `status.podIP` a loopback
address 127.0.0.N of its own, phase Running, a Ready condition once loaded), each replica serves
/metrics and /health on podIP:port, and the Deployment's status counts them. Prometheus finds the
pods through a file_sd file the agent rewrites on every change, as a PodMonitor would.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

from infertune.actuate.workload import DEPLOYMENT_LABEL
from infertune.observe.promql import Labels
from infertune_lab.demo.cluster import DEPLOYMENTS, PODS, ApiError, KubeHttp
from infertune_lab.demo.prometheus import write_file_sd
from infertune_lab.demo.rollout import PodState, Strategy, rollout_step, template_hash
from infertune_lab.sim.config import ReplicaConfig
from infertune_lab.sim.live import LiveFleet

Obj = dict[str, Any]


@dataclass
class SimPod:
    name: str
    namespace: str
    deployment: str
    template: str
    ip: str
    port: int
    ready: bool = False
    draining: bool = False

    @property
    def address(self) -> str:
        return f"{self.ip}:{self.port}"


def loopback_ip(index: int) -> str:
    """127.0.0.2, 127.0.0.3, ...: the whole 127/8 is local on Linux, so every pod gets an IP of its own."""
    index += 2  # .0 is the network, .1 is where Prometheus and the API listen
    return f"127.{index // 65_536 % 256}.{index // 256 % 256}.{index % 256}"


def engine_port(container: Mapping[str, Any]) -> int:
    args = list(container.get("args") or [])
    if "--port" in args[:-1]:
        return int(args[args.index("--port") + 1])
    ports = container.get("ports") or [{}]
    return int(ports[0].get("containerPort", 8000))


def _ready_condition(ready: bool, reason: str) -> Obj:
    return {"conditions": [{"type": "Ready", "status": "True" if ready else "False", "reason": reason}]}


class FleetAgent:
    def __init__(self, kube: KubeHttp, live: LiveFleet, base: ReplicaConfig, load_delay: float,
                 file_sd: Path | None = None, period: float = 0.5) -> None:
        self.kube = kube
        self.live = live
        self.base = base
        self.load_delay = load_delay
        self.file_sd = file_sd
        self.period = period
        self.errors = 0
        self.last_error = ""
        self._pods: dict[str, SimPod] = {}
        self._ips = itertools.count()
        self._names = itertools.count()
        self._published: list[tuple[str, str]] | None = None

    @property
    def pods(self) -> list[SimPod]:
        return list(self._pods.values())

    async def run(self) -> None:
        """Reconciles until cancelled. API errors are counted and retried, as a kubelet would."""
        while True:
            try:
                await self.sync()
            except (ApiError, aiohttp.ClientError, OSError) as exc:
                self.errors += 1
                self.last_error = str(exc)
            await asyncio.sleep(self.period)

    async def sync(self) -> None:
        if self.live.error is not None:
            raise RuntimeError(f"the simulated fleet stopped: {self.live.error!r}")
        await self._refresh_readiness()
        deployments = [d for d in await self.kube.list(DEPLOYMENTS)
                       if DEPLOYMENT_LABEL in ((d.get("metadata") or {}).get("labels") or {})]
        live_keys = set()
        for deployment in deployments:
            meta = deployment["metadata"]
            live_keys.add((meta.get("namespace"), meta["name"]))
            await self._reconcile(deployment)
        for pod in self.pods:
            if (pod.namespace, pod.deployment) not in live_keys and not pod.draining:
                await self._drain(pod)
        await self._collect_gone()
        self._publish()

    # --- one Deployment ------------------------------------------------------------------------
    async def _reconcile(self, deployment: Obj) -> None:
        meta, spec = deployment["metadata"], deployment["spec"]
        template = spec["template"]
        revision = template_hash(template)
        mine = [p for p in self._pods.values()
                if (p.namespace, p.deployment) == (meta.get("namespace"), meta["name"]) and not p.draining]
        step = rollout_step([PodState(p.name, p.template, p.ready) for p in mine], revision,
                            int(spec.get("replicas", 1)), Strategy.of(spec))
        if step.start:
            container = template["spec"]["containers"][0]
            config = ReplicaConfig.from_args(container.get("args") or [], self.base).with_(
                load_delay_seconds=self.load_delay)
            for _ in range(step.start):
                await self._start(deployment, revision, config, engine_port(container))
        for name in step.drain:
            await self._drain(self._pods[name])
        await self._write_status(deployment, revision)

    async def _start(self, deployment: Obj, revision: str, config: ReplicaConfig, port: int) -> None:
        meta, template = deployment["metadata"], deployment["spec"]["template"]
        namespace, name = meta.get("namespace"), meta["name"]
        pod = SimPod(f"{name}-{revision[:8]}-{next(self._names)}", namespace, name, revision,
                     loopback_ip(next(self._ips)), port)
        self.live.add_replica(config, pod.name, port, host=pod.ip)
        self._pods[pod.name] = pod
        tmeta = template.get("metadata") or {}
        await self.kube.create(PODS, {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": pod.name, "namespace": namespace,
                         "labels": {**(tmeta.get("labels") or {}), "pod-template-hash": revision},
                         "annotations": dict(tmeta.get("annotations") or {}),
                         "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": name,
                                              "uid": meta.get("uid", ""), "controller": True}]},
            "spec": template.get("spec") or {},
            "status": {"phase": "Running", "podIP": pod.ip, **_ready_condition(False, "ModelLoading")},
        })

    async def _drain(self, pod: SimPod) -> None:
        """Out of service at once; the replica finishes what it holds, then its pod goes."""
        self.live.remove_replica(pod.name, drain=True)
        pod.draining, pod.ready = True, False
        await self.kube.patch(PODS, pod.namespace, pod.name, {"status": _ready_condition(False, "Terminating")},
                              sub="status")

    async def _write_status(self, deployment: Obj, revision: str) -> None:
        meta = deployment["metadata"]
        mine = [p for p in self._pods.values()
                if (p.namespace, p.deployment) == (meta.get("namespace"), meta["name"]) and not p.draining]
        ready = sum(p.ready for p in mine)
        status = {"observedGeneration": meta.get("generation", 1), "replicas": len(mine),
                  "updatedReplicas": sum(p.template == revision for p in mine),
                  "readyReplicas": ready, "availableReplicas": ready}
        current = deployment.get("status") or {}
        if any(current.get(k) != v for k, v in status.items()):
            await self.kube.patch(DEPLOYMENTS, meta.get("namespace"), meta["name"], {"status": status}, sub="status")

    # --- every pod -----------------------------------------------------------------------------
    async def _refresh_readiness(self) -> None:
        for pod in self.pods:
            if pod.draining or pod.ready:
                continue
            view = self.live.view(pod.name)
            if view is not None and view.ready:
                pod.ready = True
                await self.kube.patch(PODS, pod.namespace, pod.name, {"status": _ready_condition(True, "Loaded")},
                                      sub="status")

    async def _collect_gone(self) -> None:
        """Pods whose replica has left the fleet (drained): delete them, as the kubelet reports."""
        for pod in self.pods:
            if self.live.view(pod.name) is None:
                del self._pods[pod.name]
                await self.kube.delete(PODS, pod.namespace, pod.name)

    def _publish(self) -> None:
        state = sorted((p.name, p.address) for p in self._pods.values())
        if state == self._published:
            return
        self._published = state
        if self.file_sd is not None:
            write_file_sd(self.file_sd, file_sd_groups(self.pods))


def file_sd_groups(pods: Sequence[SimPod], labels: Labels | None = None) -> list[Obj]:
    """Every pod the fleet holds, loading and draining ones included, as a PodMonitor scrapes them."""
    names = labels or Labels()
    return [{"targets": [p.address],
             "labels": {names.namespace: p.namespace, names.deployment: p.deployment, names.pod: p.name}}
            for p in sorted(pods, key=lambda p: p.name)]
