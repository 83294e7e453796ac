"""The per-stream floor is judged with the prefill that shares each decode step, and checked on the twin.

A step runs every decoding stream one token plus any prefill chunk (the engine's chunked prefill, as
the twin runs it: sim/steptime.py). With every slot busy, new requests start as others finish, so a
replica serving short answers behind long prompts spends much of each second prefilling, and its
streams decode that much slower. A decode-only speed allowed TP4 25 slots for the Azure code trace's
requests (2K-token prompts, 28-token answers); on the twin, 97% of those answers decode below the floor.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from infertune.model import Workload, load_gpu, load_model, workload_preset
from infertune.planner import PlanRequest, SloTarget, candidates, plan
from infertune.planner.candidates import Verdict, with_prefill
from infertune_lab.bench.metrics import Slo, attainment
from infertune_lab.bench.suite import _replica
from infertune_lab.sim import ClosedLoop, Fleet, SessionShape

KIMI, B200 = load_model("kimi-k2.6"), load_gpu("b200")
FLOOR = 25.0
# The Azure code trace's mean request (docs/sources.md#azure-llm-2024) and the chat trace's shape.
AZURE_CODE = replace(workload_preset("chat"), fresh_tokens=2_050.0, cached_tokens=0.0, output_tokens=28.0,
                     ttft_fresh_tokens=None)
CHAT = replace(workload_preset("chat"), fresh_tokens=1_145.0, cached_tokens=0.0, output_tokens=208.0,
               ttft_fresh_tokens=None)


def test_with_no_prompt_to_prefill_the_speed_is_the_decode_speed() -> None:
    tps = np.array([60.0, 30.0])
    assert np.allclose(with_prefill(tps, np.array([4.0, 20.0]), np.array([5.0, 9.0]), 0.0, 200.0, 40_000.0), tps)


def test_a_long_answer_decodes_at_the_share_of_time_left_from_prefill() -> None:
    """Over many tokens the prefills that start meanwhile average out: the speed is (1 - share) x decode."""
    tps, slots, e2e, fresh, rate = np.array([50.0]), np.array([8.0]), np.array([20.0]), 10_000.0, 40_000.0
    share = 8.0 / 20.0 * fresh / rate
    long = with_prefill(tps, slots, e2e, fresh, 1e7, rate)[0]
    assert long == pytest.approx(50.0 * (1.0 - share), rel=1e-3)


def test_a_short_answer_is_judged_slower_than_a_long_one_at_the_same_share() -> None:
    """A 28-token answer sees a handful of prefills start; their count varies most, so its tail is slower."""
    args = (np.array([50.0]), np.array([8.0]), np.array([2.0]), 2_000.0)
    short, long = with_prefill(*args, 28.0, 40_000.0)[0], with_prefill(*args, 10_000.0, 40_000.0)[0]
    assert short < long < 50.0


def _largest_tp4(workload: Workload) -> int:
    request = PlanRequest(model=KIMI, gpu=B200, workload=workload, slo=SloTarget(min_stream_tps=FLOOR),
                          tp_sizes=(4,), concurrency_max=64, pool_gpus=64, demand_rps=1.0)
    table = plan(request, None, now=0.0).table
    # The slots the floor allows with every one busy: a cap past them is sized to run fewer (candidates.py).
    return int(table.concurrency[(table.verdict == Verdict.FEASIBLE) & (table.floor_streams == 0)].max())


def _on_the_twin(workload, slots: int) -> float:
    """The share of answers at the floor on one TP4 replica of the twin with every slot busy."""
    shape = SessionShape("one-shot", workload.fresh_tokens, 0.7 * workload.fresh_tokens, workload.output_tokens,
                         0.6 * workload.output_tokens, 1, 1, 10**7, 0.0, 0.0)
    config = _replica("kimi-k2.6", "b200").with_(tp=4, max_num_seqs=slots, load_delay_seconds=0.0)
    fleet = Fleet(ClosedLoop(shape, slots, seed=1, think=None, ramp=60.0), router="session-affinity", seed=1)
    fleet.add_replica(config)
    fleet.run_until(120.0)
    records = [r for r in fleet.run_until(600.0) if r.first_token >= 120.0]
    return attainment(records, Slo(1e9, FLOOR))[1]


@pytest.mark.parametrize(("workload", "held"), [(AZURE_CODE, 0.9), (CHAT, 0.95)], ids=["azure-code", "chat"])
def test_the_slots_the_floor_allows_keep_it_on_the_twin_where_decode_alone_did_not(workload, held,
                                                                                   monkeypatch) -> None:
    """Every slot busy all the time is the worst case (a replica sized by the queueing model runs below
    it): there the most slots the floor allows keep most answers at it, and the most decode alone allowed
    do not (on the twin: azure-code TP4 c=6 95% against c=25 3%; chat c=21 97% against c=26 1%)."""
    planned = _largest_tp4(workload)
    monkeypatch.setattr(candidates, "with_prefill", lambda tps, *_: tps)  # the floor as it was: decode alone
    decode_only = _largest_tp4(workload)
    assert planned < decode_only
    assert _on_the_twin(workload, planned) >= held
    assert _on_the_twin(workload, decode_only) < held


def test_a_cap_past_the_floor_takes_bursts_on_the_replicas_the_floor_sizes() -> None:
    """Chat's short contexts leave TP4's KV pool nearly empty with every slot busy, so a cap past the streams
    that keep the floor is a burst's room, not a cliff: it is feasible, sized so that more streams than
    the floor allows run at most 5% of the time (a chat draw with 6x bursts on a quiet fleet went from
    83.25% to 100% so: docs/bench-history.md). A coding session's contexts fill TP4's pool long before that;
    TP8's pool, twice as large, holds such a cap for them (the preset's TP8 c=14 start became one once
    measured, and the 2-hour spike's seeds 9 and 15 lost 19-20 points to it: docs/bench-history.md)."""
    request = PlanRequest(model=KIMI, gpu=B200, workload=CHAT, slo=SloTarget(min_stream_tps=FLOOR),
                          tp_sizes=(4,), concurrency_max=64, pool_gpus=64, demand_rps=1.0)
    result = plan(request, None, now=0.0)
    table = result.table
    keeps = int(table.concurrency[(table.verdict == Verdict.FEASIBLE) & (table.floor_streams == 0)].max())
    bursts = [c for c in result.candidates() if c.feasible and c.max_num_seqs > keeps]
    assert bursts and max(c.max_num_seqs for c in bursts) == 64
    floor_row = next(c for c in result.candidates() if c.max_num_seqs == keeps)
    for row in bursts:
        assert f"more than {keeps} streams" in row.reason and row.kv_tail_fraction <= 0.9
        assert row.sustainable_rate < floor_row.sustainable_rate
    # Chosen on a quiet fleet, where one replica of either carries the demand: the larger cap, at no more GPUs.
    assert result.layout is not None and result.layout.max_num_seqs > keeps and result.layout.replicas == 1
    coding = replace(request, workload=workload_preset("coding-agent"))
    coding_table = plan(coding, None, now=0.0).table
    assert not ((coding_table.floor_streams > 0) & (coding_table.verdict == Verdict.FEASIBLE)).any()
    tp8_table = plan(replace(coding, tp_sizes=(8,)), None, now=0.0).table
    assert ((tp8_table.floor_streams > 0) & (tp8_table.verdict == Verdict.FEASIBLE)).any()
