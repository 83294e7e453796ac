"""A fleet of simulated replicas behind a router, driven by a traffic source in virtual time.

Replicas become routable after their model-load delay and drain on stop (no new requests; they
leave once idle, or at the end of their grace period, as the kubelet kills a Terminating pod: what
they still hold goes back to the gateway, as a retrying client sends it again). Requests that find
no routable replica wait at the gateway. Routers: `round-robin`, `least-outstanding` (fewest
running + waiting), `session-affinity` (a session's turns go where its prefix is cached, falling
back to least-outstanding), and `llm-d` (llm-d's default endpoint picker: each request to the replica
with the highest 3 x prefix share + 2 x queue score + 2 x free KV, so a session leaves a replica whose
queue and KV grow past what its cached prefix is worth).

The driver is a conservative discrete-event loop: it always advances the replica whose clock is
furthest behind, never past the next arrival or past what another replica could still cause
(its clock plus the traffic's lookahead, the least think time). So arrivals reach replicas in
time order even though each replica skips through identical steps on its own.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from infertune.errors import UserError
from infertune_lab.sim.config import ReplicaConfig
from infertune_lab.sim.engine import Engine
from infertune_lab.sim.records import RequestRecord, RequestSpec
from infertune_lab.sim.traffic import TrafficSource

ROUTERS = ("round-robin", "least-outstanding", "session-affinity", "llm-d")

# The EndpointPickerConfig llm-d's inference-scheduling guide deploys (the InferencePool chart's
# default-plugins.yaml; docs/sources.md): the weights of its prefix-cache, queue and kv-cache-utilization
# scorers, summed, the highest sum picked.
LLM_D_PREFIX_WEIGHT, LLM_D_QUEUE_WEIGHT, LLM_D_KV_WEIGHT = 3.0, 2.0, 2.0


@dataclass(eq=False)
class Replica:
    name: str
    engine: Engine
    ready_at: float
    draining: bool = False
    drain_deadline: float = math.inf  # when a draining replica is killed with whatever it still holds
    token: int = 0  # bumps on every re-queue in the driver's heap; older entries are stale
    # Requests already bound for this replica (session affinity), by arrival time.
    inbox: list[tuple[float, int, RequestSpec]] = field(default_factory=list)

    def routable(self, now: float) -> bool:
        return not self.draining and self.ready_at <= now

    @property
    def config(self) -> ReplicaConfig:
        return self.engine.config


class Fleet:
    def __init__(self, traffic: TrafficSource | None = None, router: str = "least-outstanding",
                 seed: int = 0, sample_interval: float | None = None, start: float = 0.0) -> None:
        if router not in ROUTERS:
            raise UserError(f"unknown router {router!r}; known: {', '.join(ROUTERS)}")
        self.traffic = traffic
        self.router = router
        self.now = start
        self.replicas: dict[str, Replica] = {}
        self.records: list[RequestRecord] = []
        self.rejected: list[RequestSpec] = []
        self.gateway: deque[RequestSpec] = deque()
        self.on_record: list[Callable[[RequestRecord], None]] = []
        self._seed = seed
        self._names = itertools.count()
        self._rr = 0
        self._affinity: dict[str, str] = {}
        self._sample_interval = sample_interval
        self._busy: list[tuple[float, int, int, Replica]] = []
        self._deferred: list[tuple[float, int, RequestSpec]] = []
        self._seq = itertools.count()

    # --- membership ------------------------------------------------------------------------------
    def add_replica(self, config: ReplicaConfig, name: str | None = None, at: float | None = None) -> str:
        """Starts a replica at `at` (default: now); it is routable after its load delay."""
        name = name or f"sim-{next(self._names)}"
        if name in self.replicas:
            raise ValueError(f"replica {name!r} already exists")
        t = self.now if at is None else at
        ready = t + config.load_delay_seconds
        engine = Engine(config, name, seed=self._seed + len(self.replicas) * 7919, clock=ready,
                        sample_interval=self._sample_interval)
        self.replicas[name] = Replica(name, engine, ready)
        return name

    def remove_replica(self, name: str, drain: bool = True, grace_seconds: float = math.inf) -> None:
        """Stops a replica. Draining lets it finish what it holds, for at most `grace_seconds`;
        otherwise, and at the end of the grace, its requests go back to the gateway to be routed
        again (their arrival time, and so their TTFT, unchanged)."""
        replica = self._get(name)
        # Requests bound for it but not yet arrived are placed again when they arrive.
        for item in replica.inbox:
            heapq.heappush(self._deferred, item)
        replica.inbox.clear()
        if drain and not replica.engine.idle and replica.ready_at <= self.now:
            replica.draining = True
            replica.drain_deadline = self.now + grace_seconds
            return
        self._evict(name)

    def _evict(self, name: str) -> None:
        replica = self.replicas.pop(name)
        engine = replica.engine
        lost = [r.spec for r in (*engine.running, *engine.waiting)]
        self.gateway.extendleft(reversed(lost))

    def set_max_num_seqs(self, name: str, value: int) -> None:
        self._get(name).engine.set_max_num_seqs(value)

    def _get(self, name: str) -> Replica:
        try:
            return self.replicas[name]
        except KeyError:
            raise ValueError(f"no replica named {name!r}") from None

    @property
    def ready_replicas(self) -> list[Replica]:
        return [r for r in self.replicas.values() if r.routable(self.now)]

    # --- routing -------------------------------------------------------------------------------
    def _route(self, spec: RequestSpec, at: float) -> None:
        candidates = [r for r in self.replicas.values() if r.routable(at)]
        if not candidates:
            self.gateway.append(spec)
            return
        target = self._choose(spec, candidates)
        target.engine.add(spec, at)
        self._take_rejected(target)
        self._queue(target)

    def _choose(self, spec: RequestSpec, candidates: list[Replica]) -> Replica:
        if self.router == "round-robin":
            self._rr += 1
            return candidates[self._rr % len(candidates)]
        if self.router == "session-affinity" and spec.session:
            pinned = self.replicas.get(self._affinity.get(spec.session, ""))
            if pinned is not None and pinned in candidates:
                return pinned
        if self.router == "llm-d":
            return _llm_d_pick(spec, candidates)
        best = min(candidates, key=lambda r: r.engine.outstanding)
        if self.router == "session-affinity" and spec.session:
            self._affinity[spec.session] = best.name
        return best

    # --- time ----------------------------------------------------------------------------------
    def _next_ready(self) -> float:
        """When requests waiting at the gateway can next be routed: now, if a replica is routable
        (requests a stopped replica handed back), else when the next model load ends."""
        if any(r.routable(self.now) for r in self.replicas.values()):
            return self.now
        return min((r.ready_at for r in self.replicas.values() if r.ready_at > self.now), default=math.inf)

    def _lookahead(self) -> float:
        traffic = self.traffic
        if traffic is None:
            return math.inf
        if self.router == "session-affinity" and not traffic.cross_session:
            # Feedback stays on the session's own replica, which stops at each finish anyway.
            return math.inf
        return traffic.lookahead

    def _key(self, replica: Replica) -> float:
        engine = replica.engine
        if not engine.idle:
            return engine.clock
        return replica.inbox[0][0] if replica.inbox else math.inf

    def _queue(self, replica: Replica) -> None:
        replica.token += 1
        key = self._key(replica)
        if key < math.inf:
            heapq.heappush(self._busy, (key, next(self._seq), replica.token, replica))

    def _valid(self, token: int, replica: Replica) -> bool:
        return token == replica.token and self.replicas.get(replica.name) is replica

    def _pop_lag(self) -> Replica:
        while True:
            _, _, token, replica = heapq.heappop(self._busy)
            if self._valid(token, replica):
                replica.token += 1
                return replica

    def _peek_key(self) -> float:
        while self._busy:
            key, _, token, replica = self._busy[0]
            if self._valid(token, replica):
                return key
            heapq.heappop(self._busy)
        return math.inf

    def _next_unrouted(self) -> tuple[float, bool]:
        """(time, from_deferred) of the next request no replica holds yet."""
        ta = self.traffic.next_time() if self.traffic is not None else math.inf
        td = self._deferred[0][0] if self._deferred else math.inf
        return (td, True) if td <= ta else (ta, False)

    def _take_unrouted(self, deferred: bool) -> RequestSpec:
        if deferred:
            return heapq.heappop(self._deferred)[2]
        assert self.traffic is not None
        return self.traffic.pop()

    def _pinned(self, spec: RequestSpec) -> Replica | None:
        """The replica a request must go to whatever the fleet's state: its session's, under affinity."""
        if self.router != "session-affinity" or not spec.session:
            return None
        replica = self.replicas.get(self._affinity.get(spec.session, ""))
        return replica if replica is not None and replica.routable(spec.arrival) else None

    def _peek_unrouted(self, deferred: bool) -> RequestSpec:
        if deferred:
            return self._deferred[0][2]
        assert self.traffic is not None
        return self.traffic.peek()

    def run_until(self, horizon: float, stop: Callable[[RequestRecord], bool] | None = None) -> list[RequestRecord]:
        """Simulates up to `horizon`; returns the records finished meanwhile.

        Requests pinned to a replica go straight to its inbox, so only that replica stops at
        their arrival; a request the router must place by load stops every replica at its arrival.
        With `stop`, it returns early, right after the step that finished a record `stop` is true
        for (each finished record is shown to it once): `now` stays short of the horizon and a later
        call runs on from there. Until `stop` is true the run is the one it would be without it.
        """
        start = len(self.records)
        lookahead = self._lookahead()
        while True:
            ta, deferred = self._next_unrouted()
            if ta <= horizon:
                pinned = self._pinned(self._peek_unrouted(deferred))
                if pinned is not None:
                    spec = self._take_unrouted(deferred)
                    heapq.heappush(pinned.inbox, (spec.arrival, next(self._seq), spec))
                    self._queue(pinned)
                    continue
            tr = self._next_ready() if self.gateway else math.inf
            event = min(ta, tr)
            if self._peek_key() < min(event, horizon):
                lag = self._pop_lag()
                self._deliver(lag)
                others = self._peek_key()
                inbox = lag.inbox[0][0] if lag.inbox else math.inf
                limit = min(event, horizon, others + lookahead, inbox)
                # At least one step: two replicas at one clock with no lookahead must not stall.
                stopped = self._advance(lag, max(limit, lag.engine.clock + 1e-9), stop)
                self._queue(lag)
                if stopped:
                    return self.records[start:]
                continue
            if event > horizon:
                break
            self.now = max(self.now, event)
            if event == ta:
                self._route(self._take_unrouted(deferred), event)
            else:
                self._flush_gateway(event)
        self.now = max(self.now, horizon)
        for replica in self.replicas.values():
            replica.engine.sample_idle_until(horizon)
        self._retire_drained()
        return self.records[start:]

    def _deliver(self, replica: Replica) -> None:
        engine, inbox = replica.engine, replica.inbox
        while inbox and (engine.idle or inbox[0][0] <= engine.clock):
            _, _, spec = heapq.heappop(inbox)
            engine.add(spec, spec.arrival)
        self._take_rejected(replica)

    def _advance(self, replica: Replica, limit: float, stop: Callable[[RequestRecord], bool] | None = None) -> bool:
        """Steps the replica towards `limit`; whether `stop` was true for a record it finished."""
        stopped = False
        for record in replica.engine.advance(limit):
            self.records.append(record)
            if self.traffic is not None:
                self.traffic.on_finish(record)
            for hook in self.on_record:
                hook(record)
            if stop is not None and stop(record):
                stopped = True
        self._take_rejected(replica)
        return stopped

    def _take_rejected(self, replica: Replica) -> None:
        """Moves the requests the engine refused into the fleet's count. The engine keeps every refusal
        (one that can never fit its pool, and one it could not serve once queued), so the fleet counts
        only what it takes from there: counting `add`'s False as well counted such a request twice."""
        if replica.engine.rejected:
            refused = list(replica.engine.rejected)
            replica.engine.rejected.clear()
            self.rejected.extend(refused)
            if self.traffic is not None:
                for spec in refused:  # a closed loop's user goes on; an open one's session ends
                    self.traffic.on_reject(spec, max(replica.engine.clock, spec.arrival))

    def _flush_gateway(self, at: float) -> None:
        pending = list(self.gateway)
        self.gateway.clear()
        for spec in pending:
            self._route(spec, at)

    def _retire_drained(self) -> None:
        for name in [n for n, r in self.replicas.items() if r.draining and r.engine.idle]:
            del self.replicas[name]
        for name in [n for n, r in self.replicas.items() if r.draining and r.drain_deadline <= self.now]:
            self._evict(name)

    def run(self, horizon: float) -> list[RequestRecord]:
        return self.run_until(horizon)


