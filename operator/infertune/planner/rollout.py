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
  at the count the demand needs of it (old pods still serving, new ones loading, and the new pods a count
  kept for the old ones adds) go into the decision: a re-layout must save more than that
  over the horizon, and `infertune explain` shows it.
- **Giving way.** A Deployment replaces pods one for one by count, so on a full pool a move to larger pods
  (TP4 x8 to TP8 x4 on 32 GPUs) has no maxUnavailable-0 rollout at all: the last new pod needs the GPUs of
  an old pod that waits for it. When the running shape can neither scale nor be left and the SLO is being
  missed, `giving_way` renders maxUnavailable > 0: old pods go before their replacements are ready. Each
  strategy the pool holds and that ends within the horizon is judged by a fluid queue
  (`queued_request_seconds`): the requests waiting now and those arriving, served at what the pods up in
  each wave carry flat out, then by the finished shape to the horizon's end. A dip below the demand leaves
  a backlog that outlives it (the capacity after must clear it, and everything arriving meanwhile waits
  behind it), so a deep dip on a long model load costs far more than its own length; a shortfall by a hair
  costs little. The strategy with the least queueing goes, and only when that is less than staying leaves
  (an outgrown shape's backlog grows for the whole horizon; past the cliff its pods count at what they
  complete).
"""

from __future__ import annotations

from collections.abc import Sequence
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
    extra_gpu_seconds: float  # GPU-time beyond the planned shape's own until every new pod serves
    max_unavailable: int = 0  # old pods that go before their replacements serve (giving way only)
    # The least share of the demand measured now that the serving pods carry during the rollout; only a
    # rollout that gives way computes it (the others keep every old pod the demand needs).
    serving_share: float = 1.0

    def describe(self) -> str:
        given_up = ("" if self.max_unavailable == 0 else
                    f", giving up to {self.max_unavailable} old pod(s) before their replacements serve (at least "
                    f"{self.serving_share:.0%} of the demand served meanwhile)")
        return (f"rolls out in {self.waves} wave(s) of up to {max(self.max_surge, self.max_unavailable)} pod(s), about "
                f"{self.duration_s / 60:.0f} min, {self.extra_gpu_seconds / 3600:.1f} GPU-h paid beside the new "
                f"shape's own at {self.planned.replicas} replica(s), at most {self.peak_gpus} GPUs at once{given_up}")


Wave = tuple[int, int, int]  # old pods serving, new pods ready, new pods loading


def _waves(old: int, count: int, surge: int, unavailable: int = 0) -> list[Wave]:
    """The rollout's model loads as the Deployment controller runs them, each sync to its fixed point:
    the new ReplicaSet grows to at most `surge` pods over the count in all, the old one shrinks while
    the ready pods stay at least `count - unavailable`. Empty when the rollout stalls before every new
    pod serves (no room to start one)."""
    steps: list[Wave] = []
    ready = new = 0
    while ready < count:
        while True:
            grown = min(count, new + max(count + surge - old - new, 0))
            shrunk = min(old, max(count - unavailable - ready, 0))
            if (grown, shrunk) == (new, old):
                break
            new, old = grown, shrunk
        if new <= ready:
            return []
        steps.append((old, ready, new - ready))
        ready = new
    return steps


def _held(running: Layout, target: Layout, wave: Wave) -> int:
    old, ready, loading = wave
    return old * running.tensor_parallel_size + (ready + loading) * target.tensor_parallel_size


def peak_gpus(running: Layout, target: Layout, max_surge: int = DEFAULT_MAX_SURGE, max_unavailable: int = 0) -> int:
    """The most GPUs held while `running` rolls to `target`: the old pods left beside the new pods,
    at most `max_surge` over the count in all (every old pod when the rollout stalls)."""
    steps = _waves(running.replicas, target.replicas, max_surge, max_unavailable)
    if not steps:
        return running.gpus + max_surge * target.tensor_parallel_size
    return max(_held(running, target, wave) for wave in steps)


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
    if not fitting:
        return None
    if fitting[0].target.replicas == top:
        return fitting[0]
    return min(fitting, key=lambda r: (r.waves, -r.kept))


def _fitted(running: Layout, target: Layout, pool_gpus: int | None, load_seconds: float,
            proposed: Layout) -> Rollout | None:
    """The rollout to `target` with the largest surge the pool holds; None when none does."""
    surge = next((s for s in range(target.replicas, 0, -1)
                  if pool_gpus is None or peak_gpus(running, target, s) <= pool_gpus), None)
    return None if surge is None else _rollout(running, proposed, target, surge, load_seconds)


def _rollout(running: Layout, proposed: Layout, target: Layout, surge: int, load_seconds: float,
             unavailable: int = 0, steps: list[Wave] | None = None) -> Rollout:
    """The rollout's figures from its waves (`steps`, when the caller has them already)."""
    if steps is None:
        steps = _waves(running.replicas, target.replicas, surge, unavailable)
    if not steps:
        peak = peak_gpus(running, target, surge, unavailable)
        return Rollout(proposed, target, min(running.replicas, target.replicas), surge, 0, 0.0, peak, 0.0, unavailable)
    held = [_held(running, target, wave) for wave in steps]
    duration = len(steps) * load_seconds
    # Beyond the planned shape's own, not the target's: a target inflated to keep old pods serving (7 TP4
    # pods kept ask for 7 TP8 pods where 2 carry the demand) pays for its extra pods only because of the
    # move, and a bill that left them out let moves for a few GPUs hold 40 more for a load (docs/bench.md).
    extra = max(sum(held) * load_seconds - proposed.gpus * duration, 0.0)
    return Rollout(proposed, target, steps[0][0], surge, len(steps), duration, max(held), extra, unavailable)


