"""How every policy's decision reaches the simulated fleet: a Deployment's semantics in virtual time.

A policy only says which layout it wants (TP, max-num-seqs, replicas). `Actuator` makes the fleet
converge on it the way the Deployment controller would with the strategy the operator renders
(`RollingUpdate`, maxSurge 1, maxUnavailable 0; actuate/workload.py):

- a replica-count change on the same pod template adds replicas, routable after the model-load
  delay, or removes them, the not-yet-ready ones first and then the newest (ReplicaSet's
  deletion order); removed replicas drain: they finish what they hold, and count until gone;
- a new TP or max-num-seqs is a new pod template, rolled: at most `max_surge` replicas above the
  desired count, new pods load while the old ones serve, and an old pod goes only once the ready
  pods without it still reach the desired count.

`max_surge=None` starts every new-template replica at once (two Deployments, blue/green), which
is how the hindsight oracle stages the next window ahead of time.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from infertune.planner.types import Layout
from infertune_lab.sim import Fleet, Replica, ReplicaConfig

Shape = tuple[int, int]  # (tensor-parallel size, max-num-seqs): what the pod template pins


@dataclass(frozen=True)
class FleetPoint:
    """The fleet at one instant, for the plots: GPUs that exist, and those serving."""

    time: float
    gpus: int
    ready_gpus: int
    tp: int
    max_num_seqs: int
    replicas: int


def shape_of(replica: Replica) -> Shape:
    return replica.config.tp, replica.engine.max_num_seqs


class Actuator:
    def __init__(self, fleet: Fleet, base: ReplicaConfig, load_seconds: float, max_surge: int | None = 1,
                 origin: float = 0.0) -> None:
        self.fleet = fleet
        self.origin = origin  # fleet time of the scored run's start; the timeline is in scored time
        self.base = base
        self.load_seconds = load_seconds
        self.max_surge = max_surge
        self.target: Layout | None = None
        self.relayouts = 0
        self.gpu_seconds = 0.0
        self.timeline: list[FleetPoint] = []
        self._names = itertools.count()

    # --- what the policies call ---------------------------------------------------------------
    def start(self, layout: Layout) -> None:
        """The layout already serving when the run begins: its replicas loaded before time 0."""
        self.target = layout
        for _ in range(layout.replicas):
            self._add(layout, at=self.fleet.now - self.load_seconds)

    def apply(self, layout: Layout, max_surge: int | None = None) -> None:
        """Sets the desired layout (and, when the workload names it, its rollout's maxSurge); the
        fleet converges on it over the following reconciles."""
        if self.target is not None and not layout.same_shape(self.target):
            self.relayouts += 1
        self.target = layout
        if max_surge is not None:
            self.max_surge = max_surge
        self.reconcile()

    # --- the Deployment controller ------------------------------------------------------------
    def serving(self) -> list[Replica]:
        """Replicas that are not draining: the Deployment's pods (status.replicas)."""
        return [r for r in self.fleet.replicas.values() if not r.draining]

    def ready(self, replica: Replica) -> bool:
        """Loaded and serving: the pod passes its readiness probe."""
        return replica.routable(self.fleet.now)

    def reconcile(self) -> None:
        target = self.target
        if target is None:
            return
        now = self.fleet.now
        want: Shape = (target.tensor_parallel_size, target.max_num_seqs)
        pods = self.serving()
        new = [r for r in pods if shape_of(r) == want]
        old = [r for r in pods if shape_of(r) != want]
        if not old:
            if len(new) < target.replicas:
                for _ in range(target.replicas - len(new)):
                    self._add(target, at=now)
            elif len(new) > target.replicas:
                self._remove(new, len(new) - target.replicas)
            return
        # A rollout in progress. Old pods that are not ready serve nobody: they go at once.
        self._remove([r for r in old if not r.routable(now)], len(old))
        old = [r for r in old if r.routable(now)]
        self._surge(target, want)
        new = [r for r in self.serving() if shape_of(r) == want]
        ready_new = sum(r.routable(now) for r in new)
        # maxUnavailable 0: an old pod may go only if the ready pods left still reach the count.
        self._remove(old, max(len(old) + ready_new - target.replicas, 0))
        if len(new) > target.replicas:
            self._remove(new, len(new) - target.replicas)
        self._surge(target, want)  # the room an old pod left is taken in the same sync

    def _surge(self, target: Layout, want: Shape) -> None:
        """Starts new-template pods up to the count, never more than max_surge above it in all."""
        pods = self.serving()
        new = sum(shape_of(r) == want for r in pods)
        surge = target.replicas if self.max_surge is None else self.max_surge
        room = min(target.replicas + surge - len(pods), target.replicas - new)
        for _ in range(max(room, 0)):
            self._add(target, at=self.fleet.now)

    def _add(self, layout: Layout, at: float) -> None:
        config = self.base.with_(tp=layout.tensor_parallel_size, max_num_seqs=layout.max_num_seqs,
                                 load_delay_seconds=self.load_seconds)
        name = f"tp{layout.tensor_parallel_size}-c{layout.max_num_seqs}-{next(self._names)}"
        self.fleet.add_replica(config, name, at=at)

    def _remove(self, pods: list[Replica], count: int) -> None:
        """ReplicaSet deletion order: unready pods first, then the newest."""
        now = self.fleet.now
        ranked = sorted(pods, key=lambda r: (r.routable(now), -r.ready_at))
        for replica in ranked[:count]:
            self.fleet.remove_replica(replica.name, drain=True)

    # --- accounting ---------------------------------------------------------------------------
    def account(self, seconds: float) -> None:
        """Charges `seconds` of every replica that exists, loading, serving or draining, x its TP."""
        self.gpu_seconds += seconds * sum(r.config.tp for r in self.fleet.replicas.values())
        self._record()

    def _record(self) -> None:
        now = self.fleet.now
        replicas = list(self.fleet.replicas.values())
        target = self.target or Layout(0, 0, 0)
        self.timeline.append(FleetPoint(
            now - self.origin, sum(r.config.tp for r in replicas),
            sum(r.config.tp for r in replicas if r.routable(now)),
            target.tensor_parallel_size, target.max_num_seqs, target.replicas))
