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
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from infertune_lab.bench.metrics import Slo, attainment
from infertune_lab.sim import ClosedLoop, Fleet, OpenSessions, ReplicaConfig, SessionShape
from infertune_lab.sim.scenario import turns_per_session
from infertune_lab.sim.traffic import poisson

HAND_PICKED = (4, 8)  # the load test's hand pick, TP4 and max-num-seqs 8: what static and the autoscalers run
# A layout qualifies for the oracle when this share of its requests met each SLO in the sweep.
QUALIFYING_ATTAINMENT = 0.99
CONCURRENCY_GRID = (4, 8, 12, 16, 20, 24, 32, 40, 48, 64)
LOAD_SHARES = (0.9, 0.8, 0.7, 0.6, 0.5, 0.4)  # of the closed-loop throughput
OPEN_LOOP_REPLICAS = 4


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
                 seed: int = 0) -> None:
        self.base, self.slo = base, slo
        self.warmup, self.duration, self.seed = warmup, duration, seed
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
        traffic = ClosedLoop(shape, max_num_seqs, seed=self.seed, think=None, ramp=60.0)
        fleet = Fleet(traffic, router="session-affinity", seed=self.seed)
        fleet.add_replica(config)
        fleet.run_until(self.warmup)
        end = self.warmup + self.duration
        records = [r for r in fleet.run_until(end) if r.first_token >= self.warmup]
        ttft, tps = attainment(records, self.slo)
        flat_out = len(records) / self.duration
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
        end = self.warmup + 2 * self.duration
        records = [r for r in fleet.run_until(end + 600.0) if self.warmup <= r.spec.arrival < end]
        return min(attainment(records, self.slo)) >= QUALIFYING_ATTAINMENT
