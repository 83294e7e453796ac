"""Metric definitions on hand-made records, and the shared actuation semantics on a small fleet."""

from __future__ import annotations

import math

import pytest

from infertune.planner.types import Layout
from infertune_lab.bench.actuation import Actuator
from infertune_lab.bench.metrics import Slo, attainment, first_load_bound, quantile, summarize
from infertune_lab.sim import Fleet, ReplicaConfig, RequestRecord, RequestSpec

SLO = Slo(ttft_seconds=3.0, min_stream_tps=25.0)


def record(ttft: float, tps: float, output: int = 101, arrival: float = 0.0) -> RequestRecord:
    """A request with this TTFT and mean decode rate (output - 1 tokens after the first)."""
    first = arrival + ttft
    return RequestRecord(RequestSpec(arrival, 1_000, output), "r", first, first + (output - 1) / tps, 0, 0)


def test_attainment_counts_each_slo_separately_and_unfinished_as_misses() -> None:
    records = [record(1.0, 30.0), record(5.0, 30.0), record(1.0, 10.0), record(2.9, 26.0)]
    assert attainment(records, SLO) == (0.75, 0.75)
    assert attainment(records, SLO, unfinished=4) == (3 / 8, 3 / 8)
    assert attainment([record(9.0, 1.0, output=1)], SLO) == (0.0, 1.0)  # no decode: no TPS miss


def test_the_first_load_bound_counts_the_misses_served_before_any_new_pod_could_serve() -> None:
    # A 300 s warm-up, a 900 s load: misses whose first token came by 1,200 s (run time) bind every
    # policy from this start; a miss served later, and any request that met its TTFT, do not.
    early_misses = [record(40.0, 30.0, arrival=300.0 + t) for t in (60.0, 120.0, 800.0)]  # first tokens by 1,140 s
    late_miss = record(40.0, 30.0, arrival=1_190.0)  # its first token at 1,230 s
    met = [record(1.0, 30.0, arrival=300.0 + t) for t in range(0, 2_000, 100)]
    records = [*early_misses, late_miss, *met]
    bound = first_load_bound(records, len(records) + 1, SLO, begin=300.0, load_seconds=900.0)
    assert bound == pytest.approx(1.0 - 3 / 25)
    assert first_load_bound(records, 0, SLO, begin=300.0, load_seconds=900.0) == 1.0
    assert first_load_bound(met, len(met), SLO, begin=300.0, load_seconds=900.0) == 1.0


def test_cost_and_goodput_follow_their_definitions() -> None:
    records = [record(1.0, 30.0, output=1_000), record(5.0, 30.0, output=3_000)]
    result = summarize("p", records, 0, SLO, gpu_seconds=2 * 3600.0, price_per_gpu_hour=6.0, seconds_past_cliff=15.0,
                       relayouts=1, peak_gpus=8, wall_seconds=0.1)
    assert result.gpu_hours == 2.0
    assert result.cost_per_million_tokens == pytest.approx(2.0 * 6.0 / 4_000 * 1e6)
    assert result.goodput_tokens_per_gpu_hour == pytest.approx(1_000 / 2.0)  # only the first met both
    assert (result.sla_attainment_ttft, result.sla_attainment_tps) == (0.5, 1.0)
    assert result.as_json()["relayouts"] == 1


def test_quantile_is_nearest_rank() -> None:
    assert quantile([float(i) for i in range(1, 101)], 0.95) == 95.0
    assert quantile([3.0], 0.05) == 3.0
    assert math.isnan(quantile([], 0.5))


def actuator(load: float = 100.0) -> Actuator:
    fleet = Fleet(None)
    return Actuator(fleet, ReplicaConfig(num_gpu_blocks=10_000), load, pool_gpus=64)


def test_scale_up_loads_before_serving_and_gpu_time_counts_from_the_start() -> None:
    act = actuator()
    act.start(Layout(8, 16, 1))
    act.apply(Layout(8, 16, 3))
    assert len(act.serving()) == 3 and sum(act.ready(r) for r in act.serving()) == 1
    act.account(50.0)
    assert act.gpu_seconds == 3 * 8 * 50.0  # loading replicas are paid for
    act.fleet.run_until(100.0)
    assert sum(act.ready(r) for r in act.serving()) == 3


def test_relayout_rolls_one_at_a_time_without_losing_capacity() -> None:
    act = actuator()
    act.start(Layout(4, 8, 2))
    act.apply(Layout(8, 16, 2))
    assert act.relayouts == 1
    shapes = sorted((r.config.tp, act.ready(r)) for r in act.serving())
    assert shapes == [(4, True), (4, True), (8, False)]  # maxSurge 1, the old ones still serve
    act.fleet.run_until(100.0)
    act.reconcile()
    shapes = sorted((r.config.tp, act.ready(r)) for r in act.serving())
    assert shapes == [(4, True), (8, False), (8, True)]  # one old went once one new was ready
    act.fleet.run_until(200.0)
    act.reconcile()
    assert sorted(r.config.tp for r in act.serving()) == [8, 8]


def test_scale_down_removes_unready_replicas_first() -> None:
    act = actuator()
    act.start(Layout(8, 16, 2))
    act.apply(Layout(8, 16, 3))
    act.apply(Layout(8, 16, 2))
    assert len(act.serving()) == 2 and all(act.ready(r) for r in act.serving())
