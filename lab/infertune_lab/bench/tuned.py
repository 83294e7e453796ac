"""The infertune policy: what the operator does every cycle, run against the twin in virtual time.

Nothing here decides. The resource is seed 000's example with the coding-agent ServingPolicy,
resolved by `actuate.request.resolve`; each pod's /metrics samples (the exporter's, as the text
parser would return them) are read by the real `PodsSource` (deltas, fault rules) into the real
`Observation`; the poller runs
every 15 s as the operator's does, and every `spec.tuning.interval` the `tune` handler's body runs:
feed `FitMemory`, call `controller.cycle.run_cycle`, apply `outcome.apply`, keep `outcome.status`
for the next cycle. The virtual clock starts at EPOCH so timestamps in the status look real.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from infertune.actuate.request import Resolved, resolve, starting_layout
from infertune.api.policy import parse_policy
from infertune.api.quantities import parse_duration
from infertune.api.spec import parse_spec
from infertune.controller.cycle import CycleInput, run_cycle
from infertune.controller.status import WorkloadState, iso, layout_of
from infertune.model.early_warning import WarningPolicy
from infertune.observe import Expected, FitMemory, PodsSource, PodTarget, Snapshot
from infertune.observe.history import PressureHistory
from infertune.observe.textformat import Reading, read_samples
from infertune.planner.types import Layout
from infertune_lab.bench.actuation import Actuator
from infertune_lab.bench.metrics import Slo
from infertune_lab.sim.exporter import ReplicaView, samples

REPO = Path(__file__).resolve().parents[3]
EXAMPLE = REPO / "examples/kimi-k2.6-b200.yaml"
POLICY = REPO / "policies/coding-agent.yaml"
EPOCH = 1_767_225_600.0  # 2026-01-01T00:00:00Z
POLL_SECONDS = 15.0  # OperatorContext.poll_seconds


def _document(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise FileNotFoundError(f"{path}: the bench resource is built from it (run from a checkout)")
    loaded: dict[str, Any] = yaml.safe_load(path.read_text())
    return loaded


def bench_resource(pool_gpus: int, startup_seconds: float | None = None,
                   expected_rps: float | None = None) -> tuple[Resolved, str, str]:
    """(resolved spec, namespace, name): the example resource sized for the bench's pool.

    Only the pool and replica bounds, the load time and the starting demand hint (when given) change; the SLO,
    TP sizes, concurrency range and guardrails are the example's and the policy's own.
    """
    doc, policy = _document(EXAMPLE), _document(POLICY)
    spec = doc["spec"]
    spec["hardware"]["poolGpus"] = pool_gpus
    spec["tuning"]["replicas"]["max"] = pool_gpus // min(spec["tuning"]["tensorParallelSizes"])
    if startup_seconds is not None:
        spec["engine"]["startupSeconds"] = round(startup_seconds)
    if expected_rps is not None:
        spec["workload"] = {**spec.get("workload", {}), "expectedRequestsPerSecond": f"{expected_rps:.3f}"}
    resolved = resolve(parse_spec(spec), parse_policy(policy["spec"]), None)
    return resolved, doc["metadata"]["namespace"], doc["metadata"]["name"]


def slo_of(resolved: Resolved) -> Slo:
    slo = resolved.request.slo
    if slo.max_ttft_seconds is None or slo.min_stream_tps is None:
        raise ValueError("the bench needs a TTFT limit and a per-stream floor in the policy's SLO")
    return Slo(slo.max_ttft_seconds, slo.min_stream_tps)


@dataclass
class Infertune:
    resolved: Resolved
    namespace: str
    deployment: str
    name: str = "infertune"
    max_surge: int | None = 1  # the operator renders maxSurge 1, maxUnavailable 0
    memory: FitMemory = field(default_factory=FitMemory)
    history: PressureHistory = field(default_factory=PressureHistory)
    status: dict[str, Any] = field(default_factory=dict)
    cycles: int = 0
    _snapshot: Snapshot | None = None
    _source: PodsSource | None = None
    _next_poll: float = 0.0
    _last_cycle: float | None = None

    def start(self) -> Layout:
        """What `converge` applies on create: the plan on the hints, before any metric."""
        layout, _ = starting_layout(self.resolved, EPOCH)
        self.status = {"applied": {"tensorParallelSize": layout.tensor_parallel_size,
                                   "maxNumSeqs": layout.max_num_seqs, "replicas": layout.replicas,
                                   "workloadKind": "Deployment", "appliedAt": iso(EPOCH)},
                       "replicas": layout.replicas}
        return layout

    def tick(self, now: float, actuator: Actuator) -> None:
        if now >= self._next_poll:
            self._next_poll = now + POLL_SECONDS
            self._snapshot = self._poll(now, actuator)
        interval = parse_duration(self.resolved.spec.tuning.interval)
        if self._last_cycle is not None and now - self._last_cycle < interval * 0.9:  # OperatorContext.due
            return
        self._last_cycle = now
        self._cycle(EPOCH + now, actuator)

    def close(self) -> None:
        if self._source is not None:
            self._source.close()

    def _poll(self, now: float, actuator: Actuator) -> Snapshot:
        fleet = actuator.fleet
        if self._source is None:
            def fetch(target: PodTarget) -> Reading:
                # The samples the pod's /metrics would print, without printing and parsing them at every
                # poll (that was two thirds of a run); tests/unit/test_sim_exporter.py pins the equality.
                return read_samples(samples(ReplicaView.of(fleet.replicas[target.pod].engine)))

            origin = actuator.origin
            self._source = PodsSource([], clock=lambda: EPOCH + fleet.now - origin, fetch=fetch, workers=1)
        # The controller scrapes the ready pods; loading and terminating ones are no endpoints, and are
        # not expected either (controller/context.py, the Pods source).
        ready = [r for r in actuator.serving() if actuator.ready(r)]
        self._source.set_targets([PodTarget(self.namespace, self.deployment, r.name, f"http://{r.name}:8000/metrics")
                                  for r in ready])
        expected = {(self.namespace, self.deployment): Expected(frozenset(r.name for r in ready), len(ready))}
        snapshot = self._source.poll(expected, EPOCH + now)
        self.history.record(snapshot)
        return snapshot

    def _workload(self, actuator: Actuator, applied: Layout | None) -> WorkloadState | None:
        """The Deployment status the operator's index would hold: ready pods, and those on the applied shape."""
        if applied is None:
            return None
        ready = [r for r in actuator.serving() if actuator.ready(r)]
        updated = [r for r in ready if (r.config.tp, r.config.max_num_seqs)
                   == (applied.tensor_parallel_size, applied.max_num_seqs)]
        return WorkloadState(desired=applied.replicas, ready=len(ready), updated=len(updated))

    def _cycle(self, now: float, actuator: Actuator) -> None:
        """controller/handlers.py `tune`, minus the API writes."""
        key = (self.namespace, self.deployment)
        obs = None if self._snapshot is None else self.history.settled(key, self._snapshot.get(*key))
        applied = layout_of(self.status.get("applied"))
        workload = self._workload(actuator, applied)
        mid_rollout = workload is not None and workload.mid_rollout
        if obs is not None and obs.available and applied is not None and obs.fit_samples and not mid_rollout:
            self.memory.add(applied.tensor_parallel_size, obs.fit_samples, now)
        warning = None if obs is None or not obs.available else self.history.warning(
            key, now, obs.preemption_rate, WarningPolicy(headroom=self.resolved.request.kv_headroom))
        outcome = run_cycle(CycleInput(self.namespace, self.deployment, 1, False, self.resolved, self.status, obs,
                                       self.memory.fits(), now, warning, workload, self.memory.to_status()))
        self.cycles += 1
        if outcome.apply is not None:
            actuator.apply(outcome.apply)
        self.status = outcome.status
