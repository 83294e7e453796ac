"""The snapshot one poll produces for every deployment, and the protocol both sources implement."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from infertune.api.observation import MetricsFault, Observation
from infertune.observe.figures import DeploymentKey, Expected, faulted


@dataclass(frozen=True)
class Snapshot:
    """Every deployment's Observation from one poll. Per-object timers read it; none of them query.

    `fault` is set when the source as a whole failed (down, timeout, 5xx): then every lookup,
    expected or not, answers with that fault rather than with an empty, zero-looking observation.
    """

    time: float
    observations: Mapping[DeploymentKey, Observation] = field(default_factory=dict)
    queries: int = 0
    fault: MetricsFault = MetricsFault.OK
    message: str = ""
    source: str = ""

    def get(self, namespace: str, deployment: str) -> Observation:
        key = (namespace, deployment)
        found = self.observations.get(key)
        if found is not None:
            return found
        if self.fault is not MetricsFault.OK:
            return faulted(key, self.fault, self.message, self.time)
        return faulted(key, MetricsFault.EMPTY, f"no series for {namespace}/{deployment}", self.time)

    @property
    def available(self) -> bool:
        return self.fault is MetricsFault.OK


class MetricsSource(Protocol):
    """Reads every deployment at once. `expected` names the deployments (and their ready pods) the
    caller cares about, so an absent one is reported as such instead of silently missing."""

    name: str

    def poll(self, expected: Mapping[DeploymentKey, Expected] | None = None,
             now: float | None = None) -> Snapshot: ...

    def close(self) -> None: ...
