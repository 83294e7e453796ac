"""What one replica of each layout can serve within the SLA, measured on the twin and cached.

Two runs per layout (TP, max-num-seqs) and session shape:
1. closed loop: one replica holds max-num-seqs sessions in flight (think times as the shape has
   them); its request throughput is what the layout does flat out;
2. open loop: a few replicas behind the session-affinity router get Poisson session starts at a
   falling share of that throughput until both SLOs hold for QUALIFYING_ATTAINMENT of requests.
   Random arrivals and uneven sessions need headroom a closed loop never shows. A trace is
   checked with Poisson arrivals of its own request sizes: its real bursts (the Azure code hour
   has 13x its mean rate in its busiest 10 s) would disqualify every layout at any sane load,
   so they are what the trace scenario tests every policy on, the oracle included.
The oracle and the static sizing read replica counts off this table; it is measured, not
predicted, so they size with the twin's own truth, as hindsight would.

A window lasts its simulated time or until it holds WINDOW_REQUESTS requests a replica, whichever
is shorter, so tiny requests (hundreds a second) cost no more than the named scenarios' largest windows.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from infertune_lab.bench.metrics import Slo, attainment
from infertune_lab.sim import ClosedLoop, Fleet, OpenSessions, ReplicaConfig, RequestRecord, SessionShape
from infertune_lab.sim.scenario import turns_per_session
from infertune_lab.sim.traffic import poisson

HAND_PICKED = (4, 8)  # the load test's hand pick, TP4 and max-num-seqs 8: what static and the autoscalers run
# A layout qualifies for the oracle when this share of its requests met each SLO in the sweep.
QUALIFYING_ATTAINMENT = 0.99
CONCURRENCY_GRID = (4, 8, 12, 16, 20, 24, 32, 40, 48, 64)
LOAD_SHARES = (0.9, 0.8, 0.7, 0.6, 0.5, 0.4)  # of the closed-loop throughput
OPEN_LOOP_REPLICAS = 4
RAMP_SECONDS = 60.0  # the closed loop's users join within this: simulated whatever the requests' size
DRAIN_SECONDS = 600.0  # a probe runs on this long after its window, so the window's requests finish
# The sweep's work bound. A window (the closed loop's 1,200 s, a probe's 2,400 s) also ends once it
# holds WINDOW_REQUESTS requests per replica it measures (one in the closed loop, four in a probe), and
# a warm-up keeps its quarter of that. Why that many is enough: a window decides whether 99% of its
# requests met each SLO, and from n requests that share is known to sqrt(0.99 x 0.01 / n) at one
# standard error, 0.06 points at 25,000 and 0.03 at a probe's 100,000, if misses were independent.
# They come in runs instead, while a queue is up; at a probe's highest load, 0.9 of flat out, a queue
# keeps its state for about 1 / (1 - 0.9)^2 = 100 requests, and counting such runs rather than requests
# the share is still known to 0.6 and 0.3 points. The flat-out rate, a count over a time, is known to
# 1 / sqrt(25,000) = 0.6%. The bound sits where it does because the named scenarios' windows reach
# 21,900 requests a replica (azure-code's trace: 18,303 in its TP8 c=64 closed loop, 87,686 in its
# TP8 c=4 probe) and their tables must not move: it binds on none of them. A trace of 20-token prompts
# and 5-token answers does 82-191 requests a second a replica: without the bound, 99,000-229,000 in a
# closed loop's window and 710,000-1,350,000 in a probe's.
WINDOW_REQUESTS = 25_000


@dataclass(frozen=True)
class LayoutCapacity:
    tp: int
    max_num_seqs: int
    requests_per_second: float  # closed loop, flat out
    ttft_attainment: float  # closed loop
    tps_attainment: float  # closed loop
    sustained_rps: float = 0.0  # per replica, open loop, with both SLOs met; 0: never

    def qualifies(self) -> bool:
        return self.sustained_rps > 0


class CapacitySweep:
    """The exhaustive sweep, cached per (replica model, SLO): `shared` hands every scenario of one
    benchmark process the same table, since the layouts' capacity does not depend on the scenario."""

    _shared: ClassVar[dict[tuple[str, Slo], CapacitySweep]] = {}

    @classmethod
    def shared(cls, base: ReplicaConfig, slo: Slo) -> CapacitySweep:
        """The process's sweep for this replica model and SLO (measured once, reused by every scenario)."""
        key = (repr(base), slo)  # the config holds a dict of fits: its repr is its identity
        if key not in cls._shared:
            cls._shared[key] = cls(base, slo)
        return cls._shared[key]

    def __init__(self, base: ReplicaConfig, slo: Slo, warmup: float = 300.0, duration: float = 1_200.0,
                 seed: int = 0, window_requests: int = WINDOW_REQUESTS) -> None:
        self.base, self.slo = base, slo
        self.warmup, self.duration, self.seed = warmup, duration, seed
        self.window_requests = window_requests  # per replica and window (WINDOW_REQUESTS)
        self._cache: dict[tuple[SessionShape, int, int], LayoutCapacity] = {}

    def measure(self, shape: SessionShape, tp: int, max_num_seqs: int) -> LayoutCapacity:
        """One replica at this layout, max_num_seqs sessions in flight, after the warm-up."""
        key = (shape, tp, max_num_seqs)
        if key not in self._cache:
            self._cache[key] = self._run(shape, tp, max_num_seqs)
        return self._cache[key]

    def table(self, shape: SessionShape, tps: Sequence[int],
              grid: Sequence[int] = CONCURRENCY_GRID) -> list[LayoutCapacity]:
        """Every layout the sweep considers, for this shape."""
        return [self.measure(shape, tp, c) for tp in tps for c in grid]

    def _run(self, shape: SessionShape, tp: int, max_num_seqs: int) -> LayoutCapacity:
        config = self.base.with_(tp=tp, max_num_seqs=max_num_seqs, load_delay_seconds=0.0)
        # The ramp staggers the first turns so the replica starts near steady state.
        traffic = ClosedLoop(shape, max_num_seqs, seed=self.seed, think=None, ramp=RAMP_SECONDS)
        fleet = Fleet(traffic, router="session-affinity", seed=self.seed)
        fleet.add_replica(config)
        # The warm-up stops at its share of the bound once the ramp is over, the window at the bound: its
        # rate is then its count over the time that took.
        warm = _Quota(self.window_requests * self.warmup / self.duration, RAMP_SECONDS)
        fleet.run_until(self.warmup, warm)
        start = warm.end if warm.full else self.warmup
        window = _Quota(self.window_requests, start)
        records = [r for r in fleet.run_until(start + self.duration, window) if r.first_token >= start]
        ttft, tps = attainment(records, self.slo)
        flat_out = len(records) / (window.end - start if window.full else self.duration)
        sustained = 0.0
        if min(ttft, tps) >= QUALIFYING_ATTAINMENT:
            sustained = next((flat_out * share for share in LOAD_SHARES
                              if self._holds(config, shape, flat_out * share)), 0.0)
        return LayoutCapacity(tp, max_num_seqs, flat_out, ttft, tps, sustained)

    def _holds(self, config: ReplicaConfig, shape: SessionShape, rps: float) -> bool:
        """Whether OPEN_LOOP_REPLICAS replicas meet both SLOs with Poisson sessions at `rps` each."""
        sessions = rps * OPEN_LOOP_REPLICAS / turns_per_session(shape)
        traffic = OpenSessions(shape, poisson(sessions, random.Random(self.seed)), seed=self.seed)
        fleet = Fleet(traffic, router="session-affinity", seed=self.seed)
        for _ in range(OPEN_LOOP_REPLICAS):
            fleet.add_replica(config)
        # A probe's rate is set, not measured, so its whole run is shortened up front (warm-up, window and
        # drain alike) to put the bound in its window on average.
        scale = min(1.0, self.window_requests / (rps * 2 * self.duration))
        warmup, end = self.warmup * scale, (self.warmup + 2 * self.duration) * scale
        records = [r for r in fleet.run_until(end + DRAIN_SECONDS * scale) if warmup <= r.spec.arrival < end]
        return min(attainment(records, self.slo)) >= QUALIFYING_ATTAINMENT


@dataclass
class _Quota:
    """A window's stop: true from the record that makes `requests` with a first token at or after
    `start`; `end` is when that record finished (NaN until then)."""

    requests: float
    start: float
    count: int = 0
    end: float = math.nan

    @property
    def full(self) -> bool:
        return self.count >= self.requests

    def __call__(self, record: RequestRecord) -> bool:
        if record.first_token >= self.start:
            self.count += 1
            if self.full and math.isnan(self.end):
                self.end = record.finish
        return self.full
