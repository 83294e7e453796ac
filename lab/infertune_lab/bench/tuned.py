"""The infertune policy: the operator's own Reconciler, driven against the twin in virtual time.

Nothing here decides. The resource is the example InferenceDeployment with the coding-agent
ServingPolicy (only the pool, the replica bound, the load time and the first demand hint change;
the metrics source is the pods, as the bench reads each replica's samples). Its ports are in
memory: `TwinCluster` renders nothing itself: it receives the Deployment the reconciler renders
with the real builders and hands its layout and rollout strategy to the actuator (the Deployment
controller of the bench), and reports the rollout back as a Deployment's status would; the metrics
hub is the operator's own, fed every 15 s by the real `PodsSource` reading each ready replica's
samples (what prometheus_client's parser returns for its /metrics text). Every 30 s the reconciler's
`tune` runs exactly as the kopf timer runs it. The virtual clock starts at EPOCH so timestamps in
the status look real.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog
import yaml

from infertune.actuate.workload import WorkloadKind, layout_of_workload, rollout_strategy_of
from infertune.api.policy import parse_policy
from infertune.api.spec import parse_spec
from infertune.controller.hub import MetricsHub
from infertune.controller.memory import MemoryCluster, MemoryReport
from infertune.controller.reconciler import Reconciler, Resource
from infertune.controller.status import WorkloadState
from infertune.errors import UserError
from infertune.observe import Expected, PodsSource, PodTarget
from infertune.observe.textformat import Reading, read_samples
from infertune.planner.request import Resolved, resolve
from infertune.planner.types import Layout
from infertune_lab.bench.actuation import Actuator, shape_of
from infertune_lab.bench.cases import RequestShape
from infertune_lab.bench.metrics import Slo
from infertune_lab.sim.exporter import ReplicaView, samples

REPO = Path(__file__).resolve().parents[3]
EXAMPLE = REPO / "examples/kimi-k2.6-b200.yaml"
POLICY = REPO / "policies/coding-agent.yaml"
EPOCH = 1_767_225_600.0  # 2026-01-01T00:00:00Z
POLL_SECONDS = 15.0  # the operator's default --poll-seconds
Key = tuple[str, str]


def _document(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise FileNotFoundError(f"{path}: the bench resource is built from it (run from a checkout)")
    loaded: dict[str, Any] = yaml.safe_load(path.read_text())
    return loaded


@dataclass(frozen=True)
class BenchResource:
    """The example resource as the bench runs it, and the ServingPolicy it names."""

    document: dict[str, Any]
    policy: dict[str, Any]

    @property
    def namespace(self) -> str:
        return str(self.document["metadata"]["namespace"])

    @property
    def name(self) -> str:
        return str(self.document["metadata"]["name"])

    def resolved(self) -> Resolved:
        return resolve(parse_spec(self.document["spec"]), parse_policy(self.policy["spec"]), None)


def bench_resource(pool_gpus: int, startup_seconds: float | None = None,
                   expected_rps: float | None = None, burst_headroom_percent: int | None = None,
                   expected_shape: RequestShape | None = None, burst_percentile: int | None = None) -> BenchResource:
    """The example resource sized for the bench's pool. Only the pool and replica bounds, the load
    time, the metrics source (the pods), the starting hints (the demand and the request's tokens, as
    the model team would write them for its traffic) and the burst headroom and percentile (when given;
    its frontier's knob) change; the SLO, TP sizes, concurrency range and guardrails are the example's
    and the policy's own."""
    doc, policy = _document(EXAMPLE), _document(POLICY)
    spec = doc["spec"]
    if burst_headroom_percent is not None:
        spec["tuning"]["burstHeadroomPercent"] = burst_headroom_percent
    if burst_percentile is not None:
        spec["tuning"]["burstPercentile"] = burst_percentile
    smallest = min(spec["tuning"]["tensorParallelSizes"])
    if pool_gpus < smallest:
        # Said here in the flag's terms: the resource's own check would name replicas.max, a field
        # the user never wrote.
        raise UserError(f"--pool-gpus {pool_gpus}: the example's smallest layout is TP{smallest}, so the pool "
                        f"needs at least {smallest} GPUs")
    spec["hardware"]["poolGpus"] = pool_gpus
    spec["tuning"]["replicas"]["max"] = pool_gpus // smallest
    spec["metrics"] = {"source": "Pods"}
    if startup_seconds is not None:
        spec["engine"]["startupSeconds"] = round(startup_seconds)
    if expected_rps is not None:
        spec["workload"] = {**spec.get("workload", {}), "expectedRequestsPerSecond": f"{expected_rps:.3f}"}
    if expected_shape is not None:
        # Over the policy's preset: a model team serving chat behind the coding-agent policy's SLO says so.
        spec["workload"] = {**spec.get("workload", {}), "freshTokens": max(round(expected_shape.fresh_tokens), 0),
                            "cachedTokens": max(round(expected_shape.cached_tokens), 0),
                            "outputTokens": max(round(expected_shape.output_tokens), 1)}
    return BenchResource(doc, policy)


def slo_of(resolved: Resolved) -> Slo:
    slo = resolved.request.slo
    if slo.max_ttft_seconds is None or slo.min_stream_tps is None:
        raise UserError("the bench needs a TTFT limit and a per-stream floor in the policy's SLO")
    return Slo(slo.max_ttft_seconds, slo.min_stream_tps)


class TwinCluster(MemoryCluster):
    """The Cluster port over the bench's actuator: the Deployment the reconciler renders goes to the
    actuator (the bench's Deployment controller) with its rollout strategy, and its rollout comes
    back as a Deployment's status would report it."""

    def __init__(self, policies: Mapping[str, Mapping[str, Any]]) -> None:
        super().__init__(policies)
        self.actuator: Actuator | None = None
        self.strategy: tuple[int, int] | None = None  # (maxSurge, maxUnavailable) last rendered

    def workload(self, key: Key, kind: WorkloadKind) -> WorkloadState | None:
        actuator = self.actuator
        if actuator is None or actuator.target is None:
            return super().workload(key, kind)  # before the fleet runs: what was applied
        if kind is not WorkloadKind.DEPLOYMENT:
            return None
        target = actuator.target
        ready = [r for r in actuator.serving() if actuator.ready(r)]
        # As a Deployment counts them: every live pod (Pending and loading included), and those of the
        # current template.
        pods = actuator.pods()
        updated = [p for p in pods if shape_of(p) == (target.tensor_parallel_size, target.max_num_seqs)]
        surge, unavailable = self.strategy or (1, 0)
        return WorkloadState(desired=target.replicas, ready=len(ready), updated=len(updated), pods=len(pods),
                             layout=target, max_surge=surge, max_unavailable=unavailable)

    def apply(self, objects: Sequence[dict[str, Any]]) -> bool:
        before = len(self.applied)
        changed = super().apply(objects)
        for obj in self.applied[before:]:
            layout = layout_of_workload(obj)
            if layout is None:
                continue  # the Service
            self.strategy = rollout_strategy_of(obj)
            if self.actuator is not None:
                self.actuator.apply(layout, *self.strategy)
        return changed

    def first_layout(self) -> Layout:
        """What the reconciler applied before the fleet existed (its converge on create)."""
        layouts = [found for found in map(layout_of_workload, self.applied) if found is not None]
        if not layouts:
            raise RuntimeError("the reconciler applied no workload on create")
        return layouts[-1]


class Infertune:
    """The benchmark's infertune policy. Its operator side (ports, hub, reconciler) is built by
    `start()`, in the process that runs it: the benchmark hands policies to worker processes, and a
    reconciler (its metrics registry, its locks) does not travel between them."""

    name = "infertune"

    def __init__(self, resource: BenchResource) -> None:
        self.resource = resource
        self.cluster = TwinCluster({resource.document["spec"]["policyRef"]["name"]: resource.policy["spec"]})
        self.report = MemoryReport()
        self.cycles = 0
        self._now = 0.0
        self._next_poll = 0.0
        self._source: PodsSource | None = None
        self._operator: tuple[MetricsHub, Reconciler] | None = None

    def _clock(self) -> float:
        return EPOCH + self._now

    @property
    def hub(self) -> MetricsHub:
        return self._built()[0]

    @property
    def reconciler(self) -> Reconciler:
        return self._built()[1]

    def _built(self) -> tuple[MetricsHub, Reconciler]:
        if self._operator is None:
            hub = MetricsHub()
            # The operator's log lines, one a cycle, have no reader in a benchmark of thousands of cycles.
            quiet = structlog.wrap_logger(structlog.ReturnLogger())
            self._operator = hub, Reconciler(self.cluster, hub, clock=self._clock, logger=quiet)
        return self._operator

    @property
    def key(self) -> Key:
        return self.resource.namespace, self.resource.name

    @property
    def max_surge(self) -> int | None:
        return None if self.cluster.strategy is None else self.cluster.strategy[0]

    def _resource(self) -> Resource:
        doc = self.resource.document
        return Resource(self.resource.namespace, self.resource.name, "bench-uid", doc["spec"],
                        self.report.current, 1)

    def start(self) -> Layout:
        """What `converge` applies on create: the plan on the hints, before any metric."""
        self.reconciler.converge(self._resource(), self.report)
        return self.cluster.first_layout()

    def tick(self, now: float, actuator: Actuator) -> None:
        self.cluster.actuator = actuator
        self._now = now
        if now >= self._next_poll:
            self._next_poll = now + POLL_SECONDS
            self._poll(actuator)
        if self.reconciler.tune(self._resource(), self.report) is not None:
            self.cycles += 1

    def close(self) -> None:
        if self._source is not None:
            self._source.close()

    def _poll(self, actuator: Actuator) -> None:
        """The operator's pods source: the ready pods are the endpoints, and the expected ones."""
        fleet = actuator.fleet
        if self._source is None:
            def fetch(target: PodTarget) -> Reading:
                # The samples the pod's /metrics would print, without printing and parsing them at every
                # poll; tests/unit/test_sim_exporter.py pins the equality.
                return read_samples(samples(ReplicaView.of(fleet.replicas[target.pod].engine)))

            origin = actuator.origin
            # Rates over the operator's default window (--metrics-window 1m), as the example resource's
            # Prometheus reads them: the bench sizes on the reading a deployment is sized on.
            self._source = PodsSource([], clock=lambda: EPOCH + fleet.now - origin, fetch=fetch, workers=1)
        ready = [r for r in actuator.serving() if actuator.ready(r)]
        namespace, name = self.key
        self._source.set_targets([PodTarget(namespace, name, r.name, f"http://{r.name}:8000/metrics") for r in ready])
        routes = self.hub.by_source()
        for source, keys in routes.items():
            names = frozenset(r.name for r in ready)
            expected = {key: self.hub.expected.get(key, Expected()).ready(names) for key in keys}
            self.hub.ingest(source, self._source.poll(expected, EPOCH + self._now), keys, poll_samples=True)
