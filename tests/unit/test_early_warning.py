"""The cliff early warning: headroom ratio, time to cliff and the CacheHeadroom reason."""

from __future__ import annotations

import math

import pytest

from infertune.model.early_warning import (
    CliffReason,
    PressurePoint,
    WarningPolicy,
    cliff_warning,
    working_set_ratio,
)


def _ramp(start: float, per_minute: float, minutes: int = 5, step: float = 15.0) -> list[PressurePoint]:
    n = int(minutes * 60 / step)
    return [PressurePoint(i * step, start + per_minute * i * step / 60) for i in range(n + 1)]


def test_flat_usage_has_headroom_and_no_cliff() -> None:
    points = _ramp(0.5, 0.0)
    w = cliff_warning(points, now=points[-1].time)
    assert w.reason is CliffReason.OK and w.status == "True"
    assert w.headroom_ratio == pytest.approx(0.5) and math.isinf(w.time_to_cliff_seconds)


def test_rising_usage_predicts_the_time_to_cliff() -> None:
    points = _ramp(0.4, 0.05)  # 5 points per minute: 0.65 after 5 minutes, 7 minutes left
    w = cliff_warning(points, now=points[-1].time)
    assert w.reason is CliffReason.APPROACHING and w.status == "False"
    assert w.time_to_cliff_seconds == pytest.approx(420, rel=0.02)
    assert "cliff in" in w.message


def test_slow_rise_beyond_the_horizon_is_still_ok() -> None:
    points = _ramp(0.4, 0.01)  # 0.45 now, 55 minutes away
    w = cliff_warning(points, now=points[-1].time, policy=WarningPolicy(horizon_seconds=900))
    assert w.reason is CliffReason.OK and w.time_to_cliff_seconds == pytest.approx(3300, rel=0.02)


def test_above_the_headroom_line_warns_even_when_flat() -> None:
    w = cliff_warning(_ramp(0.93, 0.0), now=300)
    assert w.reason is CliffReason.APPROACHING and w.headroom_ratio == pytest.approx(0.07)


def test_full_pool_is_past_the_cliff() -> None:
    w = cliff_warning([PressurePoint(0, 0.99), PressurePoint(10, 1.0)], now=10)
    assert w.reason is CliffReason.PAST and w.time_to_cliff_seconds == 0


def test_preemptions_mean_the_cliff_is_here() -> None:
    w = cliff_warning(_ramp(0.6, 0.0), now=300, preemption_rate=0.2)
    assert w.reason is CliffReason.PREEMPTING and w.time_to_cliff_seconds == 0


def test_predicted_working_set_counts_when_usage_lags() -> None:
    # Usage flat at 50%, but contexts grow: the working set (with resident prefixes) climbs to the pool.
    points = [PressurePoint(t, 0.5, 0.6 + 0.001 * t) for t in range(0, 301, 15)]
    w = cliff_warning(points, now=300)
    assert w.headroom_ratio == pytest.approx(0.1)
    assert w.reason is CliffReason.APPROACHING
    assert w.time_to_cliff_seconds == pytest.approx(100, rel=0.02)


def test_no_figures_is_unknown_not_ok() -> None:
    w = cliff_warning([PressurePoint(0)], now=0)
    assert w.reason is CliffReason.UNKNOWN and w.status == "Unknown" and w.headroom_ratio is None


def test_too_short_a_history_gives_no_trend() -> None:
    w = cliff_warning([PressurePoint(0, 0.3), PressurePoint(5, 0.6)], now=5)
    assert w.slope_per_second is None and math.isinf(w.time_to_cliff_seconds)


def test_working_set_ratio() -> None:
    assert working_set_ratio(16, 80_000, 1_600_000) == pytest.approx(0.8)
    assert working_set_ratio(16, 80_000, 1_600_000, resident_tokens=320_000) == pytest.approx(1.0)
    assert working_set_ratio(None, 80_000, 1_600_000) is None
    assert working_set_ratio(16, 80_000, 0) is None
