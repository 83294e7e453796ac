"""Which replicas must report after the operator rescales: a loading or leaving pod is not a missing one."""

from __future__ import annotations

from infertune.api.observation import MetricsFault
from infertune.observe.figures import Expected, PodFigures, judge, shown

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


def test_a_message_repeats_a_pod_name_only_if_kubernetes_could_have_given_it() -> None:
    """A source names pods in its label values; what no pod could be called (the API's DNS subdomain,
    api/formats.py) is not repeated into a condition."""
    for name in ("kimi-k2-7d9f8c-x2x9q", "a", "0.pod-1.b", "p" * 253):
        assert shown(name) == name
    for name in ("kimi-k2-0\n", "Kimi-K2-0", "a..b", "a.-b", "-a", "a-", "p" * 254, "pod\x1b[2J", ""):
        assert shown(name) == "(a series with an invalid pod name)", name
