"""The one reconciler: what happens to an InferenceDeployment when it changes (converge) and on every
tuning cycle (tune). Its I/O sits behind small protocols, so the kopf handlers, the demo and the
benchmark all drive this same object: the handlers over the API server, the lab over a simulated
fleet in virtual time.

    converge: resolve the spec -> render the workload at the running (or starting) layout -> apply
              -> conditions
    tune:     resolve -> read the workload and the metrics -> learn the fit -> plan and decide
              (controller/cycle.py, pure) -> apply per mode -> report status, Events, telemetry

What runs is read back from the workload itself (its replicas and the layout annotations of its pod
template), not from status: a status write lost after an apply can never roll a workload back.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import structlog

from infertune.actuate.workload import Owner, WorkloadKind, desired_objects, selector_string, workload_kind
from infertune.api.conditions import (
    Condition,
    ConditionType,
    ConditionUpdate,
    Reason,
    initial_conditions,
    merge_conditions,
)
from infertune.api.names import name_refusal
from infertune.api.observation import Observation
from infertune.api.quantities import parse_duration
from infertune.api.schema import TuningMode
from infertune.api.spec import parse_spec
from infertune.controller.cycle import CycleInput, CycleOutcome, run_cycle
from infertune.controller.policies import PolicyMemory, PolicyState
from infertune.controller.sources import Route, route_of
from infertune.controller.status import (
    WorkloadState,
    applied_status,
    iso,
    layout_of,
    profile_from_status,
    profile_to_status,
    ready_condition,
    records,
    section,
)
from infertune.controller.telemetry import Telemetry
from infertune.errors import OwnershipError, PendingError, SpecError, StatusError
from infertune.model.early_warning import CliffWarning
from infertune.model.forecast import DemandPoint, SeasonalProfile
from infertune.observe.figures import Expected, ReplicaLimits
from infertune.observe.fitmemory import FitMemory, FitSample
from infertune.observe.plausible import replica_limits
from infertune.planner.request import Resolved, pinned, resolve, starting_layout
from infertune.planner.types import Layout

Key = tuple[str, str]
Obj = dict[str, Any]
PAUSED = "infertune.io/paused"
# The shortest window the request shape is averaged over (a few polls).
SHAPE_MIN_S = 30.0
# How often the learnt demand profile is written to status.
PROFILE_WRITE_SECONDS = 600.0
# A timer fires every cycle_seconds; a resource's own interval is honoured to within this share, so
# that timer jitter does not skip every other cycle.
DUE_SHARE = 0.9
log = structlog.get_logger("infertune.controller")


# --- the ports ---------------------------------------------------------------------------------
class Cluster(Protocol):
    """The API server as the reconciler needs it. Raises ClusterError on a failed call."""

    def workload(self, key: Key, kind: WorkloadKind) -> WorkloadState | None:
        """The owned workload's rollout as its controller reports it; None when it does not exist."""
        ...

    def serving_policy(self, name: str) -> Mapping[str, Any] | None:
        """The spec of the named ServingPolicy; None when there is none."""
        ...

    def config_map_value(self, namespace: str, name: str, key: str) -> str | None:
        """One key of a ConfigMap; None when the ConfigMap does not exist (KeyError: no such key)."""
        ...

    def apply(self, objects: Sequence[Obj]) -> bool:
        """Applies each object unless the live one carries its input hash; True when any changed."""
        ...


class Metrics(Protocol):
    """What the reconciler reads and tells the metrics side (controller/hub.py)."""

    def route(self, key: Key, route: Route) -> None: ...

    def expect(self, key: Key, expected: Expected) -> None: ...

    def observation(self, key: Key, horizon: float | None = None) -> Observation | None: ...

    def warning(self, key: Key, obs: Observation | None, headroom: float, now: float) -> CliffWarning | None: ...

    def take_fit_samples(self, key: Key, since: float) -> list[FitSample]: ...

    def demand_points(self, key: Key) -> tuple[DemandPoint, ...]: ...
    def arrival_points(self, key: Key) -> tuple[DemandPoint, ...]: ...

    def take_season(self, key: Key) -> list[DemandPoint]: ...

    def forget(self, key: Key) -> None: ...


