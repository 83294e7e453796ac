"""A bounded per-deployment history of KV pressure, fed by snapshots, for the cliff early warning.

The warning needs a trend, and a snapshot is one instant; the controller records every snapshot
here and asks for the warning of a deployment. Points older than the horizon are dropped.
"""

from __future__ import annotations

from collections import deque

from infertune.api.observation import Observation
from infertune.model.early_warning import (
    CliffWarning,
    PressurePoint,
    WarningPolicy,
    cliff_warning,
    working_set_ratio,
)
from infertune.observe.figures import DeploymentKey
from infertune.observe.snapshot import Snapshot


def pressure_point(obs: Observation, resident_tokens: float = 0.0) -> PressurePoint:
    """The fullest replica's pressure: observed usage, and the working set its running streams imply."""
    predicted: list[float] = []
    context = None
    if obs.mean_prompt_tokens is not None and obs.mean_generated_tokens is not None:
        # A stream is half-way through its answer on average; its prompt is all resident.
        context = obs.mean_prompt_tokens + obs.mean_generated_tokens / 2
    for rep in obs.replicas:
        ratio = working_set_ratio(rep.running, context, rep.kv_capacity_tokens, resident_tokens)
        if ratio is not None:
            predicted.append(ratio)
    return PressurePoint(obs.sample_time, obs.kv_usage, max(predicted) if predicted else None)


class PressureHistory:
    def __init__(self, horizon_seconds: float = 900.0, max_points: int = 512) -> None:
        self.horizon = horizon_seconds
        self.max_points = max_points
        self._points: dict[DeploymentKey, deque[PressurePoint]] = {}

    def record(self, snapshot: Snapshot, resident_tokens: float = 0.0) -> None:
        """Adds every available observation; faulted ones add nothing (missing is not zero)."""
        for key, obs in snapshot.observations.items():
            if not obs.available:
                continue
            points = self._points.setdefault(key, deque(maxlen=self.max_points))
            point = pressure_point(obs, resident_tokens)
            if points and point.time <= points[-1].time:
                continue  # the same Prometheus sample read twice
            points.append(point)
            while points and points[0].time < point.time - self.horizon:
                points.popleft()

    def points(self, key: DeploymentKey) -> tuple[PressurePoint, ...]:
        return tuple(self._points.get(key, ()))

    def forget(self, key: DeploymentKey) -> None:
        self._points.pop(key, None)

    def warning(self, key: DeploymentKey, now: float, preemption_rate: float | None,
                policy: WarningPolicy | None = None) -> CliffWarning:
        return cliff_warning(self.points(key), now, preemption_rate, policy or WarningPolicy())
