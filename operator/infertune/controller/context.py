"""What the handlers share: the Kubernetes client, the one metrics poller and its latest snapshot per
source, the KV pressure history behind the cliff warning, the per-resource fit memories and resolved
specs, telemetry. Passed to kopf as its `memo`."""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import structlog

from infertune.actuate.apply import KubeApiError, KubeClient
from infertune.actuate.request import Resolved, SpecError, resolve
from infertune.actuate.workload import DEPLOYMENT_LABEL
from infertune.api.observation import Observation
from infertune.api.policy import ServingPolicySpec, parse_policy
from infertune.api.spec import parse_spec
from infertune.controller.sources import (
    Ref,
    Route,
    SourceRegistry,
    SourceSpec,
    SourceUnavailable,
    pod_targets,
    route_of,
)
from infertune.controller.telemetry import Telemetry
from infertune.model.early_warning import CliffWarning, WarningPolicy
from infertune.observe.figures import Expected, faulted
from infertune.observe.fitmemory import FitMemory, FitSample
from infertune.observe.history import PressureHistory
from infertune.observe.snapshot import MetricsSource, Snapshot

Key = tuple[str, str]
log = structlog.get_logger("infertune.controller")
# Range queries for the online fit: how often, and how far back on the first (cold or restarted) pass.
FIT_HISTORY_EVERY_SECONDS = 300.0
FIT_HISTORY_BACKFILL_SECONDS = 1800.0
FIT_HISTORY_STEP = "30s"
FIT_BACKLOG_MAX = 256


