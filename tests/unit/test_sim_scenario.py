"""Scenarios: arrivals follow the rate profile, prompts follow the context profile, seeds reproduce."""

from __future__ import annotations

import math
import statistics

import pytest

from infertune.errors import UserError
from infertune_lab.sim import RequestRecord, RequestSpec, TrafficSource
from infertune_lab.sim.scenario import (
    WEEKLY,
    Phase,
    Scenario,
    coding_agent_day,
    context_growth,
    drop,
    mean_prompt,
    scaled_to_context,
    scenario,
    slow_ramp,
    spike,
    week,
)
from infertune_lab.sim.traffic import CODING_AGENT


def drain(source: TrafficSource, until: float, service: float = 20.0) -> list[RequestSpec]:
    """Every request the source issues before `until`, each answered `service` seconds after it arrives."""
    out = []
    while source.next_time() < until:
        spec = source.pop()
        out.append(spec)
        source.on_finish(RequestRecord(spec, "r", spec.arrival + 1.0, spec.arrival + service, 0, 0))
    return out


def test_session_starts_track_the_spike_within_four_sigma() -> None:
    sc = spike(peak_rate=3.0, duration=3_000.0)
    starts = [s.arrival for s in drain(sc.traffic(seed=4), sc.duration) if s.turn == 0]
    for lo in range(0, 3_000, 300):
        expected = sc.expected_sessions(lo, lo + 300)
        seen = sum(lo <= t < lo + 300 for t in starts)
        # Poisson counts: the standard deviation is sqrt(expected).
        assert abs(seen - expected) < 4 * math.sqrt(expected), (lo, seen, expected)
    calm = sum(0 <= t < 1_000 for t in starts)
    peak = sum(1_300 <= t < 1_700 for t in starts) * 2.5
    assert 2.5 < peak / calm < 3.5  # the spike is 3x


def test_no_session_starts_after_the_end() -> None:
    sc = spike(peak_rate=2.0, duration=600.0)
    starts = [s.arrival for s in drain(sc.traffic(seed=1), math.inf) if s.turn == 0]
    assert starts and max(starts) < 600.0


def test_mean_prompt_follows_context_growth_within_ten_percent() -> None:
    sc = context_growth(peak_rate=2.0, duration=6_000.0, start_tokens=40_000, end_tokens=100_000)
    specs = drain(sc.traffic(seed=2), sc.duration)
    # Sessions keep their shape for their ~10 turns (about 4 minutes here), so compare each window
    # with the target one session length earlier.
    lag = 240.0
    for lo in range(600, 6_000, 900):
        window = [s.prompt_tokens for s in specs if lo <= s.arrival < lo + 900]
        target = sc.context_at(lo + 450 - lag)
        assert target is not None
        assert abs(statistics.mean(window) / target - 1) < 0.10, (lo, statistics.mean(window), target)


def test_scaled_shape_hits_its_target_and_keeps_answers() -> None:
    small = scaled_to_context(CODING_AGENT, 40_000)
    assert small.output_mean == CODING_AGENT.output_mean
    assert small.fresh_mean < CODING_AGENT.fresh_mean
    assert mean_prompt(small) == pytest.approx(40_000, rel=0.02)
    with pytest.raises(UserError, match="out of reach"):
        scaled_to_context(CODING_AGENT, 5_000_000)


def test_same_seed_same_traffic_other_seed_other_traffic() -> None:
    sc = coding_agent_day(peak_rate=1.0, duration=3_600.0)
    first = drain(sc.traffic(seed=7), 1_800)
    assert first == drain(sc.traffic(seed=7), 1_800)
    assert first != drain(sc.traffic(seed=8), 1_800)


def test_rate_profile_interpolates_between_phases() -> None:
    sc = Scenario("ramp", 100.0, CODING_AGENT, (Phase(10.0, 1.0), Phase(30.0, 3.0)))
    assert sc.rate_at(0.0) == 1.0
    assert sc.rate_at(20.0) == pytest.approx(2.0)
    assert sc.rate_at(99.0) == 3.0
    assert sc.expected_sessions(0.0, 40.0) == pytest.approx(10 * 1 + 20 * 2 + 10 * 3)
    assert sc.context_at(5.0) is None


def test_compressed_day_peaks_in_the_afternoon() -> None:
    day = coding_agent_day(peak_rate=2.0, duration=2_400.0)  # 100 s per hour
    assert day.rate_at(1_400.0) == day.peak_rate == 2.0
    assert day.rate_at(400.0) < 0.3 * day.peak_rate


def test_bad_scenarios_say_what_is_wrong() -> None:
    with pytest.raises(UserError, match="unknown scenario 'nope'"):
        scenario("nope", 1.0, 60.0)
    with pytest.raises(ValueError, match="time order"):
        Scenario("x", 10.0, CODING_AGENT, (Phase(5.0, 1.0), Phase(1.0, 1.0)))


def test_the_week_has_daily_and_weekly_seasonality() -> None:
    wk = week(peak_rate=2.0)
    day = 86_400.0
    monday_peak, saturday_peak = wk.rate_at(14 * 3_600.0), wk.rate_at(5 * day + 14 * 3_600.0)
    assert monday_peak == wk.peak_rate == 2.0
    assert saturday_peak == pytest.approx(2.0 * WEEKLY[5])
    assert wk.rate_at(6 * day + 14 * 3_600.0) < saturday_peak  # Sunday is quieter still
    assert wk.rate_at(3 * day + 4 * 3_600.0) < 0.2 * monday_peak  # a weekday night
    for d in range(5):  # every weekday has its afternoon peak
        assert wk.rate_at(d * day + 14 * 3_600.0) > 3 * wk.rate_at(d * day + 3 * 3_600.0)
    weekday = wk.expected_sessions(day, 2 * day)
    weekend = wk.expected_sessions(5 * day, 7 * day) / 2
    assert weekend / weekday == pytest.approx((WEEKLY[5] + WEEKLY[6]) / 2, rel=0.01)


def test_the_drop_falls_to_a_tenth_within_a_minute_and_stays() -> None:
    sc = drop(peak_rate=1.0, duration=10_000.0)
    assert sc.rate_at(3_999.0) == 1.0
    assert sc.rate_at(4_060.0) == pytest.approx(0.1)
    assert sc.rate_at(9_999.0) == pytest.approx(0.1)
    starts = [s.arrival for s in drain(sc.traffic(seed=2), sc.duration) if s.turn == 0]
    before = sum(t < 4_000 for t in starts) / 4_000
    after = sum(t >= 4_100 for t in starts) / 5_900
    assert 0.07 < after / before < 0.13


def test_the_slow_ramp_climbs_linearly_from_a_tenth_to_the_peak() -> None:
    sc = slow_ramp(peak_rate=2.0, duration=20_000.0)
    assert sc.rate_at(0.0) == pytest.approx(0.2)
    assert sc.rate_at(10_000.0) == pytest.approx(1.1)
    assert sc.rate_at(20_000.0) == 2.0
    assert scenario("ramp", 2.0, 20_000.0).phases == sc.phases