class Report(Protocol):
    """Where a visit's results go: the resource's status (only what changed is written) and Events."""

    def status(self, new: Mapping[str, Any]) -> None: ...

    def event(self, kind: str, reason: str, message: str) -> None: ...


@dataclass(frozen=True)
class Resource:
    """An InferenceDeployment as the API server last reported it."""

    namespace: str
    name: str
    uid: str
    spec: Mapping[str, Any]
    status: Mapping[str, Any] = field(default_factory=dict)
    generation: int | None = None
    annotations: Mapping[str, str] = field(default_factory=dict)

    @property
    def key(self) -> Key:
        return self.namespace, self.name

    @property
    def paused(self) -> bool:
        return str(self.annotations.get(PAUSED, "")).lower() == "true"

    @property
    def owner(self) -> Owner:
        return Owner(self.name, self.namespace, self.uid)


@dataclass(frozen=True)
class Converged:
    layout: Layout
    changed: bool  # the workload was applied (it differed, or did not exist)
    held: bool  # paused or tuning Off: the workload was left as it is


# --- the reconciler ----------------------------------------------------------------------------
class Reconciler:
    def __init__(self, cluster: Cluster, metrics: Metrics, clock: Callable[[], float] = time.time,
                 telemetry: Telemetry | None = None, logger: Any = None) -> None:
        self.cluster = cluster
        self.metrics = metrics
        self.clock = clock
        self.telemetry = telemetry or Telemetry()
        self.log = logger if logger is not None else log
        self._fit_memories: dict[Key, FitMemory] = {}
        self._profiles: dict[Key, tuple[SeasonalProfile, float]] = {}  # the profile, when status last had it
        self._resolved: dict[Key, tuple[str, Resolved]] = {}
        self._last_cycle: dict[Key, float] = {}
        self._policies = PolicyMemory()
        self._policy_states: dict[Key, PolicyState] = {}

    # --- resolution ---------------------------------------------------------------------------
    def resolve(self, resource: Resource) -> Resolved:
        """The effective spec and plan request, cached per spec, policy and model ConfigMap content
        (an edited ConfigMap is noticed on the next cycle). Raises SpecError naming the field, or
        PendingError when a ServingPolicy or ConfigMap it names does not exist yet. A policy that
        existed and was deleted is replaced by its last known spec (`policy_state` says so)."""
        refusal = name_refusal(resource.name)
        if refusal is not None:  # a CRD from before its name rule admits it, and its Service would be refused
            raise SpecError(refusal)
        parsed = parse_spec(dict(resource.spec))
        policy, policy_raw, state = self._policies.resolve(
            resource.key, resource.status, parsed.policy_ref.name if parsed.policy_ref else None,
            self.cluster.serving_policy, self.clock())
        config = None
        ref = parsed.model.config_map_ref
        if ref is not None:
            try:
                config = self.cluster.config_map_value(resource.namespace, ref.name, ref.key)
            except KeyError:
                raise SpecError(f"spec.model.configMapRef.key: ConfigMap {ref.name} has no key {ref.key!r}") from None
            if config is None:
                raise PendingError(f"spec.model.configMapRef.name: ConfigMap {resource.namespace}/{ref.name} does "
                                   "not exist (yet); waiting for it", Reason.CONFIG_MAP_NOT_FOUND)
        self.metrics.route(resource.key, route_of(parsed, resource.namespace))
        self._policy_states[resource.key] = state
        token = repr((resource.generation, resource.spec, policy_raw, config))
        cached = self._resolved.get(resource.key)
        if cached is not None and cached[0] == token:
            return cached[1]
        resolved = resolve(parsed, policy, config)
        self._resolved[resource.key] = (token, resolved)
        return resolved

    def policy_state(self, key: Key) -> PolicyState:
        """What the last resolve found of the resource's ServingPolicy."""
        return self._policy_states.get(key, PolicyState())

    def invalid(self, resource: Resource, error: SpecError, report: Report) -> None:
        """InvalidSpec and Ready=False, with the error; the workload is left as it is."""
        self._hold(resource, report, error, [
            ConditionUpdate(ConditionType.INVALID_SPEC.value, "True", Reason.INVALID_SPEC.value, str(error)),
            ConditionUpdate(ConditionType.READY.value, "False", Reason.INVALID_SPEC.value, str(error)),
        ], Reason.INVALID_SPEC)

    def pending(self, resource: Resource, error: PendingError, report: Report) -> None:
        """Ready=False (and PolicyResolved=False) saying what the resource waits for; nothing changes."""
        updates = [ConditionUpdate(ConditionType.INVALID_SPEC.value, "False", Reason.SPEC_VALID.value,
                                   "the spec is valid"),
                   ConditionUpdate(ConditionType.READY.value, "False", error.reason, str(error))]
        if error.reason == Reason.POLICY_NOT_FOUND:
            updates.append(ConditionUpdate(ConditionType.POLICY_RESOLVED.value, "False", error.reason, str(error)))
        self._hold(resource, report, error, updates, error.reason)

    def conflict(self, resource: Resource, error: OwnershipError, report: Report) -> None:
        """Ready=False naming the object that is not ours; nothing is applied."""
        self._hold(resource, report, error, [
            ConditionUpdate(ConditionType.READY.value, "False", Reason.OWNERSHIP_CONFLICT.value, str(error)),
            ConditionUpdate(ConditionType.PROGRESSING.value, "False", Reason.OWNERSHIP_CONFLICT.value, str(error)),
        ], Reason.OWNERSHIP_CONFLICT)

    def _hold(self, resource: Resource, report: Report, error: Exception, updates: list[ConditionUpdate],
              reason: str) -> None:
        now = self.clock()
        conditions = merge_conditions(_conditions(resource, now), updates, iso(now), resource.generation)
        new = {"conditions": [c.wire() for c in conditions], "observedGeneration": resource.generation}
        if _differs(resource.status, new):
            report.event("Warning", reason, str(error))
        report.status(new)

    # --- on create, update and resume ---------------------------------------------------------
    def converge(self, resource: Resource, report: Report) -> Converged:
        """Applies the workload at the layout that runs (or, on the first visit, the plan on the
        workload hints) and sets every condition. Raises SpecError, PendingError or OwnershipError
        after reporting it; the first is permanent, the others are retried."""
        now = self.clock()
        try:
            resolved = self.resolve(resource)
        except SpecError as error:
            self.invalid(resource, error, report)
            raise
        except PendingError as error:
            self.pending(resource, error, report)
            raise
        gpus_per_node = resolved.gpu.gpus_per_node
        workload = self._workload(resource, resolved)
        running = self._running(resource, workload)
        mode = resolved.spec.tuning.mode
        held = running is not None and (resource.paused or mode is TuningMode.OFF)
        layout = starting_layout(resolved, now)[0] if running is None else pinned(running, resolved.spec)
        changed = False
        if not held:
            surge, unavailable = (1, 0) if workload is None else (workload.max_surge, workload.max_unavailable)
            try:
                changed = self.cluster.apply(desired_objects(resource.owner, resolved.spec, layout, gpus_per_node,
                                                             surge, unavailable))
            except OwnershipError as error:
                self.conflict(resource, error, report)
                raise
            if changed:
                workload = self.cluster.workload(resource.key, workload_kind(layout, gpus_per_node))
        self.metrics.expect(resource.key, _expected(workload, _limits(resolved, layout)))
        policy = self.policy_state(resource.key)
        conditions = merge_conditions(_conditions(resource, now), [
            ConditionUpdate(ConditionType.INVALID_SPEC.value, "False", Reason.SPEC_VALID.value, "the spec is valid"),
            ready_condition(None if changed else workload, applied=True),
            ConditionUpdate(ConditionType.PROGRESSING.value, "True" if changed else "False",
                            Reason.ROLLING_OUT.value if changed else Reason.STABLE.value,
                            "applied a changed workload" if changed else "the workload is up to date"),
            *policy.updates,
        ], iso(now), resource.generation)
        stamp = section(resource.status, "applied").get("appliedAt")
        applied_at = iso(now) if changed or not stamp else str(stamp)
        report.status({"conditions": [c.wire() for c in conditions], "observedGeneration": resource.generation,
                       "selector": selector_string(resource.name), "replicas": layout.replicas,
                       "applied": applied_status(layout, gpus_per_node, applied_at), **policy.fields})
        if changed:
            self.log.bind(namespace=resource.namespace, name=resource.name).info(
                "workload applied", tp=layout.tensor_parallel_size, max_num_seqs=layout.max_num_seqs,
                replicas=layout.replicas)
            report.event("Normal", Reason.APPLIED.value, f"TP{layout.tensor_parallel_size} max-num-seqs "
                                                         f"{layout.max_num_seqs} x{layout.replicas}")
        return Converged(layout, changed, held)

    # --- every cycle --------------------------------------------------------------------------
    def tune(self, resource: Resource, report: Report) -> CycleOutcome | None:
        """One tuning cycle, when the resource's interval is due; None when it is not, before the
        first converge, or on an invalid spec (reported, nothing changed)."""
        key, now = resource.key, self.clock()
        if not resource.status.get("applied"):
            return None  # converge has not applied a workload yet
        try:
            resolved = self.resolve(resource)
        except SpecError as error:
            self.invalid(resource, error, report)
            return None
        except PendingError as error:
            self.pending(resource, error, report)
            return None
        if not self._due(key, parse_duration(resolved.spec.tuning.interval), now):
            return None
        gpus_per_node = resolved.gpu.gpus_per_node
        workload = self._workload(resource, resolved)
        running = self._running(resource, workload)
        limits = _limits(resolved, running)
        self.metrics.expect(key, _expected(workload, limits))
        # The request shape is averaged over a model load at most (and at least SHAPE_MIN_S): what the
        # next layout must hold is the traffic of the next load, not of the last quarter hour.
        obs = self.metrics.observation(key, max(resolved.request.guardrails.model_load_seconds, SHAPE_MIN_S))
        warning = self.metrics.warning(key, obs, resolved.request.kv_headroom, now)
        memory = self._fit_memory(resource)
        applied_at = section(resource.status, "applied").get("appliedAt")
        samples = self.metrics.take_fit_samples(key, _timestamp(applied_at, now))
        if running is not None and not (workload is not None and workload.mid_rollout):
            memory.add(running.tensor_parallel_size, samples, now)
        status = dict(resource.status)
        if running is not None:
            status["applied"] = applied_status(running, gpus_per_node, str(
                applied_at or iso(now)))
        profile, profile_status = self._profile(resource, obs, now)
        outcome = run_cycle(CycleInput(resource.namespace, resource.name, resource.generation, resource.paused,
                                       resolved, status, obs, memory.fits(), now, warning, workload,
                                       memory.to_status(), self.metrics.demand_points(key), profile,
                                       profile_status, self.metrics.arrival_points(key)))
        if outcome.apply is not None:
            try:
                self.cluster.apply(desired_objects(resource.owner, resolved.spec, outcome.apply, gpus_per_node,
                                                   outcome.max_surge, outcome.max_unavailable))
            except OwnershipError as error:
                self.conflict(resource, error, report)
                return None
            self.metrics.expect(key, _expected(workload, _limits(resolved, outcome.apply, running)).after_scaling_to(
                outcome.apply.replicas))
        report.status(self.policy_state(key).into(outcome.status, now, resource.generation))
        self.telemetry.record(resource.namespace, resource.name, outcome, obs, now, warning)
        for kind, reason, message in outcome.events:
            report.event(kind, reason, message)
        self.log.bind(namespace=resource.namespace, name=resource.name).info(
            "cycle", action=str(outcome.action), reason=str(outcome.reason),
            recommended=None if outcome.decision.recommended is None else str(outcome.decision.recommended))
        return outcome

    def forget(self, key: Key) -> None:
        """The resource is gone: drop what was kept for it (the workload goes with its owner reference)."""
        for store in (self._fit_memories, self._profiles, self._resolved, self._last_cycle, self._policy_states):
            store.pop(key, None)
        self._policies.forget(key)
        self.metrics.forget(key)
        self.telemetry.forget(*key)

    # --- helpers ------------------------------------------------------------------------------
    def _workload(self, resource: Resource, resolved: Resolved) -> WorkloadState | None:
        """The owned workload as its controller reports it: a Deployment, or a LeaderWorkerSet when an
        allowed TP spans nodes (the kind status recorded is looked at first)."""
        kinds = [WorkloadKind.DEPLOYMENT]
        if max(resolved.request.tp_sizes) > resolved.gpu.gpus_per_node:
            kinds.append(WorkloadKind.LEADER_WORKER_SET)
        recorded = str(section(resource.status, "applied").get("workloadKind") or "")
        kinds.sort(key=lambda kind: kind.value != recorded)
        for kind in kinds:
            found = self.cluster.workload(resource.key, kind)
            # Someone else's workload of the same name is not what runs for this resource; applying
            # over it is refused (OwnershipError), so its layout is never taken for ours.
            if found is not None and not found.foreign_to(resource.uid):
                return found
        return None

    @staticmethod
    def _running(resource: Resource, workload: WorkloadState | None) -> Layout | None:
        """The layout that runs: the workload's own, else what status recorded (none: first visit)."""
        if workload is not None and workload.layout is not None:
            return workload.layout
        return layout_of(resource.status.get("applied"))

    def _profile(self, resource: Resource, obs: Observation | None,
                 now: float) -> tuple[SeasonalProfile, Mapping[str, Any] | None]:
        """The resource's demand profile with this cycle's demand learnt, rebuilt from status after a
        restart; and its status form when the last write is PROFILE_WRITE_SECONDS old (a profile that
        moves every cycle must not rewrite status every cycle)."""
        kept = self._profiles.get(resource.key)
        if kept is None:
            raw = resource.status.get("demandProfile")
            updated_at = section(resource.status, "demandProfile").get("updatedAt")
            kept = (profile_from_status(raw), _timestamp(updated_at, now))
        profile, written = kept
        season = self.metrics.take_season(resource.key)
        if profile.empty and season:  # a first start: the days the source remembers, before any cycle of ours
            for point in season:
                profile = profile.updated(point.time, point.rate)
        demand = None if obs is None else obs.demand_rate
        if demand is not None:
            profile = profile.updated(now, demand)
        due = not profile.empty and now - written >= PROFILE_WRITE_SECONDS
        self._profiles[resource.key] = (profile, now if due else written)
        return profile, profile_to_status(profile, now) if due else None

    def _due(self, key: Key, interval: float, now: float) -> bool:
        last = self._last_cycle.get(key)
        if last is not None and now - last < interval * DUE_SHARE:
            return False
        self._last_cycle[key] = now
        return True

    def _fit_memory(self, resource: Resource) -> FitMemory:
        """The resource's fit memory; after a restart it is rebuilt from status, so nothing learned is lost."""
        memory = self._fit_memories.get(resource.key)
        if memory is None:
            try:
                memory = FitMemory.from_status(resource.status.get("fitSamples"), now=self.clock())
            except StatusError as exc:  # a hand-edited status: start learning again rather than crash-loop
                self.log.bind(namespace=resource.namespace, name=resource.name).warning(
                    "ignoring unreadable status.fitSamples", error=str(exc))
                memory = FitMemory()
            self._fit_memories[resource.key] = memory
        return memory


