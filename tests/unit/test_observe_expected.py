"""Which replicas must report after the operator rescales: a loading or leaving pod is not a missing one."""

from __future__ import annotations

from infertune.api.observation import MetricsFault
from infertune.observe.figures import Expected, PodFigures, judge

KEY = ("inference", "kimi-k2")


def _reporting(n: int) -> list[PodFigures]:
    return [PodFigures(pod=f"kimi-k2-{i}", sample_time=100.0, gauges={"kv_usage": 0.4, "running": 3.0, "waiting": 0.0})
            for i in range(n)]


def test_a_scale_up_does_not_flag_the_pods_still_loading_as_missing() -> None:
    expected = Expected(replicas=1).after_scaling_to(6)
    assert judge(KEY, _reporting(1), expected, now=100.0, stale_after=60).fault is MetricsFault.OK


def test_a_scale_down_expects_only_the_pods_that_stay() -> None:
    expected = Expected(replicas=6).after_scaling_to(2)
    assert expected == Expected(replicas=2)
    assert judge(KEY, _reporting(2), expected, now=100.0, stale_after=60).fault is MetricsFault.OK
    assert judge(KEY, _reporting(1), expected, now=100.0, stale_after=60).fault is MetricsFault.PARTIAL


def test_the_first_apply_expects_nothing_until_the_workload_reports_ready_pods() -> None:
    assert Expected().after_scaling_to(3) == Expected()
