"""The operator's one metrics poller: one query per metric per distinct source, for every resource
that source serves; each snapshot goes to the hub (controller/hub.py), where the reconciler reads it.
The cost of a poll does not grow with the number of resources.

Sources are isolated from each other. Each polls in a task of its own, on its own schedule, within a
total deadline (the source's request timeout bounds each request, twice it the whole poll): a slow or
hostile source ends its own poll with SourceTimeout, which holds only the resources that name it,
while the others keep being read every interval. A source whose poll is still running is not started
again. Stopping the poller cancels every poll at once: the HTTP is asynchronous (observe/http.py), so
no thread is left waiting on a peer and shutdown never waits for one.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections import defaultdict
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import structlog

from infertune.actuate.apply import KubeClient
from infertune.actuate.workload import DEPLOYMENT_LABEL
from infertune.api.observation import MetricsFault
from infertune.controller.hub import MetricsHub
from infertune.controller.sources import Route, SourceRegistry, SourceSpec, SourceUnavailable, pod_targets
from infertune.errors import ApiError, SourceError
from infertune.observe.figures import Expected, faulted
from infertune.observe.fitmemory import FitSample
from infertune.observe.snapshot import MetricsSource, Snapshot

Key = tuple[str, str]
_T = TypeVar("_T")
log = structlog.get_logger("infertune.controller")
# Range queries for the online fit: how often, and how far back on the first (cold or restarted) pass.
FIT_HISTORY_EVERY_SECONDS = 300.0
FIT_HISTORY_BACKFILL_SECONDS = 1800.0
FIT_HISTORY_STEP = "30s"
# A poll may take this many request timeouts in all: its requests run a few at a time, so a healthy
# source finishes well within one.
POLL_DEADLINE_TIMEOUTS = 2.0
POLL_DEADLINE_MIN_SECONDS = 1.0


def poll_deadline(spec: SourceSpec) -> float:
    return max(POLL_DEADLINE_TIMEOUTS * spec.timeout, POLL_DEADLINE_MIN_SECONDS)
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
        self._tasks: dict[SourceSpec, asyncio.Task[None]] = {}
        self._backfilled: set[Key] = set()

    async def run_forever(self) -> None:
        try:
            while True:
                try:
                    await self.start_due()
                except Exception as exc:  # a bug must not kill the poller; the cycles then hold
                    log.warning("metrics poll failed", error=type(exc).__name__)
                await asyncio.sleep(self.poll_seconds)
        finally:
            self.cancel()

    async def start_due(self) -> list[asyncio.Task[None]]:
        """Starts a poll for every routed source whose previous poll has finished; returns them."""
        grouped = self.hub.by_source()
        for spec in [s for s in self._tasks if s not in grouped]:
            self._tasks.pop(spec).cancel()
        self.sources.forget_unused(set(grouped))
        self._backfilled &= {key for routes in grouped.values() for key in routes}  # deleted ones go
        await self.sources.reap()
        started = []
        for spec, routes in grouped.items():
            running = self._tasks.get(spec)
            if running is not None and not running.done():
                continue  # still within its deadline: it is not started twice
            task = asyncio.create_task(self._poll(spec, routes), name=f"infertune-poll {spec.label}")
            self._tasks[spec] = task
            started.append(task)
        return started

    async def poll_once(self) -> None:
        """One poll of every source, waited for (tests, and the first poll of a command)."""
        await asyncio.gather(*await self.start_due(), return_exceptions=True)

    def cancel(self) -> None:
        for task in self._tasks.values():
            task.cancel()
        self._tasks.clear()

    async def aclose(self) -> None:
        self.cancel()
        await self.sources.aclose()

    async def _poll(self, spec: SourceSpec, routes: Mapping[Key, Route]) -> None:
        now = self.clock()
        try:
            snapshot, source = await self._read(spec, routes, now)
        except Exception as exc:  # a source's bug holds its own resources, never the poller
            log.warning("metrics poll failed", source=spec.label, error=type(exc).__name__)
            snapshot, source = _failed(routes, MetricsFault.MALFORMED,
                                       f"{spec.label}: the poll failed ({type(exc).__name__})", now, spec), None
        # A source with range queries (Prometheus) gives the fit its windows from history; any other
        # (the pods) gives one window a poll.
        ranged = source is not None and hasattr(source, "fit_history_async")
        self.hub.ingest(spec, snapshot, routes, poll_samples=not ranged)
        if source is not None and ranged and snapshot.available:
            await self._fit_history(spec, source, now)
            await self._demand_history(spec, source, routes, now)

    async def _read(self, spec: SourceSpec, routes: Mapping[Key, Route],
                    now: float) -> tuple[Snapshot, MetricsSource | None]:
        try:
            source = await asyncio.to_thread(self.sources.get, spec)  # reads Secrets through the API
        except SourceUnavailable as exc:
            return _failed(routes, exc.fault, str(exc), now, spec), None
        expected = {key: self.hub.expected.get(key, Expected()) for key in routes}
        if spec.kind == "Pods":
            pods = await asyncio.to_thread(self._pods, routes)
            targets = pod_targets(pods, {key: route.port for key, route in routes.items()})
            source.set_targets(targets)  # type: ignore[attr-defined]
            ready: dict[Key, set[str]] = defaultdict(set)
            for target in targets:
                ready[target.key].add(target.pod)
            expected = {key: expected[key].ready(frozenset(ready[key])) for key in routes}
        deadline = poll_deadline(spec)
        try:
            async with asyncio.timeout(deadline):
                if hasattr(source, "poll_async"):
                    snapshot: Snapshot = await source.poll_async(expected, now)
                else:  # a synchronous source (a test's, an embedder's): a daemon thread, abandoned on timeout
                    snapshot = await in_daemon_thread(source.poll, expected, now)
        except TimeoutError:
            return _failed(routes, MetricsFault.TIMEOUT,
                           f"{spec.label}: the poll did not finish within {deadline:g}s", now, spec), None
        return snapshot, source

    def _pods(self, routes: Mapping[Key, Route]) -> list[dict[str, Any]]:
        pods: list[dict[str, Any]] = []
        for namespace in sorted({key[0] for key in routes}):
            try:
                pods += self.kube.list("v1", "Pod", namespace, f"{DEPLOYMENT_LABEL}")
            except ApiError as exc:
                log.warning("listing pods failed", namespace=namespace, status=exc.status)
        return pods

    async def _demand_history(self, spec: SourceSpec, source: MetricsSource, routes: Mapping[Key, Route],
                              now: float) -> None:
        """Once per resource: the demand the source remembers, so a started operator sizes for bursts
        and a season it has not polled itself."""
        fresh = [key for key in routes if key not in self._backfilled]
        if not fresh:
            return
        self._backfilled.update(fresh)
        fetch = source.demand_history_async  # type: ignore[attr-defined]
        try:
            async with asyncio.timeout(poll_deadline(spec)):
                season = await fetch(now - SEASON_BACKFILL_SECONDS, now, SEASON_STEP)
                recent = await fetch(now - RECENT_BACKFILL_SECONDS, now, RECENT_STEP)
        except (SourceError, TimeoutError) as exc:  # the forecast starts from its own polls; nothing depends on it
            log.warning("demand history query failed", source=spec.label, error=type(exc).__name__)
            return
        for key in fresh:
            self.hub.seed_demand(key, recent.get(key, []), season.get(key, []))

    async def _fit_history(self, spec: SourceSpec, source: MetricsSource, now: float) -> None:
        last = self._last_fit_history.get(spec)
        if last is not None and now - last < FIT_HISTORY_EVERY_SECONDS:
            return
        self._last_fit_history[spec] = now
        since = now - FIT_HISTORY_BACKFILL_SECONDS if last is None else last
        fetch = source.fit_history_async  # type: ignore[attr-defined]
        try:
            async with asyncio.timeout(poll_deadline(spec)):
                found: dict[Key, list[FitSample]] = await fetch(since, now, FIT_HISTORY_STEP)
        except (SourceError, TimeoutError) as exc:  # the fit waits for the next pass; decisions do not depend on it
            log.warning("fit history query failed", source=spec.label, error=type(exc).__name__)
            return
        for key, samples in found.items():
            self.hub.queue_samples(key, samples)


def _failed(routes: Mapping[Key, Route], fault: MetricsFault, message: str, now: float,
            spec: SourceSpec) -> Snapshot:
    return Snapshot(time=now, observations={k: faulted(k, fault, message, now) for k in routes},
                    fault=fault, message=message, source=spec.label)


async def in_daemon_thread(work: Callable[..., _T], *args: Any) -> _T:
    """`work(*args)` in a daemon thread of its own. Unlike asyncio.to_thread, a call that never returns
    is abandoned when the awaiting task is cancelled: nothing joins a daemon thread at shutdown."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[_T] = loop.create_future()

    def settle(result: Any, error: BaseException | None) -> None:
        if not future.done():
            future.set_exception(error) if error is not None else future.set_result(result)

    def target() -> None:
        try:
            result: Any = work(*args)
            error: BaseException | None = None
        except BaseException as exc:  # handed to the awaiting task as it is
            result, error = None, exc
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile: nobody waits any more
            loop.call_soon_threadsafe(settle, result, error)

    threading.Thread(target=target, name="infertune-poll", daemon=True).start()
    return await future
