"""One policy through one scenario: the fleet in virtual time, a control tick every 15 s.

The fleet first serves the warm-up on the policy's starting layout, untouched. Then each tick
charges the GPUs that exist for the coming interval, simulates it, reads the cliff samples, lets
the policy look and decide, and lets the Deployment controller (the actuator) reconcile. After the
scenario's last second no session starts and the fleet runs a tail so the requests that arrived
in time can finish; that tail is neither charged nor scored beyond them.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from infertune_lab.bench.actuation import Actuator, FleetPoint
from infertune_lab.bench.cases import BenchCase
from infertune_lab.bench.metrics import CliffMeter, PolicyResult, Slo, summarize
from infertune_lab.bench.policies import Policy
from infertune_lab.sim import Fleet, ReplicaConfig, RequestRecord, RequestSpec, TrafficSource

TICK_SECONDS = 15.0
TAIL_SECONDS = 900.0
CLIFF_SAMPLE_SECONDS = 5.0


# The gateway in front of every policy's pods: sticky sessions unless asked (every figure in docs/bench.md
# was measured behind them); any of the twin's routers may be asked for.
DEFAULT_ROUTER = "session-affinity"


@dataclass(frozen=True)
class RunSetup:
    case: BenchCase
    replica: ReplicaConfig  # the twin's replica model; the layout fields are set per replica
    load_seconds: float
    slo: Slo
    price_per_gpu_hour: float
    pool_gpus: int  # every policy's pods share this many GPUs; the rest wait Pending
    router: str = DEFAULT_ROUTER  # the gateway in front of every policy's pods (sim/fleet.py ROUTERS)


@dataclass(frozen=True)
class PolicyRun:
    result: PolicyResult
    timeline: tuple[FleetPoint, ...]
    records: tuple[RequestRecord, ...] = ()  # the scored requests, when the caller asked to keep them


class CountedTraffic:
    """Passes a traffic source through, counting the requests that arrive in [begin, end)."""

    def __init__(self, inner: TrafficSource, begin: float, end: float) -> None:
        self.inner, self.begin, self.end, self.arrived = inner, begin, end, 0
        self.lookahead = inner.lookahead
        self.cross_session = inner.cross_session

    def next_time(self) -> float:
        return self.inner.next_time()

    def peek(self) -> RequestSpec:
        return self.inner.peek()

    def pop(self) -> RequestSpec:
        spec = self.inner.pop()
        self.arrived += self.begin <= spec.arrival < self.end
        return spec

    def on_finish(self, record: RequestRecord) -> None:
        self.inner.on_finish(record)

    def on_reject(self, spec: RequestSpec, at: float) -> None:
        self.inner.on_reject(spec, at)


def run_policy(setup: RunSetup, policy: Policy, keep_records: bool = False) -> PolicyRun:
    """Runs in run time (0 is the warm-up's start); policies and results see scored time. With
    `keep_records` the run also returns the scored requests (a few hundred thousand on a busy scenario)."""
    wall = time.perf_counter()
    begin = setup.case.warmup
    end = begin + setup.case.duration
    traffic = CountedTraffic(setup.case.traffic(), begin, end)
    fleet = Fleet(traffic, router=setup.router, seed=setup.case.seed, sample_interval=CLIFF_SAMPLE_SECONDS)
    first = policy.start()  # before the actuator: infertune's strategy comes with the workload it renders
    actuator = Actuator(fleet, setup.replica, setup.load_seconds, setup.pool_gpus, policy.max_surge, origin=begin)
    actuator.start(first)
    fleet.run_until(begin)
    cliff = CliffMeter(CLIFF_SAMPLE_SECONDS)
    cliff.consume(fleet, count=False)
    now = begin
    try:
        while now < end:
            step = min(TICK_SECONDS, end - now)
            actuator.account(step)
            fleet.run_until(now + step)
            now += step
            cliff.consume(fleet)
            policy.tick(now - begin, actuator)
            actuator.reconcile()
        fleet.run_until(end + TAIL_SECONDS)
    finally:
        close = getattr(policy, "close", None)
        if close is not None:
            close()
    records = [r for r in fleet.records if begin <= r.spec.arrival < end]
    result = summarize(policy.name, records, traffic.arrived - len(records), setup.slo, actuator.gpu_seconds,
                       setup.price_per_gpu_hour, cliff.seconds, actuator.relayouts,
                       max((p.gpus for p in actuator.timeline), default=0), time.perf_counter() - wall,
                       peak_pending_gpus=max((p.pending_gpus for p in actuator.timeline), default=0))
    return PolicyRun(result, tuple(actuator.timeline), tuple(records) if keep_records else ())
