"""The demand to size for: what the fleet must serve until capacity ordered now can arrive.

Replicas ordered now serve one model load later (15 minutes for a large MoE), so sizing on the
current request rate is always a load behind: a ramp outruns it and a burst shorter than a load is
never met at all. Four figures are read from the resource's recent demand, and the fleet is sized for
the largest:

- **current**: the rate now (served requests plus the waiting queue drained over a minute);
- **burst**: a high quantile of the binned demand over the recent past (at least two model loads; the 98th
  percentile unless the resource names another): traffic that bursts keeps the capacity its bursts took,
  smooth traffic gets little more than its mean. The points are the demand offered (observe/history.py
  `offered_rate`), the queue counted as it grows rather than again at every poll it stands;
- **trend**: the least-squares line through the last load's bins carried one model load ahead, when the
  slope is significant (a ramp is met when it arrives, not a load later);
- **seasonal**: the level now times the ratio of the learnt daily and weekly profile at now + load to
  its value now (the morning ramp of yesterday predicts today's).

The demand is read in bins a quarter of a model load wide (5 s to a minute): a burst shorter than a
bin is what the queueing model's slack absorbs, one longer than a load is what scaling follows, and
the bins in between are what standing capacity must hold.

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
BIN_PER_LOAD = 0.25
BIN_MIN_S, BIN_MAX_S = 5.0, 60.0
BURST_QUANTILE = 0.98
# The burst quantile reads this many bins back (and at least two model loads), once it has a few.
BURST_WINDOW_BINS = 30
MIN_BURST_BINS = 5
# A trend reads this many bins back (and at least one load), needs a few, and a slope this many
# standard errors above zero. The demand's trend reads one load back (and MIN_TREND_BINS at least): it is
# carried one load ahead, and a ramp that steepens, as requests do while new sessions' turns pile up,
# is followed a load behind its slope, not TREND_WINDOW_BINS behind (3.3 loads at the 5 s bins' floor).
# A context's trend keeps the longer window: a few sessions' contexts are noisier than a fleet's demand.
TREND_WINDOW_BINS = 10
MIN_TREND_BINS = 6
TREND_T_STAT = 2.0
# A trend or a season may ask for at most this multiple of the level now.
MAX_GROWTH = 3.0
# Per-bucket learning rate of the seasonal profile once a bucket has this many samples: its memory
# is a few days of that hour.
PROFILE_MEMORY_SAMPLES = 360


@dataclass(frozen=True)
class DemandPoint:
    """The demand (requests/s) one poll saw."""

    time: float
    rate: float


def bin_seconds(horizon_s: float) -> float:
    """How wide the demand is binned for a resource whose capacity takes `horizon_s` to arrive."""
    return min(max(BIN_PER_LOAD * horizon_s, BIN_MIN_S), BIN_MAX_S)


def binned(points: Sequence[DemandPoint], width: float) -> list[DemandPoint]:
    """The mean demand of each `width`-second bin (stamped with its start), oldest first."""
    sums: dict[float, list[float]] = {}
    for p in points:
        if math.isfinite(p.time) and math.isfinite(p.rate) and p.rate >= 0:
            entry = sums.setdefault(p.time - p.time % width, [0.0, 0.0])
            entry[0] += p.rate
            entry[1] += 1.0
    return [DemandPoint(start, total / count) for start, (total, count) in sorted(sums.items())]


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
    # The arrival rate's last five bins' mean, once MIN_BURST_BINS exist: no burst on top, and no queue,
    # which the demand counts (its drain rate), so that while one lasts the demand's own level sits above
    # what arrives, and a burst's reading below it.
    arrival_level: float | None = None
    # The burst quantile reads its whole window (the recent bins reach back as far as it looks): the bursts
    # of the last two model loads at least are in the figure, not only those of the first minutes.
    full_window: bool = False
    # The highest demand a poll read within the last model load, this one's included: how far the demand
    # has swung lately, which a saving judged on one cycle's figure does not see. None: no reading yet.
    recent_peak: float | None = None

    @property
    def sized(self) -> float:
        return max(v for v in (self.current, self.burst, self.trend, self.seasonal) if v is not None)

    @property
    def driver(self) -> str:
        """Which figure the sizing follows."""
        figures = {"current": self.current, "burst": self.burst, "trend": self.trend, "seasonal": self.seasonal}
        return max(figures, key=lambda k: -math.inf if figures[k] is None else float(figures[k] or 0.0))


def outlook(current: float, points: Sequence[DemandPoint], profile: SeasonalProfile | None, now: float,
            horizon_s: float, arrivals: Sequence[DemandPoint] = (),
            burst_quantile: float = BURST_QUANTILE) -> DemandOutlook:
    """The four figures for a resource whose capacity takes `horizon_s` to arrive, and the level of the
    arrivals alone (`arrivals`), once enough bins of them exist. `burst_quantile` is the share of recent
    bins the burst figure covers."""
    if not 0.0 < burst_quantile < 1.0:
        raise ValueError(f"burst_quantile must be in (0, 1), got {burst_quantile!r}")
    width = bin_seconds(horizon_s)
    bins = _recent_bins(points, now, horizon_s, width)
    burst = None
    if len(bins) >= MIN_BURST_BINS:
        burst = float(np.quantile([b.rate for b in bins], burst_quantile))
    level = _level(bins, current)
    trend = _trend(bins, now, horizon_s, level, width)
    seasonal = None
    if profile is not None and not profile.empty:
        here, there = profile.level_at(now), profile.level_at(now + horizon_s)
        if here is not None and there is not None and here > 0 and there > here:
            seasonal = level * min(there / here, MAX_GROWTH)
    arrived = _recent_bins(arrivals, now, horizon_s, width)
    arrival_level = _level(arrived, 0.0) if len(arrived) >= MIN_BURST_BINS else None
    full = bool(bins) and now - bins[0].time >= _burst_window_s(horizon_s, width) - width
    peak = max([current, *(p.rate for p in points if 0.0 <= now - p.time <= horizon_s and math.isfinite(p.rate))])
    return DemandOutlook(current, burst, trend, seasonal, horizon_s, arrival_level, full, peak)


def _burst_window_s(horizon_s: float, width: float) -> float:
    return max(BURST_WINDOW_BINS * width, 2.0 * horizon_s)


def _recent_bins(points: Sequence[DemandPoint], now: float, horizon_s: float, width: float) -> list[DemandPoint]:
    """The bins the burst quantile and the level look at: the last BURST_WINDOW_BINS, or two loads."""
    return [b for b in binned(points, width) if now - b.time <= _burst_window_s(horizon_s, width)]


def rising(points: Sequence[DemandPoint], now: float, horizon_s: float) -> float | None:
    """Any figure's value one `horizon_s` ahead when it rises significantly (the same test as the
    demand's trend), else None: a context that grows is planned for as it will be when a layout
    ordered now serves.

    The value is the low end of the line's TREND_T_STAT band at the horizon, not the line itself, and
    None unless that is above the level now. A context carried ahead can declare the running shape past
    the KV line, and a line through a dozen noisy bins, carried a whole window ahead, passes its test by
    chance: on steady contexts with 35% noise the line planned 2x or more in 29 windows of a thousand,
    the band's low end in 3 (docs/bench-history.md). A steady growth has a narrow band, so its low end
    is near the line."""
    width = bin_seconds(horizon_s)
    bins = binned([p for p in points if now - p.time <= max(TREND_WINDOW_BINS * width, horizon_s)], width)
    level = _level(bins, 0.0)
    line = _line(bins, now, horizon_s, level, width)
    if line is None:
        return None
    low = line.ahead - TREND_T_STAT * line.ahead_stderr
    return min(low, MAX_GROWTH * max(level, 1e-9)) if low > level else None


def _level(bins: Sequence[DemandPoint], current: float) -> float:
    """The demand level now: the last five bins' mean, or the current figure without them."""
    last = list(bins)[-5:]
    return sum(b.rate for b in last) / len(last) if last else current