@dataclass
class OperatorContext:
    kube: KubeClient
    source: MetricsSource | None = None  # the default Prometheus (--prometheus-url)
    poll_seconds: float = 15.0
    cycle_seconds: float = 30.0
    clock: Callable[[], float] = time.time
    telemetry: Telemetry = field(default_factory=Telemetry)
    metrics_window: str = "1m"
    default_token: Ref | None = None  # (kind, namespace, name, key) of the default Prometheus' token
    expected: dict[Key, Expected] = field(default_factory=dict)
    fit_memories: dict[Key, FitMemory] = field(default_factory=dict)
    routes: dict[Key, Route] = field(default_factory=dict)
    snapshots: dict[SourceSpec, Snapshot] = field(default_factory=dict)
    history: PressureHistory = field(default_factory=PressureHistory)
    fit_backlog: dict[Key, list[FitSample]] = field(default_factory=dict)
    _resolved: dict[Key, tuple[str, Resolved]] = field(default_factory=dict)
    _last_cycle: dict[Key, float] = field(default_factory=dict)
    _last_fit_history: dict[SourceSpec, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.sources = SourceRegistry(self.kube, self.source, self.metrics_window, self.default_token)

    # --- reading ---------------------------------------------------------------------------------
    def observation(self, key: Key) -> Observation | None:
        """The resource's Observation from its source's latest snapshot, its request shape averaged over
        the history's horizon (observe/history.py); None before the first poll."""
        route = self.routes.get(key)
        snapshot = None if route is None else self.snapshots.get(route.source)
        return None if snapshot is None else self.history.settled(key, snapshot.get(*key))

    def warning(self, key: Key, obs: Observation | None, headroom: float, now: float) -> CliffWarning | None:
        if obs is None or not obs.available:
            return None
        return self.history.warning(key, now, obs.preemption_rate, WarningPolicy(headroom=headroom))

    def take_fit_backlog(self, key: Key, since: float) -> list[FitSample]:
        """Samples the range queries found for this resource since its layout was applied."""
        return [s for s in self.fit_backlog.pop(key, []) if s.time >= since]

    # --- the one poller --------------------------------------------------------------------------
    async def poll_forever(self) -> None:
        """One query per metric per distinct source, for every deployment it serves, off the event loop."""
        while True:
            try:
                await self.poll_once()
            except Exception as exc:  # a source bug must not kill the poller; timers then hold
                log.warning("metrics poll failed", error=str(exc))
            await asyncio.sleep(self.poll_seconds)

    async def poll_once(self) -> None:
        by_source: dict[SourceSpec, dict[Key, Route]] = defaultdict(dict)
        for key, route in list(self.routes.items()):
            by_source[route.source][key] = route
        for spec, routes in by_source.items():
            now = self.clock()
            snapshot, source = await asyncio.to_thread(self._poll_source, spec, routes, now)
            self.snapshots[spec] = snapshot
            self.history.record(snapshot)
            if source is None or not snapshot.available:
                continue
            if hasattr(source, "fit_history"):
                await self._fit_history(spec, source, now)  # Prometheus: windows from range queries
            else:
                self._collect_poll_samples(snapshot, routes)  # pods: accumulated poll by poll

    def _poll_source(self, spec: SourceSpec, routes: Mapping[Key, Route],
                     now: float) -> tuple[Snapshot, MetricsSource | None]:
        try:
            source = self.sources.get(spec)
            expected = {key: self.expected.get(key, Expected()) for key in routes}
            if spec.kind == "Pods":
                targets = pod_targets(self._pods(routes), {key: route.port for key, route in routes.items()})
                source.set_targets(targets)  # type: ignore[attr-defined]
                ready: dict[Key, set[str]] = defaultdict(set)
                for target in targets:
                    ready[target.key].add(target.pod)
                expected = {key: Expected(frozenset(ready[key]), len(ready[key])) for key in routes}
            return source.poll(expected, now), source
        except SourceUnavailable as exc:
            return Snapshot(time=now, observations={k: faulted(k, exc.fault, str(exc), now) for k in routes},
                            fault=exc.fault, message=str(exc), source=spec.label), None

    def _pods(self, routes: Mapping[Key, Route]) -> list[dict[str, Any]]:
        pods: list[dict[str, Any]] = []
        for namespace in sorted({key[0] for key in routes}):
            try:
                pods += self.kube.list("v1", "Pod", namespace, f"{DEPLOYMENT_LABEL}")
            except KubeApiError as exc:
                log.warning("listing pods failed", namespace=namespace, error=str(exc))
        return pods

    def _collect_poll_samples(self, snapshot: Snapshot, routes: Mapping[Key, Route]) -> None:
        for key in routes:
            obs = snapshot.observations.get(key)
            if obs is not None and obs.available and obs.fit_samples:
                samples = [FitSample(batch, seconds, 1.0, obs.sample_time) for batch, seconds in obs.fit_samples]
                self._queue_samples(key, samples)

    def _queue_samples(self, key: Key, samples: list[FitSample]) -> None:
        # Bounded: a resource whose timer is not running (deleted, never due) must not grow it forever.
        self.fit_backlog[key] = (self.fit_backlog.get(key, []) + samples)[-FIT_BACKLOG_MAX:]

    async def _fit_history(self, spec: SourceSpec, source: MetricsSource, now: float) -> None:
        last = self._last_fit_history.get(spec)
        if last is not None and now - last < FIT_HISTORY_EVERY_SECONDS:
            return
        self._last_fit_history[spec] = now
        since = now - FIT_HISTORY_BACKFILL_SECONDS if last is None else last
        fetch = source.fit_history  # type: ignore[attr-defined]
        try:
            found: dict[Key, list[FitSample]] = await asyncio.to_thread(fetch, since, now, FIT_HISTORY_STEP)
        except Exception as exc:  # the fit waits for the next pass; decisions do not depend on it
            log.warning("fit history query failed", source=spec.label, error=str(exc))
            return
        for key, samples in found.items():
            if key in self.routes:
                self._queue_samples(key, samples)

    # --- per-resource bookkeeping ----------------------------------------------------------------
    def due(self, key: Key, interval: float, now: float) -> bool:
        last = self._last_cycle.get(key)
        if last is not None and now - last < interval * 0.9:
            return False
        self._last_cycle[key] = now
        return True

    def forget(self, key: Key) -> None:
        for store in (self.expected, self.fit_memories, self._resolved, self._last_cycle, self.routes,
                      self.fit_backlog):
            store.pop(key, None)
        self.history.forget(key)

    async def resolve(self, key: Key, spec: Mapping[str, Any], generation: Any,
                      policies: Mapping[str, Any]) -> Resolved:
        """The effective spec and plan request; cached per spec, policy and model ConfigMap content, so
        an edited ConfigMap is noticed on the next cycle. Raises SpecError (or ValueError) naming the field."""
        parsed = parse_spec(dict(spec))
        policy: ServingPolicySpec | None = None
        policy_raw: Any = None
        if parsed.policy_ref is not None:
            policy_raw = policies.get(parsed.policy_ref.name)
            if policy_raw is None:
                raise SpecError(f"spec.policyRef.name: ServingPolicy {parsed.policy_ref.name!r} not found")
            policy = parse_policy(policy_raw)
        config = None
        ref = parsed.model.config_map_ref
        if ref is not None:
            cm = await asyncio.to_thread(self.kube.get, "v1", "ConfigMap", key[0], ref.name)
            config = None if cm is None else (cm.get("data") or {}).get(ref.key)
            if cm is not None and config is None:
                raise SpecError(f"spec.model.configMapRef.key: ConfigMap {ref.name} has no key {ref.key!r}")
        self.routes[key] = route_of(parsed, key[0])
        token = repr((generation, spec, policy_raw, config))
        cached = self._resolved.get(key)
        if cached is not None and cached[0] == token:
            return cached[1]
        resolved = resolve(parsed, policy, config)
        self._resolved[key] = (token, resolved)
        return resolved
