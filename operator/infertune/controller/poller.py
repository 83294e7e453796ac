"""The operator's one metrics poller: one query per metric per distinct source, for every resource
that source serves, off the event loop; each snapshot goes to the hub (controller/hub.py), where
the reconciler reads it. The cost of a poll does not grow with the number of resources."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Callable, Mapping
from typing import Any

import structlog

from infertune.actuate.apply import KubeClient
from infertune.actuate.workload import DEPLOYMENT_LABEL
from infertune.controller.hub import MetricsHub
from infertune.controller.sources import Route, SourceRegistry, SourceSpec, SourceUnavailable, pod_targets
from infertune.errors import ApiError
from infertune.observe.figures import Expected, faulted
from infertune.observe.fitmemory import FitSample
from infertune.observe.snapshot import MetricsSource, Snapshot

Key = tuple[str, str]
log = structlog.get_logger("infertune.controller")
# Range queries for the online fit: how often, and how far back on the first (cold or restarted) pass.
FIT_HISTORY_EVERY_SECONDS = 300.0
FIT_HISTORY_BACKFILL_SECONDS = 1800.0
FIT_HISTORY_STEP = "30s"
# Demand history read once per resource when a Prometheus first answers for it: days of it for the
# daily and weekly profile, hours of it at minute steps for the bursts and the trend.
SEASON_BACKFILL_SECONDS = 7 * 86_400.0
SEASON_STEP = "15m"
RECENT_BACKFILL_SECONDS = 3 * 3600.0
RECENT_STEP = "1m"


class Poller:
    def __init__(self, kube: KubeClient, hub: MetricsHub, sources: SourceRegistry, clock: Callable[[], float],
                 poll_seconds: float = 15.0) -> None:
        self.kube = kube
        self.hub = hub
        self.sources = sources
        self.clock = clock
        self.poll_seconds = poll_seconds
        self._last_fit_history: dict[SourceSpec, float] = {}
        self._backfilled: set[Key] = set()

    async def run_forever(self) -> None:
        while True:
            try:
                await self.poll_once()
            except Exception as exc:  # a source bug must not kill the poller; the cycles then hold
                log.warning("metrics poll failed", error=str(exc))
            await asyncio.sleep(self.poll_seconds)

    async def poll_once(self) -> None:
        grouped = self.hub.by_source()
        self._backfilled &= {key for routes in grouped.values() for key in routes}  # deleted ones go
        for spec, routes in grouped.items():
            now = self.clock()
            snapshot, source = await asyncio.to_thread(self._poll_source, spec, routes, now)
            # A source with range queries (Prometheus) gives the fit its windows from history; any other
            # (the pods) gives one window a poll.
            ranged = source is not None and hasattr(source, "fit_history")
            self.hub.ingest(spec, snapshot, routes, poll_samples=not ranged)
            if source is not None and ranged and snapshot.available:
                await self._fit_history(spec, source, now)
                await self._demand_history(source, routes, now)

    def close(self) -> None:
        self.sources.close()

    def _poll_source(self, spec: SourceSpec, routes: Mapping[Key, Route],
                     now: float) -> tuple[Snapshot, MetricsSource | None]:
        try:
            source = self.sources.get(spec)
            expected = {key: self.hub.expected.get(key, Expected()) for key in routes}
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
            except ApiError as exc:
                log.warning("listing pods failed", namespace=namespace, error=str(exc))
        return pods

    async def _demand_history(self, source: MetricsSource, routes: Mapping[Key, Route], now: float) -> None:
        """Once per resource: the demand the source remembers, so a started operator sizes for bursts
        and a season it has not polled itself."""
        fresh = [key for key in routes if key not in self._backfilled]
        if not fresh:
            return
        self._backfilled.update(fresh)
        fetch = source.demand_history  # type: ignore[attr-defined]
        try:
            season = await asyncio.to_thread(fetch, now - SEASON_BACKFILL_SECONDS, now, SEASON_STEP)
            recent = await asyncio.to_thread(fetch, now - RECENT_BACKFILL_SECONDS, now, RECENT_STEP)
        except Exception as exc:  # the forecast starts from its own polls instead; nothing depends on it
            log.warning("demand history query failed", error=str(exc))
            return
        for key in fresh:
            self.hub.seed_demand(key, recent.get(key, []), season.get(key, []))

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
            self.hub.queue_samples(key, samples)
