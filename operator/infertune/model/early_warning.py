"""Cliff early warning: how long until the working set fills the KV pool, from its recent trend.

The pressure on the pool is the larger of the observed KV usage of the fullest replica and the
predicted working set (in-flight contexts plus resident prefixes) over its capacity: vLLM's usage
gauge does not count evictable prefix blocks, and evicting those is what starts the cliff. The
trend is a least-squares slope over the recent points, so context growth (sessions whose
contexts get longer turn after turn) shows up as a rising working set before usage reaches 1.
Preemptions mean the engine is already recomputing: the cliff is here, whatever the trend says.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

# Observed KV use at which a replica is at the cliff: vLLM's gauge stops short of 1.0 by its free-block
# watermark, and at 98% new prefills are already waiting for blocks. The demo and the benchmark count
# seconds past the cliff by the same line.
CLIFF_USAGE = 0.98


class CliffReason(StrEnum):
    OK = "HeadroomOK"
    APPROACHING = "ApproachingCliff"
    PAST = "PastCliff"
    PREEMPTING = "Preempting"
    UNKNOWN = "HeadroomUnknown"


@dataclass(frozen=True)
class PressurePoint:
    """One observation of the pool. Either figure may be missing, never both for a useful point."""

    time: float
    kv_usage: float | None = None  # observed, 0..1, fullest replica
    working_set_ratio: float | None = None  # predicted working set / KV capacity

    @property
    def pressure(self) -> float | None:
        known = [v for v in (self.kv_usage, self.working_set_ratio) if v is not None and math.isfinite(v)]
        return max(known) if known else None


@dataclass(frozen=True)
class CliffWarning:
    headroom_ratio: float | None  # 1 - pressure; negative past the cliff; None when unknown
    time_to_cliff_seconds: float  # math.inf when not approaching (or unknown)
    reason: CliffReason
    message: str
    slope_per_second: float | None = None  # pressure units per second

    @property
    def status(self) -> str:
        """The CacheHeadroom condition's status: True only when there is headroom."""
        if self.reason is CliffReason.UNKNOWN:
            return "Unknown"
        return "True" if self.reason is CliffReason.OK else "False"


@dataclass(frozen=True)
class WarningPolicy:
    headroom: float = 0.10  # the planner's headroom line: pressure above 1 - headroom is too close
    horizon_seconds: float = 900.0  # warn when the cliff is predicted within this
    trend_window_seconds: float = 300.0
    min_points: int = 3
    min_span_seconds: float = 30.0
    preemption_tolerance: float = 0.0  # preemptions per second tolerated before "Preempting"


def working_set_ratio(running: float | None, context_tokens: float | None, capacity_tokens: float | None,
                      resident_tokens: float = 0.0) -> float | None:
    """Predicted working set over the pool: every running stream's whole context plus the prefixes
    returning sessions keep resident. None unless all three figures are known."""
    if running is None or context_tokens is None or not capacity_tokens or capacity_tokens <= 0:
        return None
    return (running * context_tokens + resident_tokens) / capacity_tokens


def pressure_slope(points: Sequence[PressurePoint], now: float, window: float, min_points: int = 3,
                   min_span: float = 30.0) -> float | None:
    """Least-squares slope of pressure over the last `window` seconds; None when too few points."""
    recent: list[tuple[float, float]] = []
    for point in points:
        pressure = point.pressure
        if pressure is not None and now - window <= point.time <= now:
            recent.append((point.time, pressure))
    if len(recent) < min_points or max(t for t, _ in recent) - min(t for t, _ in recent) < min_span:
        return None
    mean_t = sum(t for t, _ in recent) / len(recent)
    mean_p = sum(p for _, p in recent) / len(recent)
    num = sum((t - mean_t) * (p - mean_p) for t, p in recent)
    den = sum((t - mean_t) ** 2 for t, _ in recent)
    return num / den if den > 0 else None


def cliff_warning(points: Sequence[PressurePoint], now: float, preemption_rate: float | None = None,
                  policy: WarningPolicy = WarningPolicy()) -> CliffWarning:
    """The warning for one deployment from its pressure history (oldest first) and preemption rate."""
    current = next((p.pressure for p in reversed(points) if p.time <= now and p.pressure is not None), None)
    if current is None:
        return CliffWarning(None, math.inf, CliffReason.UNKNOWN, "no KV usage or working-set figure yet")
    headroom = 1.0 - current
    slope = pressure_slope(points, now, policy.trend_window_seconds, policy.min_points,
                           policy.min_span_seconds)
    if preemption_rate is not None and preemption_rate > policy.preemption_tolerance:
        return CliffWarning(headroom, 0.0, CliffReason.PREEMPTING,
                            f"{preemption_rate:.2f} preemptions/s: the working set no longer fits", slope)
    observed = next((p.kv_usage for p in reversed(points) if p.time <= now and p.kv_usage is not None), None)
    if current >= 1.0 or (observed is not None and observed >= CLIFF_USAGE):
        return CliffWarning(headroom, 0.0, CliffReason.PAST,
                            f"working set at {current:.0%} of the KV pool", slope)
    eta = (1.0 - current) / slope if slope is not None and slope > 0 else math.inf
    if current > 1.0 - policy.headroom:
        line = 1 - policy.headroom
        return CliffWarning(headroom, eta, CliffReason.APPROACHING,
                            f"KV pressure {current:.0%} is above the {line:.0%} headroom line", slope)
    if eta <= policy.horizon_seconds:
        return CliffWarning(headroom, eta, CliffReason.APPROACHING,
                            f"KV pressure {current:.0%} rising {(slope or 0.0) * 60:.1%}/min: "
                            f"cliff in ~{eta:.0f}s",
                            slope)
    return CliffWarning(headroom, eta, CliffReason.OK, f"KV pressure {current:.0%}", slope)
