"""Frontiers: attainment is the lower of the two SLAs, dominance is point by point, and the
cheapest setting reaching 99% on both is what a team sweeping the knob would deploy."""

from __future__ import annotations

import math

from infertune_lab.bench.frontier import FrontierPoint, attainment_of, cheapest_meeting, dominates, efficient, uncovered
from infertune_lab.bench.metrics import PolicyResult


def result(ttft: float, tps: float, gpu_hours: float) -> PolicyResult:
    return PolicyResult("p", 100, 0, ttft, tps, 0.1, 1.0, 2.0, 30.0, gpu_hours, 1.0, 1.0, 0, 0.0, 0, 1_000, 8, 0.1)


def point(setting: str, ttft: float, gpu_hours: float, tps: float = 1.0) -> FrontierPoint:
    return FrontierPoint(setting, result(ttft, tps, gpu_hours))


def test_attainment_is_the_lower_of_ttft_and_tps() -> None:
    assert attainment_of(result(0.99, 0.95, 1.0)) == 0.95
    assert attainment_of(result(0.90, 1.0, 1.0)) == 0.90
    assert attainment_of(result(math.nan, math.nan, 1.0)) == 0.0  # a run that served nothing


def test_a_frontier_dominates_when_each_baseline_point_has_a_better_or_equal_one() -> None:
    ours = [point("a", 0.95, 10.0), point("b", 0.99, 14.0), point("c", 1.0, 20.0)]
    theirs = [point("x", 0.94, 10.0), point("y", 0.99, 15.0), point("z", 1.0, 20.0)]
    assert dominates(ours, theirs)  # ties count: equal attainment at equal GPU-hours
    # One baseline point cheaper than anything of ours at its attainment breaks it.
    cheap = point("w", 0.96, 11.0)
    assert not dominates(ours, [*theirs, cheap])
    assert uncovered(ours, [*theirs, cheap]) == [cheap]
    # Dominance is not symmetric, and a curve does not dominate a point above all of it.
    assert not dominates(theirs, ours)
    assert not dominates(ours, [point("top", 1.0, 9.0)])


def test_neither_axis_alone_is_enough() -> None:
    ours = [point("cheap-and-poor", 0.80, 5.0), point("rich-and-dear", 1.0, 50.0)]
    assert not dominates(ours, [point("middle", 0.99, 20.0)])
    assert dominates(ours, [point("poorer", 0.79, 5.0), point("dearer", 0.99, 60.0)])


def test_the_cheapest_setting_must_reach_the_target_on_both_slas() -> None:
    points = [point("cheap", 0.999, 8.0, tps=0.97), point("mid", 0.991, 12.0), point("dear", 1.0, 30.0)]
    best = cheapest_meeting(points)
    assert best is not None and best.setting == "mid"
    assert cheapest_meeting([point("poor", 0.98, 5.0)]) is None


def test_the_efficient_points_rise_with_gpu_hours() -> None:
    points = [point("a", 0.90, 10.0), point("b", 0.85, 12.0), point("c", 0.99, 15.0), point("d", 0.99, 18.0)]
    assert [p.setting for p in efficient(points)] == ["a", "c"]


def test_the_json_row_has_the_fields_a_user_scripts_against() -> None:
    row = FrontierPoint("burst 15%", result(0.99, math.nan, 12.5), default=True).as_json()
    assert row == {"setting": "burst 15%", "sla_attainment_ttft": 0.99, "sla_attainment_tps": None, "gpu_hours": 12.5,
                   "seconds_past_cliff": 0.0, "peak_gpus": 8, "default": True}
