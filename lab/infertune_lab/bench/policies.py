"""The policies infertune is compared with. Each gets the fleet every control tick (15 s, the HPA
sync period) and may set a new desired layout on the shared `Actuator`; none can do anything
else to the fleet.

- static: a hand-picked layout sized once for the peak, never changed;
- hpa-kv: an HPA on the Pods metric `vllm:kv_cache_usage_perc`, AverageValue 0.8 (bench.hpa);
- keda-queue: a KEDA ScaledObject on `vllm:num_requests_waiting`, threshold 5 (bench.keda);
- keda-slo: llm-d's SLO-aware KEDA loop on P90 latency against the SLO (bench.keda_slo);
- oracle: the hindsight schedule (bench.oracle), staged one model load ahead, blue/green;
- move-once: not a policy anyone runs, a measuring stick: a given start, and one move from it picked
  in hindsight (benchmarks/bench_hinted_start.py).

The HPA and KEDA scale replicas only; their layout is the hand-picked one, as it is for teams that
put an autoscaler in front of a load-tested configuration.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol

from infertune.planner.types import Layout
from infertune_lab.bench.actuation import Actuator
from infertune_lab.bench.hpa import SYNC_PERIOD, Hpa, plain_metric_replicas
from infertune_lab.bench.keda import THRESHOLD, Keda
from infertune_lab.bench.oracle import Window, staged

KV_TARGET = 0.8


class Policy(Protocol):
    name: str

    @property
    def max_surge(self) -> int | None:
        """The Deployment strategy its layout changes roll with (None: blue/green)."""
        ...

    def start(self) -> Layout:
        """The layout serving when the run begins."""
        ...

    def tick(self, now: float, actuator: Actuator) -> None:
        """Called every control tick; may call `actuator.apply`."""
        ...


def _desired(actuator: Actuator) -> int:
    return actuator.target.replicas if actuator.target is not None else 0


@dataclass
class Static:
    layout: Layout
    name: str = "static"
    max_surge: int | None = 1

    def start(self) -> Layout:
        return self.layout

    def tick(self, now: float, actuator: Actuator) -> None:
        return None


@dataclass
class HpaKv:
    layout: Layout  # the hand-picked layout and the replicas it starts with
    max_replicas: int
    min_replicas: int = 1
    target: float = KV_TARGET
    name: str = "hpa-kv"
    max_surge: int | None = 1
    hpa: Hpa = field(init=False)
    _next_sync: float = 0.0

    def __post_init__(self) -> None:
        self.hpa = Hpa(self.min_replicas, self.max_replicas)

    def start(self) -> Layout:
        return self.layout

    def tick(self, now: float, actuator: Actuator) -> None:
        if now < self._next_sync:
            return
        self._next_sync = now + SYNC_PERIOD
        pods = actuator.serving()
        # A pod loading its weights has no /metrics yet: prometheus-adapter returns nothing for it.
        metrics = {r.name: r.engine.kv_usage for r in pods if actuator.ready(r)}
        current = len(pods) + len(actuator.pending)
        wanted = plain_metric_replicas(current, metrics, [r.name for r in pods], self.target,
                                       unready=[p.name for p in actuator.pending])
        final = self.hpa.normalize(current, wanted, now)
        if final != _desired(actuator):
            actuator.apply(replace(self.layout, replicas=final))


@dataclass
class KedaQueue:
    layout: Layout
    max_replicas: int
    min_replicas: int = 1
    threshold: float = THRESHOLD
    name: str = "keda-queue"
    max_surge: int | None = 1
    keda: Keda = field(init=False)
    _next_sync: float = 0.0

    def __post_init__(self) -> None:
        self.keda = Keda(self.max_replicas, self.min_replicas, self.threshold)

    def start(self) -> Layout:
        return self.layout

    def tick(self, now: float, actuator: Actuator) -> None:
        if now < self._next_sync:
            return
        self._next_sync = now + SYNC_PERIOD
        pods = actuator.serving()
        waiting = sum(len(r.engine.waiting) for r in pods if actuator.ready(r))
        final = self.keda.desired(now, len(pods) + len(actuator.pending), waiting)
        if final != _desired(actuator):
            actuator.apply(replace(self.layout, replicas=final))


@dataclass
class Oracle:
    windows: Sequence[Window]
    load_seconds: float
    name: str = "oracle"
    max_surge: int | None = None

    def start(self) -> Layout:
        return staged(self.windows, 0.0, 0.0)

    def tick(self, now: float, actuator: Actuator) -> None:
        wanted = staged(self.windows, now, self.load_seconds)
        if wanted != actuator.target:
            actuator.apply(wanted)


@dataclass
class MoveOnce:
    """A given start, and one move from it at `at` seconds to `then`, rolled with `max_unavailable`
    old pods given up at a time and no surge (the start may fill the pool, where a surge pod would
    stay Pending). With `then` and `at` picked in hindsight, the best of a few such runs estimates
    what a policy that starts on `first` can reach by moving once (an estimate, not a bound: only the
    moves tried are run)."""

    first: Layout
    then: Layout
    at: float
    max_unavailable: int = 1
    name: str = "move-once"
    max_surge: int | None = 1
    moved: bool = False

    def start(self) -> Layout:
        return self.first

    def tick(self, now: float, actuator: Actuator) -> None:
        if not self.moved and now >= self.at:
            self.moved = True
            actuator.apply(self.then, max_surge=0, max_unavailable=self.max_unavailable)
