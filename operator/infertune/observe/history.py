"""A bounded per-deployment history, fed by snapshots: KV pressure for the cliff early warning, and
the request shape for planning.

The warning needs a trend, and a snapshot is one instant; the controller records every snapshot
here and asks for the warning of a deployment. Points older than the horizon are dropped.

The request shape (mean prompt, cached and generated tokens) of one short window follows whichever
sessions happened to finish in it: a few long ones and the planner's feasible set shrinks, a few
short ones and it widens, and a re-layout chosen on that costs a model load each way. `settled`
gives the planner the completion-weighted means over the whole horizon instead.

It also gives the tokens a running stream holds (the fleet's KV in use over its running streams, over
the same horizon, weighted by the streams): the working set measured. The finished requests' means lag
it while a session workload warms up (first turns finish first), so a re-layout made for cost onto a
tighter shape is also judged at it (planner/guardrails.py, `WorkingSetAbovePlan`).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, replace
from itertools import pairwise
from typing import TypeVar

from infertune.api.observation import BACKLOG_DRAIN_SECONDS, FEW_STREAMS, Observation
from infertune.model.early_warning import (
    CliffWarning,
    PressurePoint,
    WarningPolicy,
    cliff_warning,
    working_set_ratio,
)
from infertune.model.forecast import DemandPoint, rising
from infertune.observe.figures import DeploymentKey
from infertune.observe.snapshot import Snapshot


def pressure_point(obs: Observation, resident_tokens: float = 0.0) -> PressurePoint:
    """The fullest replica's pressure: observed usage, and the working set its running streams imply."""
    predicted: list[float] = []
    context = None
    if obs.mean_prompt_tokens is not None and obs.mean_generated_tokens is not None:
        # A stream is half-way through its answer on average; its prompt is all resident.
        context = obs.mean_prompt_tokens + obs.mean_generated_tokens / 2
    for rep in obs.replicas:
        ratio = working_set_ratio(rep.running, context, rep.kv_capacity_tokens, resident_tokens)
        if ratio is not None:
            predicted.append(ratio)
    return PressurePoint(obs.sample_time, obs.kv_usage, max(predicted) if predicted else None)


@dataclass(frozen=True)
class ShapePoint:
    """One window's request shape, weighted by the requests that finished in it."""

    time: float
    weight: float  # completions/s over the window
    prompt: float
    generated: float
    cached: float | None


def shape_point(obs: Observation) -> ShapePoint | None:
    weight, prompt, generated = obs.completion_rate, obs.mean_prompt_tokens, obs.mean_generated_tokens
    if weight is None or weight <= 0 or prompt is None or generated is None:
        return None
    return ShapePoint(obs.sample_time, weight, prompt, generated, obs.mean_cached_tokens)


def _covering(recorded: Sequence[ShapePoint], since: float) -> list[ShapePoint]:
    """The shapes recorded from `since` on, reaching further back (within what the history keeps) while
    they cover fewer than MIN_SHAPE_REQUESTS finished requests. A point covers its completion rate over
    the time since the point before it (the first one, over the gap after it)."""
    points = list(recorded)
    gaps = [b.time - a.time for a, b in pairwise(points)]
    gaps = gaps[:1] + gaps if gaps else [0.0] * len(points)
    start, requests = len(points), 0.0
    while start > 0 and (points[start - 1].time >= since or requests < MIN_SHAPE_REQUESTS):
        start -= 1
        requests += points[start].weight * max(gaps[start], 0.0)
    return points[start:]


@dataclass(frozen=True)
class StreamContextPoint:
    """The tokens a running stream held at one poll, weighted by the streams running."""

    time: float
    running: float
    tokens: float