@dataclass(frozen=True)
class _Line:
    """A significant rise: the least-squares line's value one horizon ahead and its standard error."""

    ahead: float
    ahead_stderr: float


def _trend(bins: Sequence[DemandPoint], now: float, horizon_s: float, level: float, width: float) -> float | None:
    line = _line(bins, now, horizon_s, level, width, window_bins=MIN_TREND_BINS)
    return None if line is None else min(line.ahead, MAX_GROWTH * max(level, 1e-9))


def _line(bins: Sequence[DemandPoint], now: float, horizon_s: float, level: float, width: float,
          window_bins: int = TREND_WINDOW_BINS) -> _Line | None:
    """The bins' line one `horizon_s` ahead, fitted to the last `window_bins` bins and at least one
    horizon, when its slope is positive and significant, else None."""
    window = max(window_bins * width, horizon_s)
    points = [b for b in bins if now - b.time <= window]
    if len(points) < MIN_TREND_BINS:
        return None
    t = np.array([b.time for b in points]) - now
    y = np.array([b.rate for b in points])
    slope, intercept = np.polyfit(t, y, 1)
    residual = y - (intercept + slope * t)
    spread = float(np.sum((t - t.mean()) ** 2))
    if spread <= 0:
        return None
    sigma = math.sqrt(float(np.sum(residual ** 2)) / max(len(points) - 2, 1))
    stderr = sigma / math.sqrt(spread)
    # A perfect line (no residual) is significant when it moves at all over a load.
    significant = (slope / stderr >= TREND_T_STAT if stderr > 0
                   else slope * horizon_s > 0.01 * max(level, 1e-9))
    if slope <= 0 or not significant:
        return None
    # The mean response's standard error at the horizon: it grows with the distance from the bins' middle.
    ahead_stderr = sigma * math.sqrt(1.0 / len(points) + (horizon_s - float(t.mean())) ** 2 / spread)
    return _Line(float(intercept + slope * horizon_s), ahead_stderr)
