"""How every policy's decision reaches the simulated fleet: a Deployment's semantics in virtual time,
on a pool of GPUs that a scheduler hands out.

A policy only says which layout it wants (TP, max-num-seqs, replicas). `Actuator` makes the fleet
converge on it the way the Deployment controller would with the strategy the operator renders
(`RollingUpdate`, maxSurge 1 and maxUnavailable 0 unless the workload says otherwise;
actuate/workload.py):

- a replica-count change on the same pod template adds pods, routable after the model-load delay,
  or removes them in ReplicaSet's deletion order (Pending pods first, then the not-yet-ready, then
  the newest); removed pods drain: they finish what they hold, and hold their GPUs until gone, for
  at most the pod's termination grace period (the operator renders 120 s), when the kubelet kills
  them and what they still hold goes back to the gateway, as a retrying client sends it again;
- a new TP or max-num-seqs is a new pod template, rolled: at most `max_surge` pods above the
  desired count, new pods load while the old ones serve, and an old pod goes only once the ready
  pods without it still reach the desired count less `max_unavailable`.

The GPUs are a pool of `pool_gpus`, as a cluster's nodes are. A pod that finds no room stays
Pending, as kube-scheduler leaves it: it serves nothing, costs no GPU-hours, and its model load
starts only once it is placed. Pending pods are placed in creation order whenever room appears (a
draining pod leaving, a scale-down), each where it fits, as the scheduler's queue does without
priorities. The pool is counted in GPUs, not per node: a TP8 pod is placed wherever 8 GPUs are
free in all (node fragmentation is not modelled).

`max_surge=None` starts every new-template pod at once (two Deployments, blue/green), which is how
the hindsight oracle stages the next window ahead of time.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from infertune.actuate.engine import TERMINATION_GRACE_SECONDS
from infertune.planner.types import Layout
from infertune_lab.sim import Fleet, Replica, ReplicaConfig

Shape = tuple[int, int]  # (tensor-parallel size, max-num-seqs): what the pod template pins


@dataclass(frozen=True)
class FleetPoint:
    """The fleet at one instant: GPUs held (loading, serving, draining), those serving, those
    Pending pods wait for, and those the Deployment's live pods ask for (placed and not draining,
    or Pending: what the policy's decision and its rollout ask of the pool)."""

    time: float
    gpus: int
    ready_gpus: int
    tp: int
    max_num_seqs: int
    replicas: int
    pending_gpus: int = 0
    asked_gpus: int = 0


@dataclass(frozen=True)
class PendingPod:
    """A pod the Deployment created that the scheduler has not placed: no GPUs, no model load yet."""

    name: str
    shape: Shape

    @property
    def tp(self) -> int:
        return self.shape[0]


Pod = Replica | PendingPod  # a live pod of the Deployment: placed (a replica of the fleet) or Pending


def shape_of(pod: Pod) -> Shape:
    if isinstance(pod, PendingPod):
        return pod.shape
    return pod.config.tp, pod.engine.max_num_seqs