# The fewest finished requests a request shape is read from when the load's window holds fewer. A coding
# agent's cached share is a per-request mix of first turns (none cached) and long sessions (most of it),
# and the fresh prefill the TTFT is judged on is the small difference of two large means: from the two
# dozen requests a minute held on a quiet fleet it read 30% of the prompt where one 15 s poll had read 13%,
# and every TP4 shape turned infeasible on it (ramp-load60, a 60 s load: rolled to TP8 and held there;
# docs/bench-history.md). A hundred requests bring a mean's error to a tenth of a request's spread.
MIN_SHAPE_REQUESTS = 100.0

# Fewer running streams than this over the horizon tell too little of the working set to plan on.
MIN_STREAM_WEIGHT = 4.0

_Timed = TypeVar("_Timed", PressurePoint, ShapePoint, StreamContextPoint)
DEMAND_POINTS = 360


def offered_rate(obs: Observation, waiting_before: float) -> float:
    """Requests/s offered to the fleet: the first-token rate plus the queue's growth since
    `waiting_before` (the queue up to BACKLOG_DRAIN_SECONDS ago), spread over that window.

    `demand_rate` counts the whole queue as demand to drain within the window: what to size for now, but
    a queue that stands for ten minutes is counted again at every poll, and a burst quantile over those
    polls then holds a rate nobody asked for for its whole window after the queue is gone (seen: 15.2
    req/s held for half an hour while 8-10 arrived). Here only the queue's growth counts, what arrived
    and was not served: never above `demand_rate`, and equal to it when there was no queue before."""
    grown = max(obs.waiting or 0.0, 0.0) - max(waiting_before, 0.0)
    return max(max(obs.arrival_rate or 0.0, 0.0) + grown / BACKLOG_DRAIN_SECONDS, 0.0)