def _llm_d_pick(spec: RequestSpec, candidates: list[Replica]) -> Replica:
    """llm-d's endpoint picker as its default profile scores: the share of the prompt cached on the
    replica (the session's prefix; the twin caches per session), the waiting queue min-max normalised
    over the candidates (the shortest 1, the longest 0, all equal 1), and the KV cache left free. Ties
    go to the first candidate, the oldest replica: llm-d's max-score picker breaks them at random, and
    the twin stays deterministic."""
    waiting = [len(r.engine.waiting) for r in candidates]
    low, high = min(waiting), max(waiting)

    def score(replica: Replica, queue: int) -> float:
        engine = replica.engine
        prefix = 0.0
        if spec.session and spec.prompt_tokens > 0:
            prefix = min(1.0, engine.cache.cached(spec.session) * engine.block_size / spec.prompt_tokens)
        queue_score = 1.0 if high == low else (high - queue) / (high - low)
        return (LLM_D_PREFIX_WEIGHT * prefix + LLM_D_QUEUE_WEIGHT * queue_score
                + LLM_D_KV_WEIGHT * (1.0 - min(engine.kv_usage, 1.0)))

    scores = [score(r, q) for r, q in zip(candidates, waiting, strict=True)]
    return candidates[scores.index(max(scores))]


