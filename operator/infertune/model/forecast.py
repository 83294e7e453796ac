"""The demand to size for: what the fleet must serve until capacity ordered now can arrive.

Replicas ordered now serve one model load later (15 minutes for a large MoE), so sizing on the
current request rate is always a load behind: a ramp outruns it and a burst shorter than a load is
never met at all. Four figures are read from the resource's recent demand, and the fleet is sized for
the largest:

- **current**: the rate now (served requests plus the waiting queue drained over a minute);
- **burst**: a high quantile of the minute means over the recent past (at least two model loads):
  traffic that bursts keeps the capacity its bursts took, smooth traffic gets little more than its mean;
- **trend**: the minute means' least-squares line carried one model load ahead, when the slope is
  significant (a ramp is met when it arrives, not a load later);
- **seasonal**: the level now times the ratio of the learnt daily and weekly profile at now + load to
  its value now (the morning ramp of yesterday predicts today's).

Nothing here holds capacity back: a fall in demand is released by the scale-down stabilisation
window (planner/guardrails.py), never by a forecast.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

SECONDS_PER_HOUR = 3600.0
SECONDS_PER_DAY = 86_400.0
# Minute means are what the burst quantile and the trend read: shorter windows are noise the
# queueing model already covers, longer ones hide the bursts.
MINUTE = 60.0
BURST_QUANTILE = 0.98
# The burst quantile reads at least this far back (and at least two model loads).
BURST_WINDOW_MIN_S = 1800.0
MIN_BURST_MINUTES = 5
# A trend needs this many minutes and a slope this many standard errors above zero.
MIN_TREND_MINUTES = 6
TREND_T_STAT = 2.0
# A trend or a season may ask for at most this multiple of the level now.
MAX_GROWTH = 3.0
# Per-bucket learning rate of the seasonal profile once a bucket has this many samples: its memory
# is a few days of that hour.
PROFILE_MEMORY_SAMPLES = 360


@dataclass(frozen=True)
class MinuteDemand:
    """The mean demand (requests/s) of one minute."""

    start: float
    rate: float


@dataclass(frozen=True)
class SeasonalProfile:
    """Mean demand by hour of the day and by day of the week (UTC), learnt online; 62 numbers, kept
    in the resource's status so a restart keeps them."""

    daily: tuple[float, ...] = (0.0,) * 24
    daily_samples: tuple[int, ...] = (0,) * 24
    weekly: tuple[float, ...] = (0.0,) * 7
    weekly_samples: tuple[int, ...] = (0,) * 7

    def updated(self, time: float, rate: float) -> SeasonalProfile:
        """The profile with one more sample of the demand at `time`."""
        if not (math.isfinite(time) and math.isfinite(rate)) or rate < 0:
            return self
        hour, day = _hour(time), _day(time)
        daily, daily_n = _learn(self.daily, self.daily_samples, hour, rate)
        weekly, weekly_n = _learn(self.weekly, self.weekly_samples, day, rate)
        return replace(self, daily=daily, daily_samples=daily_n, weekly=weekly, weekly_samples=weekly_n)

    def level_at(self, time: float) -> float | None:
        """The learnt mean demand at `time`; None where the hour has not been seen."""
        hour = _hour(time)
        if self.daily_samples[hour] == 0:
            return None
        level = self.daily[hour]
        known = [w for w, n in zip(self.weekly, self.weekly_samples, strict=True) if n > 0]
        day = _day(time)
        if len(known) >= 2 and self.weekly_samples[day] > 0 and sum(known) > 0:
            level *= self.weekly[day] / (sum(known) / len(known))
        return level

    @property
    def empty(self) -> bool:
        return not any(self.daily_samples)


def _hour(time: float) -> int:
    return int(time % SECONDS_PER_DAY // SECONDS_PER_HOUR)


def _day(time: float) -> int:
    # 1970-01-01 was a Thursday: day 0 here is Monday, as datetime.weekday() counts.
    return int((time // SECONDS_PER_DAY + 3) % 7)


def _learn(levels: tuple[float, ...], samples: tuple[int, ...], i: int,
           rate: float) -> tuple[tuple[float, ...], tuple[int, ...]]:
    n = samples[i] + 1
    weight = 1.0 / min(n, PROFILE_MEMORY_SAMPLES)
    new_levels = list(levels)
    new_levels[i] = levels[i] + weight * (rate - levels[i])
    new_samples = list(samples)
    new_samples[i] = min(n, 10 * PROFILE_MEMORY_SAMPLES)
    return tuple(new_levels), tuple(new_samples)


@dataclass(frozen=True)
class DemandOutlook:
    """What the fleet should be sized for, and why."""

    current: float
    burst: float | None = None
    trend: float | None = None
    seasonal: float | None = None
    horizon_s: float = 0.0

    @property
    def sized(self) -> float:
        return max(v for v in (self.current, self.burst, self.trend, self.seasonal) if v is not None)

    @property
    def driver(self) -> str:
        """Which figure the sizing follows."""
        figures = {"current": self.current, "burst": self.burst, "trend": self.trend, "seasonal": self.seasonal}
        return max(figures, key=lambda k: -math.inf if figures[k] is None else float(figures[k] or 0.0))


def outlook(current: float, minutes: Sequence[MinuteDemand], profile: SeasonalProfile | None, now: float,
            horizon_s: float) -> DemandOutlook:
    """The four figures for a resource whose capacity takes `horizon_s` to arrive."""
    recent = [m for m in minutes if now - m.start <= max(BURST_WINDOW_MIN_S, 2.0 * horizon_s)
              and math.isfinite(m.rate) and m.rate >= 0]
    burst = None
    if len(recent) >= MIN_BURST_MINUTES:
        burst = float(np.quantile([m.rate for m in recent], BURST_QUANTILE))
    level = _level(recent, current)
    trend = _trend(recent, now, horizon_s, level)
    seasonal = None
    if profile is not None and not profile.empty:
        here, there = profile.level_at(now), profile.level_at(now + horizon_s)
        if here is not None and there is not None and here > 0 and there > here:
            seasonal = level * min(there / here, MAX_GROWTH)
    return DemandOutlook(current, burst, trend, seasonal, horizon_s)


def _level(recent: Sequence[MinuteDemand], current: float) -> float:
    """The demand level now: the last five minutes' mean, or the current figure without them."""
    last = sorted(recent, key=lambda m: m.start)[-5:]
    return sum(m.rate for m in last) / len(last) if last else current


def _trend(recent: Sequence[MinuteDemand], now: float, horizon_s: float, level: float) -> float | None:
    window = max(600.0, horizon_s)
    points = [m for m in recent if now - m.start <= window]
    if len(points) < MIN_TREND_MINUTES:
        return None
    t = np.array([m.start for m in points]) - now
    y = np.array([m.rate for m in points])
    slope, intercept = np.polyfit(t, y, 1)
    residual = y - (intercept + slope * t)
    spread = float(np.sum((t - t.mean()) ** 2))
    if spread <= 0:
        return None
    stderr = math.sqrt(float(np.sum(residual ** 2)) / max(len(points) - 2, 1) / spread)
    # A perfect line (no residual) is significant when it moves at all over a load.
    significant = (slope / stderr >= TREND_T_STAT if stderr > 0
                   else slope * horizon_s > 0.01 * max(level, 1e-9))
    if slope <= 0 or not significant:
        return None
    ahead = float(intercept + slope * horizon_s)
    return min(ahead, MAX_GROWTH * max(level, 1e-9))