class PressureHistory:
    def __init__(self, horizon_seconds: float = 900.0, max_points: int = 512,
                 demand_horizon_seconds: float = 3 * 3600.0) -> None:
        self.horizon = horizon_seconds
        self.max_points = max_points
        self.demand_horizon = demand_horizon_seconds
        self._points: dict[DeploymentKey, deque[PressurePoint]] = {}
        self._shapes: dict[DeploymentKey, deque[ShapePoint]] = {}
        self._contexts: dict[DeploymentKey, deque[StreamContextPoint]] = {}
        # When the working set was first measured: the deque above forgets past its horizon.
        self._contexts_since: dict[DeploymentKey, float] = {}
        # The demand each poll saw, for the burst quantile and the trend (model/forecast.py): bounded in
        # count (an hour and a half at 15 s polls) as well as in time. Recorded as offered (`offered_rate`),
        # so that a queue standing for minutes is not remembered as a burst it never was.
        self._demand: dict[DeploymentKey, deque[DemandPoint]] = {}
        # The waiting queue over the last BACKLOG_DRAIN_SECONDS, for the queue's growth `offered_rate` reads.
        self._queues: dict[DeploymentKey, deque[tuple[float, float]]] = {}
        # The arrival rate alone (no queue counted as demand), over the same polls: the level a burst's
        # reading is judged against while a queue inflates the demand's.
        self._arrivals: dict[DeploymentKey, deque[DemandPoint]] = {}

    def record(self, snapshot: Snapshot, resident_tokens: float = 0.0) -> None:
        """Adds every available observation; faulted ones add nothing (missing is not zero)."""
        for key, obs in snapshot.observations.items():
            if not obs.available:
                continue
            points = self._points.setdefault(key, deque(maxlen=self.max_points))
            point = pressure_point(obs, resident_tokens)
            if points and point.time <= points[-1].time:
                continue  # the same Prometheus sample read twice
            self._keep(points, point)
            shape = shape_point(obs)
            if shape is not None:
                self._keep(self._shapes.setdefault(key, deque(maxlen=self.max_points)), shape)
            if obs.stream_context_tokens is not None and obs.running:
                self._contexts_since.setdefault(key, obs.sample_time)
                self._keep(self._contexts.setdefault(key, deque(maxlen=self.max_points)),
                           StreamContextPoint(obs.sample_time, obs.running, obs.stream_context_tokens))
            demand = obs.demand_rate
            if demand is not None:
                self._add_rate(self._demand, key, obs.sample_time, self._offered(key, obs))
                self._add_rate(self._arrivals, key, obs.sample_time, max(obs.arrival_rate or 0.0, 0.0))

    def _keep(self, recent: deque[_Timed], item: _Timed) -> None:
        """Appends `item` and drops what is older than the horizon before it."""
        recent.append(item)
        while recent and recent[0].time < item.time - self.horizon:
            recent.popleft()

    def _offered(self, key: DeploymentKey, obs: Observation) -> float:
        """`offered_rate` of this poll, against the queue this history saw up to a drain window before it."""
        queue = self._queues.setdefault(key, deque())
        while queue and queue[0][0] < obs.sample_time - BACKLOG_DRAIN_SECONDS:
            queue.popleft()
        before = queue[0][1] if queue else 0.0
        queue.append((obs.sample_time, max(obs.waiting or 0.0, 0.0)))
        return offered_rate(obs, before)

    def _add_rate(self, kept: dict[DeploymentKey, deque[DemandPoint]], key: DeploymentKey, time: float,
                    rate: float) -> None:
        points = kept.setdefault(key, deque(maxlen=DEMAND_POINTS))
        points.append(DemandPoint(time, rate))
        while points and points[0].time < time - self.demand_horizon:
            points.popleft()

    def seed_demand(self, key: DeploymentKey, points: Sequence[DemandPoint]) -> None:
        """Adds the demand a source remembers from before this process polled it (older points only)."""
        held = self._demand.setdefault(key, deque(maxlen=DEMAND_POINTS))
        first = held[0].time if held else math.inf
        older = sorted((p for p in points if p.time < first), key=lambda p: p.time)
        if not older:
            return
        newest = (older + list(held))[-1].time
        merged = [p for p in older + list(held) if p.time >= newest - self.demand_horizon]
        held.clear()
        held.extend(merged)

    def demand_points(self, key: DeploymentKey) -> tuple[DemandPoint, ...]:
        """The demand each recent poll saw, as offered (`offered_rate`), oldest first."""
        return tuple(self._demand.get(key, ()))

    def arrival_points(self, key: DeploymentKey) -> tuple[DemandPoint, ...]:
        """The arrival rate each recent poll saw (no queue counted), oldest first."""
        return tuple(self._arrivals.get(key, ()))

    def points(self, key: DeploymentKey) -> tuple[PressurePoint, ...]:
        return tuple(self._points.get(key, ()))

    def forget(self, key: DeploymentKey) -> None:
        self._points.pop(key, None)
        self._shapes.pop(key, None)
        self._contexts.pop(key, None)
        self._contexts_since.pop(key, None)
        self._demand.pop(key, None)
        self._queues.pop(key, None)
        self._arrivals.pop(key, None)

    def settled(self, key: DeploymentKey, obs: Observation, horizon: float | None = None) -> Observation:
        """`obs` with its request shape averaged over the horizon (weighted by completions), or over
        the last `horizon` seconds when that is shorter: a resource whose model loads in 15 s must see
        its contexts grow within a load, not 15 minutes later. As it is when nothing has been recorded,
        but for the working set per running stream, which is the history's or None."""
        if not obs.available:
            return obs
        since = self._contexts_since.get(key)
        obs = replace(obs, stream_context_tokens=self._stream_context(key, obs, horizon),
                      stream_context_recent_tokens=self._stream_context(key, obs, None),
                      stream_context_measured_seconds=None if since is None else max(obs.sample_time - since, 0.0),
                      stream_context_streams=self._streams_running(key, obs, horizon))
        if horizon is not None:
            obs = replace(obs, stream_context_growth_tokens=self._working_set_growth(
                key, obs.sample_time, horizon, obs.stream_context_tokens, obs.stream_context_streams))
        recorded: Sequence[ShapePoint] = self._shapes.get(key) or ()
        shapes = recorded if horizon is None else _covering(recorded, obs.sample_time - horizon)
        if not shapes:
            return obs
        total = sum(p.weight for p in shapes)
        cached = [p for p in shapes if p.cached is not None]
        cached_total = sum(p.weight for p in cached)
        prompt = sum(p.weight * p.prompt for p in shapes) / total
        if horizon is not None:
            # A prompt that keeps growing is planned for as it will be one load ahead (never less than now),
            # by no more tokens than the running streams' measured working set grows meanwhile.
            ahead = rising([DemandPoint(p.time, p.prompt) for p in recorded], obs.sample_time, horizon)
            growth = obs.stream_context_growth_tokens
            if ahead is not None and growth is not None:
                ahead = min(ahead, prompt + growth)
            prompt = max(prompt, ahead or 0.0)
        return replace(
            obs,
            mean_prompt_tokens=prompt,
            mean_generated_tokens=sum(p.weight * p.generated for p in shapes) / total,
            mean_cached_tokens=(sum(p.weight * (p.cached or 0.0) for p in cached) / cached_total
                                if cached_total > 0 else obs.mean_cached_tokens),
        )

    def _stream_context(self, key: DeploymentKey, obs: Observation, horizon: float | None) -> float | None:
        """Tokens per running stream over the horizon, weighted by the streams; None when too few streams
        ran to tell."""
        points = self._contexts_over(key, obs.sample_time, horizon)
        weight = sum(p.running for p in points)
        if weight < MIN_STREAM_WEIGHT:
            return None
        return sum(p.running * p.tokens for p in points) / weight

    def _contexts_over(self, key: DeploymentKey, now: float, horizon: float | None) -> list[StreamContextPoint]:
        recorded: Sequence[StreamContextPoint] = self._contexts.get(key) or ()
        return [p for p in recorded if horizon is None or p.time >= now - horizon]

    def _streams_running(self, key: DeploymentKey, obs: Observation, horizon: float | None) -> float | None:
        """The mean number of streams running over the horizon's context points; None without any."""
        points = self._contexts_over(key, obs.sample_time, horizon)
        return sum(p.running for p in points) / len(points) if points else None

    def _working_set_growth(self, key: DeploymentKey, now: float, horizon: float,
                            level: float | None, streams: float | None) -> float | None:
        """The tokens by which the running streams' measured working set will have grown one load ahead
        of `level`, its mean over the load (0 when it shows no significant rise), or None when too few
        streams ran to tell (`level` None). `streams` is how many ran on average over the load.

        The prompt's trend runs through each poll's mean over the few requests that finished in it, and on
        a quiet night (one to three a poll, heavy-tailed) a line through those passes its test by chance
        every few dozen cycles; carried a load ahead, one such pass declared a running layout past the
        cliff and rolled a week's fleet to a shape that could not serve the day (docs/bench-history.md).
        Contexts that really grow grow in the streams still running first, so the prompt is carried ahead
        by no more tokens than the working set measured over the same window grows: in tokens, not as a
        ratio, since a session's own history is what grows and the answer half-way held (and a prefix
        the cache shares) only dilute the ratio. Unmeasured, the prompt's trend stands alone. With fewer
        than FEW_STREAMS running on average over the load, the rise is a few sessions' own, and 0."""
        if level is None:
            return None
        if streams is not None and streams < FEW_STREAMS:
            return 0.0
        recorded: Sequence[StreamContextPoint] = self._contexts.get(key) or ()
        ahead = rising([DemandPoint(p.time, p.tokens) for p in recorded], now, horizon)
        return 0.0 if ahead is None else max(ahead - level, 0.0)

    def warning(self, key: DeploymentKey, now: float, preemption_rate: float | None,
                policy: WarningPolicy | None = None) -> CliffWarning:
        return cliff_warning(self.points(key), now, preemption_rate, policy or WarningPolicy())