class Actuator:
    def __init__(self, fleet: Fleet, base: ReplicaConfig, load_seconds: float, pool_gpus: int,
                 max_surge: int | None = 1, origin: float = 0.0,
                 grace_seconds: float = TERMINATION_GRACE_SECONDS) -> None:
        if pool_gpus < 1:
            raise ValueError(f"the pool needs at least one GPU, got {pool_gpus}")
        self.fleet = fleet
        self.origin = origin  # fleet time of the scored run's start; the timeline is in scored time
        self.base = base
        self.load_seconds = load_seconds
        self.pool_gpus = pool_gpus
        self.max_surge = max_surge
        self.grace_seconds = grace_seconds
        self.max_unavailable = 0
        self.target: Layout | None = None
        self.relayouts = 0
        self.gpu_seconds = 0.0
        self.timeline: list[FleetPoint] = []
        self.pending: list[PendingPod] = []  # in creation order
        self._names = itertools.count()

    # --- what the policies call ---------------------------------------------------------------
    def start(self, layout: Layout) -> None:
        """The layout already serving when the run begins: the pods the pool holds loaded before
        time 0; any beyond it are Pending from the start."""
        self.target = layout
        for _ in range(layout.replicas):
            self._create(layout)
        self._schedule(loaded=True)

    def apply(self, layout: Layout, max_surge: int | None = None, max_unavailable: int = 0) -> None:
        """Sets the desired layout (and, when the workload names it, its rollout's maxSurge and
        maxUnavailable); the fleet converges on it over the following reconciles."""
        if self.target is not None and not layout.same_shape(self.target):
            self.relayouts += 1
        self.target = layout
        if max_surge is not None:
            self.max_surge = max_surge
        self.max_unavailable = max_unavailable
        self.reconcile()

    # --- the Deployment controller ------------------------------------------------------------
    def serving(self) -> list[Replica]:
        """Placed pods that are not draining (loading or ready)."""
        return [r for r in self.fleet.replicas.values() if not r.draining]

    def pods(self) -> list[Pod]:
        """The Deployment's live pods (status.replicas): placed and not draining, and Pending."""
        return [*self.serving(), *self.pending]

    def ready(self, replica: Replica) -> bool:
        """Loaded and serving: the pod passes its readiness probe."""
        return replica.routable(self.fleet.now)

    def held_gpus(self) -> int:
        """GPUs the scheduler has handed out: every placed pod, draining ones included."""
        return sum(r.config.tp for r in self.fleet.replicas.values())

    def reconcile(self) -> None:
        target = self.target
        if target is None:
            return
        want: Shape = (target.tensor_parallel_size, target.max_num_seqs)
        pods = self.pods()
        new = [p for p in pods if shape_of(p) == want]
        old = [p for p in pods if shape_of(p) != want]
        if not old:
            if len(new) < target.replicas:
                for _ in range(target.replicas - len(new)):
                    self._create(target)
            elif len(new) > target.replicas:
                self._remove(new, len(new) - target.replicas)
            self._schedule()
            return
        # A rollout in progress. Old pods that are not ready serve nobody: they go at once.
        self._remove([p for p in old if not self._is_ready(p)], len(old))
        old = [p for p in old if self._is_ready(p)]
        self._surge(target, want)
        new = [p for p in self.pods() if shape_of(p) == want]
        ready_new = sum(self._is_ready(p) for p in new)
        # An old pod may go only if the ready pods left still reach the count less maxUnavailable.
        self._remove(old, max(len(old) + ready_new - (target.replicas - self.max_unavailable), 0))
        if len(new) > target.replicas:
            self._remove(new, len(new) - target.replicas)
        self._surge(target, want)  # the room an old pod left is taken in the same sync
        self._schedule()

    def _is_ready(self, pod: Pod) -> bool:
        return not isinstance(pod, PendingPod) and self.ready(pod)

    def _surge(self, target: Layout, want: Shape) -> None:
        """Creates new-template pods up to the count, never more than max_surge above it in all."""
        pods = self.pods()
        new = sum(shape_of(p) == want for p in pods)
        surge = target.replicas if self.max_surge is None else self.max_surge
        room = min(target.replicas + surge - len(pods), target.replicas - new)
        for _ in range(max(room, 0)):
            self._create(target)

    def _create(self, layout: Layout) -> None:
        """A new pod: Pending until the scheduler places it."""
        name = f"tp{layout.tensor_parallel_size}-c{layout.max_num_seqs}-{next(self._names)}"
        self.pending.append(PendingPod(name, (layout.tensor_parallel_size, layout.max_num_seqs)))

    def _schedule(self, loaded: bool = False) -> None:
        """Places Pending pods in creation order wherever the pool has room; each starts loading now
        (`loaded`: the run's starting pods, which loaded before time 0)."""
        free = self.pool_gpus - self.held_gpus()
        waiting: list[PendingPod] = []
        for pod in self.pending:
            if pod.tp > free:
                waiting.append(pod)
                continue
            free -= pod.tp
            tp, max_num_seqs = pod.shape
            config = self.base.with_(tp=tp, max_num_seqs=max_num_seqs, load_delay_seconds=self.load_seconds)
            at = self.fleet.now - self.load_seconds if loaded else self.fleet.now
            self.fleet.add_replica(config, pod.name, at=at)
        self.pending = waiting

    def _remove(self, pods: list[Pod], count: int) -> None:
        """ReplicaSet's deletion order: Pending pods first (the newest of them first), then the
        unready, then the most recently ready."""
        if count <= 0:
            return
        now = self.fleet.now
        order = {p.name: i for i, p in enumerate(self.pending)}

        def rank(pod: Pod) -> tuple[bool, bool, float]:
            if isinstance(pod, PendingPod):
                return False, False, -order[pod.name]
            return True, pod.routable(now), -pod.ready_at

        for pod in sorted(pods, key=rank)[:count]:
            if isinstance(pod, PendingPod):
                self.pending.remove(pod)
            else:
                self.fleet.remove_replica(pod.name, drain=True, grace_seconds=self.grace_seconds)

    # --- accounting ---------------------------------------------------------------------------
    def account(self, seconds: float) -> None:
        """Charges `seconds` of every placed pod, loading, serving or draining, x its TP. Pending
        pods hold no GPU and cost nothing."""
        self.gpu_seconds += seconds * self.held_gpus()
        self._record()

    def _record(self) -> None:
        now = self.fleet.now
        replicas = list(self.fleet.replicas.values())
        target = self.target or Layout(0, 0, 0)
        self.timeline.append(FleetPoint(
            now - self.origin, sum(r.config.tp for r in replicas),
            sum(r.config.tp for r in replicas if r.routable(now)),
            target.tensor_parallel_size, target.max_num_seqs, target.replicas,
            sum(p.tp for p in self.pending), sum(shape_of(p)[0] for p in self.pods())))
