"""What a re-layout's rolling update does to serving capacity and to the pool, and the replica count
that keeps the demand served while it runs.

A re-layout is a new pod template, and the operator rolls it with maxSurge 1 and maxUnavailable 0
(actuate/workload.py). With those, the Deployment controller at once scales the old pods down to
the new replica count (it keeps that many available, no more), and only then replaces them one by
one as new pods pass readiness, a model load each. So a re-layout to fewer, larger replicas (TP4 x12
to TP8 x6) halves the serving capacity for the whole rollout, which at a 15-minute load is hours.
Sizing the old pods that stay by the model's rate for the old shape is not enough either: a shape
being left is often one the model no longer trusts (past the KV line), and every session whose pod
goes re-sends its whole context to a cold one, so the pods left carry more prefill than the demand
figure says (on the twin, keeping 7 of 15 TP4 pods for a TP8 roll queued 75 requests). So the new
shape is applied with at least as many replicas as run now: no old pod goes before a new one is
ready, and the extra new replicas go by the ordinary scale-down once the rollout is over. That count
must fit the pool at the rollout's fullest moment, or new pods stay Pending and the rollout stalls:
a target the pool cannot roll into is not reachable from what runs.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from infertune.planner.plan import Plan
from infertune.planner.types import Layout

# The strategy actuate/workload.py renders for every owned workload.
MAX_SURGE = 1


@dataclass(frozen=True)
class Rollout:
    planned: Layout  # the new shape at the count the demand needs once it runs alone
    target: Layout  # what to apply: the new shape, at the count that keeps every running pod until replaced
    peak_gpus: int  # the most GPUs old and new pods hold at any moment of the rollout

    def fits(self, pool_gpus: int | None) -> bool:
        return pool_gpus is None or self.peak_gpus <= pool_gpus


def peak_gpus(running: Layout, target: Layout, max_surge: int = MAX_SURGE) -> int:
    """The most GPUs held while `running` rolls to `target` (maxUnavailable 0): the old pods left,
    at most the target count less the new ones ready, beside the new pods, at most `max_surge` over
    the count in all."""
    count = target.replicas
    peak = 0
    for ready_new in range(count + 1):
        old = min(running.replicas, count - ready_new)
        new = min(count, count + max_surge - old)
        peak = max(peak, old * running.tensor_parallel_size + new * target.tensor_parallel_size)
    return peak


def plan_rollout(running: Layout, proposed: Layout, max_surge: int = MAX_SURGE) -> Rollout:
    """`proposed` at a count that keeps every running pod until a new one replaces it (old pods
    drop to the applied count at once)."""
    target = replace(proposed, replicas=max(proposed.replicas, running.replicas))
    return Rollout(proposed, target, peak_gpus(running, target, max_surge))


def reachable(plan: Plan, running: Layout, running_safe: bool = True) -> Rollout | None:
    """The best-ranked shape whose rollout from `running` keeps the demand served within the pool
    (the plan's own choice when it is). None when no shape is reachable, or when a safe running
    shape ranks above every reachable one: then the running shape is what to scale."""
    pool = plan.sizing.pool_gpus
    for layout in plan.ranked:
        if layout.same_shape(running):
            if running_safe:
                return None
            continue
        rollout = plan_rollout(running, layout)
        if rollout.fits(pool):
            return rollout
    return None