def _conditions(resource: Resource, now: float) -> list[Condition]:
    return [Condition.from_wire(dict(c)) for c in records(resource.status, "conditions")] or initial_conditions(
        iso(now), resource.generation)


def _differs(current: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    return any(current.get(k) != v for k, v in new.items())


def _expected(workload: WorkloadState | None, limits: ReplicaLimits) -> Expected:
    """Only ready replicas are expected to report: a loading replica is not a missing one."""
    ready = workload.ready if workload is not None and workload.current else None
    return Expected(replicas=ready, limits=limits)


def _limits(resolved: Resolved, *layouts: Layout | None) -> ReplicaLimits:
    """What a replica may report: at the fastest TP and the most streams of any layout it may run
    (the allowed ones, and those running now, old pods of a rollout included)."""
    shown = [layout for layout in layouts if layout is not None]
    req = resolved.request
    tps = {*req.tp_sizes, *(layout.tensor_parallel_size for layout in shown)}
    seqs = max([req.concurrency_max, *(layout.max_num_seqs for layout in shown)])
    return replica_limits(resolved.model, resolved.gpu, tps, seqs)


def _timestamp(text: Any, now: float) -> float:
    """A time the operator wrote in status (RFC 3339, UTC); 0.0 (long ago) when absent or unreadable, or
    when after `now`: no write of ours is dated in the future, and such a stamp read as given would keep
    every fit sample out (appliedAt) or the demand profile from ever being written again (updatedAt)."""
    from datetime import UTC, datetime

    try:
        stamp = datetime.strptime(str(text), "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp()
    except ValueError:
        return 0.0
    return stamp if stamp <= now else 0.0
