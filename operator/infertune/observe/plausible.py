"""What a reading may physically be, and when a jump in demand is believed. Pure: no I/O, no clock.

`replica_limits` bounds what one replica of a model on a GPU can report, from physics alone: a pass
reads at least the active weights once, at no more than the HBM bandwidth of the TP group, so no
replica runs more than max-num-seqs streams, decodes more than one token per stream per pass
(speculative decoding: a few), or starts more requests than it has streams per pass. Readings past
that are not believed (observe/figures.py `implausible`); the margins are wide on purpose, because
a wrong limit would hold a healthy fleet, while the readings they catch (10^9 req/s, 1e308) are not
near any fleet.

`JumpGuard` asks for corroboration: demand that moves by more than `factor` from one poll to the next
is held as `ImplausibleValue` until the next reading confirms it, so one bad scrape never scales a
fleet from 1 to its maximum. A real surge costs one poll interval.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable
from dataclasses import dataclass, field

from infertune.api.observation import MetricsFault, Observation
from infertune.model.catalog import GpuSpec, ModelProfile
from infertune.model.roofline import DRAFT_TOKENS_PER_PASS, pass_floor_seconds
from infertune.observe.figures import DeploymentKey, ReplicaLimits

# The requests a stream may finish in one pass: one (a request needs at least one pass to produce
# its first token); doubled as a margin for windows that end mid-pass.
REQUEST_MARGIN = 2.0


def replica_limits(model: ModelProfile, gpu: GpuSpec, tp_sizes: Iterable[int], max_num_seqs: int) -> ReplicaLimits:
    """What one replica can report per second at the fastest allowed TP with `max_num_seqs` streams."""
    floor = min(pass_floor_seconds(model, gpu, tp) for tp in tuple(tp_sizes) or (1,))
    if not (math.isfinite(floor) and floor > 0):
        return ReplicaLimits(running=float(max_num_seqs))
    passes = 1.0 / floor
    return ReplicaLimits(running=float(max_num_seqs), requests=REQUEST_MARGIN * max_num_seqs * passes,
                         tokens=DRAFT_TOKENS_PER_PASS * max_num_seqs * passes)


def _jumped(before: float, after: float, factor: float, floor: float) -> bool:
    """More than `factor` apart, counting anything under `floor` as `floor` (0.1 -> 2 req/s is no jump)."""
    low, high = sorted((max(before, floor), max(after, floor)))
    return high > factor * low


@dataclass
class JumpGuard:
    """Per deployment: the last trusted demand, and a jump waiting for its confirmation."""

    factor: float = 4.0  # a change larger than this, either way, is a jump
    confirm_factor: float = 2.0  # the confirming reading must be this close to the jump
    floor: float = 1.0  # req/s: changes among smaller figures are not jumps
    memory_seconds: float = 300.0  # an older trusted figure is no reference
    _trusted: dict[DeploymentKey, tuple[float, float]] = field(default_factory=dict)
    _pending: dict[DeploymentKey, tuple[float, float]] = field(default_factory=dict)

    def judge(self, key: DeploymentKey, obs: Observation) -> Observation:
        """`obs` as it is, or held as ImplausibleValue when its demand jumped and nothing confirms it."""
        now = obs.demand_rate  # what the planner sizes for (None when unavailable or unknown)
        at = obs.sample_time
        trusted = self._trusted.get(key)
        if now is None:
            return self._judge_floor(key, obs, trusted)
        if trusted is None or at - trusted[0] > self.memory_seconds or not _jumped(trusted[1], now, self.factor,
                                                                                    self.floor):
            return self._trust(key, at, now, obs)
        pending = self._pending.get(key)
        if pending is not None and pending[0] < at and not _jumped(pending[1], now, self.confirm_factor, self.floor):
            return self._trust(key, at, now, obs)  # the jump was seen twice: it is real
        if pending is None or pending[0] < at:
            self._pending[key] = (at, now)
        return dataclasses.replace(
            obs, available=False, fault=MetricsFault.IMPLAUSIBLE,
            message=f"demand jumped from {trusted[1]:.3g} to {now:.3g} req/s in one poll; held until the next "
                    "poll confirms it")

    def _judge_floor(self, key: DeploymentKey, obs: Observation,
                     trusted: tuple[float, float] | None) -> Observation:
        """A demand floor (a new replica has no rate yet) may add replicas, so a jump up from the last
        trusted figure is held like any other; it becomes no reference itself, and a floor below the
        figure says nothing (the replicas without a rate carry the rest)."""
        floor = obs.demand_floor
        if (floor is None or trusted is None or obs.sample_time - trusted[0] > self.memory_seconds
                or floor <= trusted[1] or not _jumped(trusted[1], floor, self.factor, self.floor)):
            return obs
        return dataclasses.replace(
            obs, available=False, fault=MetricsFault.IMPLAUSIBLE,
            message=f"demand jumped from {trusted[1]:.3g} to at least {floor:.3g} req/s in one poll (a new replica "
                    "has no rate yet); held until a reading of every replica confirms it")

    def _trust(self, key: DeploymentKey, at: float, now: float, obs: Observation) -> Observation:
        self._trusted[key] = (at, now)
        self._pending.pop(key, None)
        return obs

    def forget(self, key: DeploymentKey) -> None:
        self._trusted.pop(key, None)
        self._pending.pop(key, None)
