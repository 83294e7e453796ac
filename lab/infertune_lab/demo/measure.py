"""What the demo measures, from the twin itself rather than from what the operator reads: every
second, each replica's KV use and preemption counter; at the end, every finished request's TTFT and
per-stream speed against the SLA. Decisions come from the resource's status, as `kubectl` shows it.

Past the cliff means any replica with KV use >= 98% or a preemption in that second, the same line
the operator's CacheHeadroom condition draws.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from infertune.model.early_warning import CLIFF_USAGE
from infertune_lab.sim.live import LiveFleet
from infertune_lab.sim.records import RequestRecord


@dataclass(frozen=True)
class Sample:
    """One second of the fleet, at scenario time `t`."""

    t: float
    act: str
    serving: int  # replicas that are loaded and take traffic
    loading: int
    kv_max: float
    kv_mean: float
    running: int
    waiting: int
    preemptions: int  # in this second, over all replicas
    tp: int | None
    max_num_seqs: int | None
    replicas_wanted: int | None

    @property
    def past_cliff(self) -> bool:
        return self.kv_max >= CLIFF_USAGE or self.preemptions > 0


@dataclass(frozen=True)
class Decision:
    t: float  # scenario time the demo first saw it in the status
    time: str  # the operator's own timestamp
    action: str
    reason: str
    message: str


@dataclass
class Recorder:
    live: LiveFleet
    origin: float  # fleet time of the scenario's t=0
    samples: list[Sample] = field(default_factory=list)
    decisions: list[Decision] = field(default_factory=list)
    _preemptions: dict[str, int] = field(default_factory=dict)
    _seen: set[tuple[str, str, str]] = field(default_factory=set)

    def sample(self, act: str, applied: Mapping[str, Any] | None) -> Sample:
        with self.live.lock:
            fleet = self.live.fleet
            now = fleet.now
            replicas = list(fleet.replicas.values())
            kv = [r.engine.kv_usage for r in replicas if r.ready_at <= now]
            serving = sum(r.routable(now) for r in replicas)
            loading = sum(r.ready_at > now for r in replicas)
            running = sum(len(r.engine.running) for r in replicas)
            waiting = sum(len(r.engine.waiting) for r in replicas) + len(fleet.gateway)
            counters = {r.name: r.engine.meters.preemptions for r in replicas}
        new = sum(max(c - self._preemptions.get(name, 0), 0) for name, c in counters.items())
        self._preemptions.update(counters)
        applied = applied or {}
        s = Sample(now - self.origin, act, serving, loading, max(kv, default=0.0),
                   sum(kv) / len(kv) if kv else 0.0, running, waiting, new,
                   applied.get("tensorParallelSize"), applied.get("maxNumSeqs"), applied.get("replicas"))
        self.samples.append(s)
        return s

    def note_decisions(self, log: Sequence[Mapping[str, Any]], t: float) -> list[Decision]:
        """The status keeps the last few decisions; each new one is kept here with when it appeared."""
        fresh = []
        for entry in log:
            key = (str(entry.get("time")), str(entry.get("action")), str(entry.get("reason")))
            if key in self._seen:
                continue
            self._seen.add(key)
            fresh.append(Decision(t, key[0], key[1], key[2], str(entry.get("message", ""))))
        self.decisions.extend(fresh)
        return fresh

    def requests(self) -> list[RequestRecord]:
        return [r for r in self.live.records() if r.spec.arrival >= self.origin]

    @property
    def preemptions(self) -> int:
        return sum(self._preemptions.values())