def uniform_fleet(config: ReplicaConfig, replicas: int, traffic: TrafficSource | None = None,
                  router: str = "least-outstanding", seed: int = 0,
                  sample_interval: float | None = None) -> Fleet:
    fleet = Fleet(traffic, router, seed, sample_interval)
    for _ in range(replicas):
        fleet.add_replica(config)
    return fleet


def summarize(records: Iterable[RequestRecord]) -> dict[str, float]:
    """Headline figures of a set of records: counts, TTFT quantiles, stream TPS, output tokens."""
    recs = list(records)
    if not recs:
        return {"requests": 0}
    ttft = sorted(r.ttft for r in recs)
    tps = sorted(r.stream_tps for r in recs if r.spec.output_tokens > 1)

    def q(xs: list[float], p: float) -> float:
        return xs[min(len(xs) - 1, int(p * len(xs)))] if xs else math.nan

    return {
        "requests": len(recs),
        "output_tokens": sum(r.spec.output_tokens for r in recs),
        "prompt_tokens": sum(r.spec.prompt_tokens for r in recs),
        "cached_tokens": sum(r.cached_tokens for r in recs),
        "preemptions": sum(r.preemptions for r in recs),
        "ttft_p50_seconds": q(ttft, 0.5),
        "ttft_p95_seconds": q(ttft, 0.95),
        "ttft_p99_seconds": q(ttft, 0.99),
        "stream_tps_p5": q(tps, 0.05),
        "stream_tps_mean": sum(tps) / len(tps) if tps else math.nan,
    }
