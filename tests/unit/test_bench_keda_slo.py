"""llm-d's SLO-aware KEDA loop, worked by hand from its guide's definitions
(guides/workload-autoscaling/README.slo-aware.md): the signal, the control law, the HPA layer."""

from __future__ import annotations

import pytest

from infertune_lab.bench.hpa import Hpa, external_average_replicas
from infertune_lab.bench.keda_slo import SCALE_DOWN, SCALE_UP, Band, SaturationSignal, desired_replicas
from infertune_lab.bench.metrics import Slo

SLO = Slo(ttft_seconds=3.0, min_stream_tps=25.0)  # TPOT SLO 40 ms


def test_above_the_band_the_ask_grows_with_the_signal() -> None:
    # n = 3 ready, s = 1.1: 3 + ceil(3 x (1.1 / 0.55 - 1)) = 3 + 3 = 6.
    assert desired_replicas(3, 3, 1.1) == 6
    # The clamp's top, s = 2: 3 + ceil(3 x 2.636) = 3 + 8 = 11.
    assert desired_replicas(3, 3, 2.0) == 11
    # Just above the band: 8 + ceil(8 x (0.56 / 0.55 - 1)) = 8 + ceil(0.145) = 9.
    assert desired_replicas(8, 8, 0.56) == 9


def test_the_in_flight_credit_asks_only_for_the_deficit_beyond_pods_warming() -> None:
    # 6 provisioned, 3 ready, s = 1.1: c = 0.5, so 6 + ceil(6 x (0.55 / 0.55 - 1)) = 6: the
    # three warming pods already cover what the ready ones report.
    assert desired_replicas(6, 3, 1.1) == 6
    # s = 2 with half ready: 6 + ceil(6 x (1.0 / 0.55 - 1)) = 6 + ceil(4.91) = 11.
    assert desired_replicas(6, 3, 2.0) == 11
    # No ready pod at all: no credit (c = 1), as the guide defines it for r = 0.
    assert desired_replicas(4, 0, 1.1) == 8


def test_inside_the_band_it_holds_and_below_it_sheds_uncredited() -> None:
    for s in (0.40, 0.47, 0.55):
        assert desired_replicas(8, 8, s) == 8
    # n = 8, s = 0.2: 8 - floor(8 x (1 - 0.2 / 0.4)) = 8 - 4 = 4.
    assert desired_replicas(8, 8, 0.2) == 4
    # The scale-down branch ignores the credit: 6 - floor(6 x (1 - 0.3 / 0.4)) = 6 - 1 = 5.
    assert desired_replicas(6, 3, 0.3) == 5
    assert desired_replicas(5, 5, 0.0) == 0  # an idle pool asks for nothing; minReplicaCount clips it


def test_a_wider_band_moves_both_thresholds() -> None:
    band = Band(up=0.8, down=0.5)
    assert desired_replicas(4, 4, 0.7, band) == 4  # inside 0.5..0.8
    assert desired_replicas(4, 4, 1.2, band) == 4 + 2  # ceil(4 x (1.5 - 1))
    assert str(band) == "0.80/0.50"
    with pytest.raises(ValueError):
        Band(up=0.3, down=0.4)


def test_the_signal_is_the_worse_of_the_two_p90s_against_the_slo() -> None:
    signal = SaturationSignal(SLO)
    for i in range(10):
        signal.observe_ttft(10.0 + i, 0.5 + 0.1 * i)  # P90 (nearest rank) is the ninth: 1.3 s
        signal.observe_tpot(10.0 + i, 0.030)
    # max(1.3 / 3, 0.030 / 0.040) = 0.75
    assert signal.evaluate(20.0) == pytest.approx(0.75)


def test_no_traffic_reads_zero_and_old_requests_leave_the_one_minute_window() -> None:
    signal = SaturationSignal(SLO)
    assert signal.evaluate(0.0) == 0.0
    signal = SaturationSignal(SLO)
    signal.observe_ttft(0.0, 30.0)
    assert signal.evaluate(15.0) == 2.0  # 10x the SLO, clamped at C = 2
    assert signal.evaluate(30.0) == 2.0
    # At 61 s the request is out of the 1 m window (raw 0); the 45 s average holds 30 s and 61 s.
    assert signal.evaluate(61.0) == pytest.approx((2.0 + 0.0) / 2)


def test_the_clamp_keeps_one_spike_from_inflating_the_45_second_average() -> None:
    signal = SaturationSignal(SLO)
    signal.observe_ttft(0.0, 60.0)  # 20x the SLO
    assert signal.evaluate(0.0) == 2.0
    for t in (15.0, 30.0):
        signal.observe_ttft(t, 0.9)
    # At 30 s the 1 m window holds 60 s and 0.9 s twice: P90 is still 60 s, clamped to 2.
    assert signal.evaluate(15.0) == 2.0
    assert signal.evaluate(30.0) == 2.0
    # At 61 s the spike is gone from the window; the 45 s average holds samples of 30, 45 and 61 s.
    assert signal.evaluate(45.0) == 2.0
    assert signal.evaluate(61.0) == pytest.approx((2.0 + 2.0 + 0.3) / 3)


def test_the_hpa_passes_the_formula_through_with_its_tolerance() -> None:
    assert external_average_replicas(3, 6.0, 1.0) == 6
    assert external_average_replicas(16, 15.0, 1.0) == 16  # |1 - 15/16| <= 0.1: no change


def test_scale_up_bursts_max_of_100_percent_and_4_pods_per_minute_after_a_30_second_window() -> None:
    hpa = Hpa(1, 16, SCALE_UP, SCALE_DOWN)
    assert hpa.normalize(current=3, desired=11, now=0.0) == 7  # max(3 x 2, 3 + 4)
    assert hpa.normalize(current=7, desired=11, now=30.0) == 7  # the minute's budget is spent
    assert hpa.normalize(current=7, desired=11, now=61.0) == 11
    # The up window keeps the lowest recommendation of 30 s: a brief dip holds the next step.
    hpa = Hpa(1, 16, SCALE_UP, SCALE_DOWN)
    assert hpa.normalize(current=4, desired=4, now=0.0) == 4
    assert hpa.normalize(current=4, desired=8, now=15.0) == 4
    assert hpa.normalize(current=4, desired=8, now=31.0) == 8


def test_scale_down_walks_one_pod_per_two_minutes_after_a_three_minute_window() -> None:
    hpa = Hpa(1, 16, SCALE_UP, SCALE_DOWN)
    assert hpa.normalize(current=8, desired=8, now=0.0) == 8
    for t in range(15, 180, 15):
        assert hpa.normalize(current=8, desired=4, now=float(t)) == 8  # 8 is still in the window
    assert hpa.normalize(current=8, desired=4, now=181.0) == 7
    assert hpa.normalize(current=7, desired=4, now=241.0) == 7  # one pod per 120 s
    assert hpa.normalize(current=7, desired=4, now=302.0) == 6