def _pod_counts(most: int) -> list[int]:
    """0, 1, 2, 3, 4, 6, 8, 12, 16, ... up to `most`: the maxSurge and maxUnavailable tried. Every
    value of a 64-pod fleet would be 64 x 64 simulated rollouts a count; the gaps grow with the count,
    where one pod more or less moves the rollout least."""
    counts, step = {0, most}, 1
    while step <= most:
        counts.update({step, step + step // 2})
        step *= 2
    return sorted(c for c in counts if c <= most)


@dataclass(frozen=True)
class Demand:
    """What a fluid queue of the fleet is fed: requests/s arriving, and requests waiting now."""

    arrival_rps: float
    waiting: float = 0.0


def queued_request_seconds(demand: Demand, segments: Sequence[tuple[float, float]], horizon_s: float) -> float:
    """Request-seconds spent waiting over the next `horizon_s`, in a fluid queue: `demand.waiting` now,
    `demand.arrival_rps` arriving, served at each segment's capacity (requests/s, for its seconds) in
    turn; the last segment's capacity holds to the horizon's end. The backlog a segment below the demand
    leaves is cleared only by the surplus of the ones after it."""
    backlog, total, elapsed = max(demand.waiting, 0.0), 0.0, 0.0
    for i, (capacity, seconds) in enumerate(segments):
        span = horizon_s - elapsed if i == len(segments) - 1 else min(seconds, horizon_s - elapsed)
        if span <= 0:
            break
        growth = demand.arrival_rps - capacity
        if growth >= 0:
            total += backlog * span + 0.5 * growth * span * span
        else:
            clear = min(span, backlog / -growth)
            total += backlog * clear + 0.5 * growth * clear * clear
        backlog = max(0.0, backlog + growth * span)
        elapsed += span
    return total


def giving_way(running: Layout, proposed: Layout, pool_gpus: int, load_seconds: float, running_rps: float,
               proposed_rps: float, demand: Demand, staying_rps: float, horizon_s: float) -> Rollout | None:
    """The rollout to `proposed` that gives old pods up before their replacements serve (maxUnavailable
    > 0), for a running shape the full pool can leave no other way. Of the counts, maxUnavailable and
    maxSurge whose rollout the pool holds without a Pending pod, never leaves no pod serving, and ends
    within `horizon_s`: the one whose fluid queue (`queued_request_seconds`, each replica carrying
    `running_rps` or `proposed_rps` flat out, then the proposed count to the horizon's end; a count below the proposed
    one adds the load of the scale-up after it) waits least against staying (the running pods carrying
    `staying_rps` throughout), over `horizon_s` past the rollout's end; then the fewest loads, then the
    least GPU-time. None when the pool holds none, when nothing arrives, or when staying queues no more
    than that rollout does."""
    if demand.arrival_rps <= 0 or min(running_rps, proposed_rps) <= 0:
        return None
    best: tuple[tuple[float, int, float], Rollout] | None = None
    finished = proposed.replicas * proposed_rps
    for count in range(1, max(proposed.replicas, running.replicas) + 1):
        target = replace(proposed, replicas=count)
        for unavailable in _pod_counts(count)[1:]:
            for surge in _pod_counts(count):
                steps = _waves(running.replicas, count, surge, unavailable)
                if not steps:
                    continue
                rollout = _rollout(running, proposed, target, surge, load_seconds, unavailable, steps)
                if rollout.peak_gpus > pool_gpus:
                    continue
                # A count below the proposed one is followed by the scale-up to it: one more load.
                after = [(0, count, proposed.replicas - count)] if count < proposed.replicas else []
                if len(steps + after) * load_seconds > horizon_s:
                    # Its end lies past what the demand's figures vouch for (a step ends, a burst passes):
                    # the dip is paid now for a shape that may be needed no more by the time it serves.
                    continue
                carried = [old * running_rps + ready * proposed_rps for old, ready, _ in steps + after]
                if min(carried) <= 0:
                    continue  # nothing serving for a whole model load: an outage, never a rollout
                rollout = replace(rollout, serving_share=min(1.0, min(carried) / demand.arrival_rps))
                # Judged up to a horizon past the rollout's end: staying's backlog grows for as long as
                # one looks, a rollout's stops growing once its pods serve.
                window = horizon_s + len(carried) * load_seconds
                queued = queued_request_seconds(demand, [(c, load_seconds) for c in carried] + [(finished, window)],
                                                window)
                staying = queued_request_seconds(demand, [(staying_rps, window)], window)
                rank = (queued - staying, rollout.waves, rollout.extra_gpu_seconds)
                if best is None or rank < best[0]:
                    best = rank, rollout
    return best[1] if best is not None and best[0][0] < 0 else None


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
