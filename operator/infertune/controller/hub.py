"""What the reconciler knows of every resource's metrics: each source's newest snapshot, the KV
pressure and request-shape history behind the cliff warning and the planner's workload, the
replicas expected to report, and the fit samples waiting for the next cycle. A jump in demand is
held as ImplausibleValue until the next poll confirms it (observe/plausible.py `JumpGuard`).

No I/O: a poller feeds it (the operator's, `controller/poller.py`, or the lab's, in virtual time)
and the reconciler reads it. So the operator and the benchmark judge the same figures the same way.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field

from infertune.api.observation import Observation
from infertune.controller.sources import Route, SourceSpec
from infertune.model.early_warning import CliffWarning, WarningPolicy
from infertune.model.forecast import DemandPoint
from infertune.observe.figures import Expected
from infertune.observe.fitmemory import FitSample
from infertune.observe.history import PressureHistory
from infertune.observe.plausible import JumpGuard
from infertune.observe.snapshot import Snapshot

Key = tuple[str, str]
# Bounded: a resource whose timer is not running (deleted, never due) must not grow it forever.
FIT_BACKLOG_MAX = 256


@dataclass
class MetricsHub:
    history: PressureHistory = field(default_factory=PressureHistory)
    routes: dict[Key, Route] = field(default_factory=dict)
    snapshots: dict[SourceSpec, Snapshot] = field(default_factory=dict)
    expected: dict[Key, Expected] = field(default_factory=dict)
    fit_backlog: dict[Key, list[FitSample]] = field(default_factory=dict)
    jumps: JumpGuard = field(default_factory=JumpGuard)
    # Days of demand a source remembered when first polled, for the reconciler to learn the season from.
    season_backfill: dict[Key, list[DemandPoint]] = field(default_factory=dict)

    # --- what the reconciler tells it --------------------------------------------------------
    def route(self, key: Key, route: Route) -> None:
        self.routes[key] = route

    def expect(self, key: Key, expected: Expected) -> None:
        """The replicas that should report for `key` in the next poll (a loading one is not missing)."""
        self.expected[key] = expected

    def forget(self, key: Key) -> None:
        for store in (self.routes, self.expected, self.fit_backlog, self.season_backfill):
            store.pop(key, None)
        self.history.forget(key)
        self.jumps.forget(key)

    # --- what a poller gives it --------------------------------------------------------------
    def by_source(self) -> dict[SourceSpec, dict[Key, Route]]:
        """Every routed resource, grouped by the source that serves it: one poll per source."""
        grouped: dict[SourceSpec, dict[Key, Route]] = defaultdict(dict)
        for key, route in list(self.routes.items()):
            grouped[route.source][key] = route
        return dict(grouped)

    def ingest(self, source: SourceSpec, snapshot: Snapshot, keys: Mapping[Key, Route] | None = None,
               poll_samples: bool = False) -> None:
        """Keeps `snapshot` as `source`'s newest and records its history. With `poll_samples`
        (sources with no range queries: the pods), each observation's fit samples are queued."""
        judged = {key: self.jumps.judge(key, obs) if key in self.routes else obs
                  for key, obs in snapshot.observations.items()}
        snapshot = dataclasses.replace(snapshot, observations=judged)
        self.snapshots[source] = snapshot
        self.history.record(snapshot)
        if not poll_samples or not snapshot.available:
            return
        for key in keys if keys is not None else snapshot.observations:
            obs = snapshot.observations.get(key)
            if obs is not None and obs.available and obs.fit_samples:
                self.queue_samples(key, [FitSample(batch, seconds, 1.0, obs.sample_time, context)
                                         for batch, seconds, context in obs.fit_samples])

    def queue_samples(self, key: Key, samples: list[FitSample]) -> None:
        if key in self.routes:
            self.fit_backlog[key] = (self.fit_backlog.get(key, []) + samples)[-FIT_BACKLOG_MAX:]

    # --- what the reconciler reads -----------------------------------------------------------
    def observation(self, key: Key, horizon: float | None = None) -> Observation | None:
        """The resource's Observation from its source's newest snapshot, its request shape averaged
        over the history's horizon (observe/history.py); None before the first poll."""
        route = self.routes.get(key)
        snapshot = None if route is None else self.snapshots.get(route.source)
        return None if snapshot is None else self.history.settled(key, snapshot.get(*key), horizon)

    def warning(self, key: Key, obs: Observation | None, headroom: float, now: float) -> CliffWarning | None:
        if obs is None or not obs.available:
            return None
        return self.history.warning(key, now, obs.preemption_rate, WarningPolicy(headroom=headroom))

    def demand_points(self, key: Key) -> tuple[DemandPoint, ...]:
        return self.history.demand_points(key)

    def arrival_points(self, key: Key) -> tuple[DemandPoint, ...]:
        return self.history.arrival_points(key)

    def seed_demand(self, key: Key, recent: list[DemandPoint], season: list[DemandPoint]) -> None:
        """What a source remembered of a resource's demand before this process polled it: the recent
        points join the history (bursts, trend), the days of it wait for the reconciler's profile."""
        if key not in self.routes:
            return
        self.history.seed_demand(key, recent)
        if season:
            self.season_backfill[key] = season

    def take_season(self, key: Key) -> list[DemandPoint]:
        """The remembered days of demand, once."""
        return self.season_backfill.pop(key, [])

    def take_fit_samples(self, key: Key, since: float) -> list[FitSample]:
        """The samples found for `key` since its layout was applied; taken once."""
        return [s for s in self.fit_backlog.pop(key, []) if s.time >= since]
