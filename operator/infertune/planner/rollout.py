"""What a re-layout's rolling update does to serving capacity, to the pool and to the bill, and the
replica count and surge that keep the demand served while it runs.

A re-layout is a new pod template. The operator rolls it with maxUnavailable 0 and a maxSurge it
chooses (actuate/workload.py renders it). With those, the Deployment controller at once scales the old
pods down to the new replica count T (it keeps that many available, no more), starts up to maxSurge new
pods beside them, and replaces old pods one for one as new ones pass readiness, a model load each. So:

- **The count applied.** Old pods left at T must still carry the demand while the new ones load. A
  re-layout to fewer, larger replicas (TP4 x12 to TP8 x6) would otherwise halve the serving capacity for
  the whole rollout, and every session whose pod goes re-sends its whole context to a cold one. So T is
  at least the number of old pods to keep: what the demand needs of the running shape (or, when the
  model no longer trusts that shape or no demand figure exists, every pod that runs); the new shape's
  extra replicas go by the ordinary scale-down once the rollout is over.
- **The surge.** One pod at a time turns twelve replicas into twelve model loads in a row: three hours
  at 900 s, with old and new pods both paid for. The surge is instead the most new pods the pool holds
  beside the old ones at the rollout's fullest moment, so the rollout takes as few loads as the pool
  allows. A target whose rollout does not fit the pool even one pod at a time is not reachable from
  what runs (a Pending surge pod stalls a maxUnavailable-0 rollout for good).
- **The bill.** The rollout's waves, its duration and the GPU-time it pays beyond the new shape's own
  (old pods still serving, new ones loading) go into the decision: a re-layout must save more than that
  over the horizon, and `infertune explain` shows it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from infertune.planner.plan import Plan
from infertune.planner.types import Layout

# What a Deployment rolls with when nothing else is said (a scale of the same template).
DEFAULT_MAX_SURGE = 1


@dataclass(frozen=True)
class Rollout:
    planned: Layout  # the new shape at the count the demand needs once it runs alone
    target: Layout  # what to apply: the new shape at the count that keeps the old pods the demand needs
    kept: int  # old pods serving when the rollout starts (the controller drops the rest at once)
    max_surge: int  # new pods started beside the old ones at a time
    waves: int  # model loads in a row until every new pod serves
    duration_s: float
    peak_gpus: int  # the most GPUs old and new pods hold at any moment
    extra_gpu_seconds: float  # GPU-time beyond the target's own while old and new pods overlap

    def describe(self) -> str:
        return (f"rolls out in {self.waves} wave(s) of up to {self.max_surge} pod(s), about "
                f"{self.duration_s / 60:.0f} min, {self.extra_gpu_seconds / 3600:.1f} GPU-h paid beside the new "
                f"shape's own, at most {self.peak_gpus} GPUs at once")


def _waves(old: int, count: int, surge: int) -> list[tuple[int, int, int]]:
    """(old pods, new pods ready, new pods loading) during each model load of the rollout."""
    steps, ready = [], 0
    while ready < count:
        # The controller starts new pods up to `surge` over the count in all, never beyond the count.
        loading = min(count - ready, max(count + surge - old - ready, 0))
        if loading <= 0:
            break  # no room to start a pod: the rollout stalls (the caller rejects such a surge)
        steps.append((old, ready, loading))
        ready += loading
        old = max(0, min(old, count - ready))
    return steps


def peak_gpus(running: Layout, target: Layout, max_surge: int = DEFAULT_MAX_SURGE) -> int:
    """The most GPUs held while `running` rolls to `target` (maxUnavailable 0): the old pods left,
    at most the target count less the new ones ready, beside the new pods, at most `max_surge` over
    the count in all."""
    old = min(running.replicas, target.replicas)
    steps = _waves(old, target.replicas, max_surge)
    if not steps:
        return old * running.tensor_parallel_size
    return max(o * running.tensor_parallel_size + (r + n) * target.tensor_parallel_size for o, r, n in steps)


def plan_rollout(running: Layout, proposed: Layout, keep: int | None = None, pool_gpus: int | None = None,
                 load_seconds: float = 0.0, keep_at_least: int | None = None) -> Rollout | None:
    """`proposed` at a count that keeps `keep` old pods serving until new ones replace them (all that
    run when None), with the largest surge the pool holds. When the pool cannot hold that many old pods
    beside one new one, fewer are kept, down to `keep_at_least` (what the demand measured now needs of
    the running shape; `keep` itself when None) or the count `proposed` needs on its own: the headroom
    and the remembered peaks are given up for the rollout's loads rather than stay on a shape the full
    pool can never leave. None when even that does not fit."""
    kept_wanted = running.replicas if keep is None else max(0, min(keep, running.replicas))
    floor = kept_wanted if keep_at_least is None else min(kept_wanted, max(0, keep_at_least))
    top = max(proposed.replicas, kept_wanted)
    # Every pod the demand wants kept, when the pool holds that; else, of the counts down to the floor,
    # the one that rolls in the fewest loads (the most kept of those): shed pods buy surge room, and a
    # rollout of one pod at a time across a full pool takes a model load per pod.
    fitting = [r for r in (_fitted(running, replace(proposed, replicas=c), pool_gpus, load_seconds, proposed)
                           for c in range(top, max(proposed.replicas, floor) - 1, -1)) if r is not None]
    if not fitting or fitting[0].target.replicas == top:
        return fitting[0] if fitting else None
    return min(fitting, key=lambda r: (r.waves, -r.kept))


def _fitted(running: Layout, target: Layout, pool_gpus: int | None, load_seconds: float,
            proposed: Layout) -> Rollout | None:
    """The rollout to `target` with the largest surge the pool holds; None when none does."""
    surge = next((s for s in range(target.replicas, 0, -1)
                  if pool_gpus is None or peak_gpus(running, target, s) <= pool_gpus), None)
    return None if surge is None else _rollout(running, proposed, target, surge, load_seconds)


def _rollout(running: Layout, proposed: Layout, target: Layout, surge: int, load_seconds: float) -> Rollout:
    kept = min(running.replicas, target.replicas)
    steps = _waves(kept, target.replicas, surge)
    held = sum(o * running.tensor_parallel_size + (r + n) * target.tensor_parallel_size for o, r, n in steps)
    duration = len(steps) * load_seconds
    extra = max(held * load_seconds - target.gpus * duration, 0.0)
    return Rollout(proposed, target, kept, surge, len(steps), duration, peak_gpus(running, target, surge), extra)


def reachable(plan: Plan, running: Layout, running_safe: bool = True, keep: int | None = None,
              load_seconds: float = 0.0, keep_at_least: int | None = None) -> Rollout | None:
    """The best-ranked shape whose rollout from `running` keeps the demand served within the pool
    (the plan's own choice when it is; only that one may shed pods down to `keep_at_least`). None
    when no shape is reachable, or when a safe running shape ranks above every reachable one: then
    the running shape is what to scale."""
    pool = plan.sizing.pool_gpus
    for layout in plan.ranked:
        if layout.same_shape(running):
            if running_safe:
                return None
            continue
        # Pods are shed only for the plan's own choice: a next-best shape that sheds them trades a full
        # pool for another full pool of a shape nobody chose (and may not be left again).
        shed = keep_at_least if plan.layout is not None and layout.same_shape(plan.layout) else None
        rollout = plan_rollout(running, layout, keep, pool, load_seconds, shed)
        if rollout is not None:
            return rollout
    return None
