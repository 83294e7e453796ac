"""The HPA and KEDA baselines behave as kube-controller-manager and KEDA do, not as we would like."""

from __future__ import annotations

import pytest

from infertune_lab.bench.hpa import Hpa, external_average_replicas, plain_metric_replicas
from infertune_lab.bench.keda import Keda


def test_hpa_formula_is_ceil_of_ratio_times_pods() -> None:
    # 4 pods at 0.95 KV usage against 0.8: ceil(4 x 0.95 / 0.8) = ceil(4.75) = 5.
    metrics = {f"p{i}": 0.95 for i in range(4)}
    assert plain_metric_replicas(4, metrics, list(metrics), 0.8) == 5
    # ... and down: 4 pods at 0.3 -> ceil(4 x 0.375) = 2.
    assert plain_metric_replicas(4, dict.fromkeys(metrics, 0.3), list(metrics), 0.8) == 2


def test_hpa_tolerance_keeps_the_count_within_ten_percent() -> None:
    pods = ["a", "b", "c"]
    assert plain_metric_replicas(3, dict.fromkeys(pods, 0.87), pods, 0.8) == 3  # ratio 1.0875
    assert plain_metric_replicas(3, dict.fromkeys(pods, 0.89), pods, 0.8) == 4  # ratio 1.1125


def test_hpa_pods_without_metrics_count_as_zero_on_the_way_up() -> None:
    # Two serving pods at 1.0, two still loading (no /metrics): the loaders count as 0, so the
    # ratio is 2 / 4 / 0.8 = 0.625 < 1: scaling up would reverse direction, so nothing changes.
    pods = ["a", "b", "loading-1", "loading-2"]
    assert plain_metric_replicas(4, {"a": 1.0, "b": 1.0}, pods, 0.8) == 4
    # With one loader: (1.0 + 1.0 + 0) / 3 / 0.8 = 0.833 -> still a reversal, hold.
    assert plain_metric_replicas(3, {"a": 1.0, "b": 1.0}, pods[:3], 0.8) == 3
    # A much hotter pair outweighs one loader: (1.6 + 1.6 + 0) / 3 / 0.8 = 1.33 -> ceil(4) = 4.
    assert plain_metric_replicas(3, {"a": 1.6, "b": 1.6}, pods[:3], 0.8) == 4


def test_hpa_pods_without_metrics_count_as_the_target_on_the_way_down() -> None:
    pods = ["a", "b", "loading"]
    # (0.2 + 0.2 + 0.8) / 3 / 0.8 = 0.5 -> ceil(1.5) = 2.
    assert plain_metric_replicas(3, {"a": 0.2, "b": 0.2}, pods, 0.8) == 2


def test_hpa_without_any_metric_changes_nothing() -> None:
    assert plain_metric_replicas(3, {}, ["a", "b", "c"], 0.8) == 3


def test_scale_down_stabilisation_keeps_the_highest_recommendation_of_five_minutes() -> None:
    hpa = Hpa(min_replicas=1, max_replicas=20)
    assert hpa.normalize(current=8, desired=8, now=0.0) == 8
    # The load drops at once; every sync for 300 s recommends 2, but 8 is still in the window.
    for t in range(15, 300, 15):
        assert hpa.normalize(current=8, desired=2, now=float(t)) == 8
    assert hpa.normalize(current=8, desired=2, now=301.0) == 2


def test_scale_up_is_limited_to_four_pods_or_double_per_period() -> None:
    hpa = Hpa(min_replicas=1, max_replicas=100)
    assert hpa.normalize(current=2, desired=20, now=0.0) == 6  # max(2 + 4, 2 x 2)
    assert hpa.normalize(current=6, desired=20, now=5.0) == 6  # the period's budget is spent
    assert hpa.normalize(current=6, desired=20, now=16.0) == 12  # next period: max(6 + 4, 12)
    assert hpa.normalize(current=12, desired=200, now=32.0) == 24


def test_max_replicas_caps_the_scale_up() -> None:
    hpa = Hpa(min_replicas=1, max_replicas=5)
    assert hpa.normalize(current=4, desired=9, now=0.0) == 5


def test_keda_creates_an_average_value_target_of_five_waiting_requests() -> None:
    # 23 waiting over 2 pods against 5 per pod: ceil(23 / 5) = 5.
    assert external_average_replicas(2, 23.0, 5.0) == 5
    # 10.5 waiting with 2 pods: ratio 1.05, inside the tolerance.
    assert external_average_replicas(2, 10.5, 5.0) == 2
    keda = Keda(max_replicas=16)
    assert keda.desired(0.0, current=2, waiting_total=23.0) == 5


def test_keda_cooldown_only_governs_scaling_to_zero() -> None:
    keda = Keda(max_replicas=8, min_replicas=0)
    assert keda.desired(0.0, current=3, waiting_total=12.0) == 3  # ratio 0.8 -> ceil(2.4) = 3
    # Idle from t=15: it stays up until 360 s after the last active poll, then goes to zero.
    assert keda.desired(15.0, current=3, waiting_total=0.0) == 3  # the HPA holds 3 for 300 s
    assert keda.desired(359.0, current=3, waiting_total=0.0) == 1  # HPA min is 1 while KEDA waits
    assert keda.desired(361.0, current=1, waiting_total=0.0) == 0
    assert keda.desired(400.0, current=0, waiting_total=2.0) == 1  # activation


def test_production_stack_keda_never_goes_below_one() -> None:
    keda = Keda(max_replicas=8)  # minReplicaCount 1: cooldownPeriod has nothing to do
    assert keda.desired(0.0, current=1, waiting_total=0.0) == 1
    assert keda.desired(10_000.0, current=1, waiting_total=0.0) == 1


@pytest.mark.parametrize("waiting", [0.0, 4.0])
def test_keda_scales_down_only_after_the_hpa_window(waiting: float) -> None:
    keda = Keda(max_replicas=8)
    assert keda.desired(0.0, current=4, waiting_total=20.0) == 4
    assert keda.desired(150.0, current=4, waiting_total=waiting) == 4
    assert keda.desired(301.0, current=4, waiting_total=waiting) == 1
