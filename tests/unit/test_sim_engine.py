"""The replica engine: the four regions emerge from the scheduler, the vLLM Llama 3.1 8B batch figures
(docs/sources.md#vllm-batch-basics), and the
scheduler's rules (block budget, max_num_seqs, preemption of the latest arrival, prefix cache)."""

from __future__ import annotations

import itertools
import math
import random

import pytest

from infertune.errors import UserError
from infertune.model import LinearFit, PerformanceModel, Workload, load_gpu, load_model
from infertune_lab.sim import Engine, Fleet, OpenSessions, ReplicaConfig, RequestSpec, SessionShape, TraceReplay, shape
from infertune_lab.sim.sweep import SweepRow, sweep
from infertune_lab.sim.trace import TraceRow
from infertune_lab.sim.traffic import ClosedLoop, poisson

SEED_FIT = {8: LinearFit(0.0052, 0.00165, 1.0, 0, 1, 64)}
KIMI = ReplicaConfig(model="kimi-k2.6", gpu="b200", tp=8, fits=SEED_FIT)


@pytest.fixture(scope="module")
def kimi_sweep() -> dict[int, SweepRow]:
    rows = sweep(KIMI, shape("coding-agent"), [1, 8, 16, 24, 48, 64], warmup=150, duration=450, seed=1)
    return {r.concurrency: r for r in rows}


def test_aggregate_climbs_then_flattens(kimi_sweep: dict[int, SweepRow]) -> None:
    agg = {c: r.aggregate_tps for c, r in kimi_sweep.items()}
    assert agg[1] < agg[8] < agg[16]
    assert agg[8] > 2 * agg[1]  # the climb: near-free streams
    assert agg[24] < 1.2 * agg[16]  # the plateau: 50% more streams buy little


def test_per_stream_tps_falls(kimi_sweep: dict[int, SweepRow]) -> None:
    tps = [kimi_sweep[c].per_stream_tps for c in (1, 8, 16, 24, 48)]
    assert all(a > b for a, b in itertools.pairwise(tps))
    # The B200 load test: ~54 tok/s at B=8 and 27 at B=16 on the fitted line.
    assert 40 < kimi_sweep[8].per_stream_tps < 60
    assert 22 < kimi_sweep[16].per_stream_tps < 34


def test_past_the_kv_pool_the_cliff_emerges(kimi_sweep: dict[int, SweepRow]) -> None:
    cap = KIMI.performance_model().kv_capacity(8)
    assert 28 < cap / 85_000 < 34  # the working set fills the pool near 31 streams
    plateau, cliff = kimi_sweep[16], kimi_sweep[48]
    assert kimi_sweep[16].preemptions == kimi_sweep[24].preemptions == 0
    assert cliff.preemptions > 0 and kimi_sweep[64].preemptions > 0
    assert cliff.prefix_hit_rate < plateau.prefix_hit_rate - 0.3
    assert cliff.ttft_p95_seconds > 5 * plateau.ttft_p95_seconds
    peak = max(r.aggregate_tps for r in kimi_sweep.values())
    assert cliff.aggregate_tps < 0.9 * peak
    assert cliff.kv_usage > 0.9 > plateau.kv_usage


def test_a_bigger_pool_moves_the_cliff() -> None:
    """The cliff comes from the blocks, not from the concurrency: double the pool, no preemption."""
    blocks = KIMI.gpu_blocks()
    small = sweep(KIMI, shape("coding-agent"), [40], warmup=100, duration=300)[0]
    big = sweep(KIMI.with_(num_gpu_blocks=2 * blocks), shape("coding-agent"), [40], warmup=100, duration=300)[0]
    assert small.preemptions > 0 and big.preemptions == 0
    assert big.ttft_p95_seconds < small.ttft_p95_seconds / 5


SEED_001 = {1: 95.0, 8: 620.0, 32: 2400.0}


def vllm_llama_batch_rows() -> dict[int, float]:
    """Llama-3.1-8B on one H100, decode-heavy requests, napkin calibrated by ONE ratio (B=1)."""
    workload = Workload(fresh_tokens=256, cached_tokens=0, output_tokens=1024)
    perf = PerformanceModel(load_model("llama-3.1-8b"), load_gpu("h100"), workload,
                            measured_points={1: (1.0, 1.0 / SEED_001[1])})
    config = ReplicaConfig(model="llama-3.1-8b", gpu="h100", tp=1, perf=perf)
    traffic = SessionShape("decode", 256, 200, 1024, 800, 1, 1, 10**6, 0.0, 0.0)
    rows = sweep(config, traffic, list(SEED_001), warmup=60, duration=600)
    return {r.concurrency: r.aggregate_tps for r in rows}


def test_vllm_llama_batch_figures_within_25_percent() -> None:
    got = vllm_llama_batch_rows()
    for c, want in SEED_001.items():
        assert abs(got[c] / want - 1) < 0.25, (c, got[c], want)


# --- scheduler rules, on small pools -----------------------------------------------------------
def tiny(blocks: int, **kw: object) -> Engine:
    return Engine(ReplicaConfig(model="llama-3.1-8b", gpu="h100", tp=1, num_gpu_blocks=blocks,
                                workload="chat").with_(**kw))


def drain(engine: Engine, limit: float = 1e6) -> list:
    done = []
    while not engine.idle and engine.clock < limit:
        done += engine.advance(limit)
    return done


def test_every_output_token_is_generated_once_even_with_preemption() -> None:
    engine = tiny(60)  # 960 tokens: five 300-token requests cannot all stay
    specs = [RequestSpec(0.0, 200, 100 + i) for i in range(5)]
    for s in specs:
        engine.add(s)
    records = drain(engine)
    assert len(records) == 5
    assert engine.meters.preemptions > 0
    assert engine.meters.generation_tokens == sum(s.output_tokens for s in specs)
    assert all(r.ttft > 0 and r.finish >= r.first_token for r in records)


def test_the_latest_arrival_is_preempted_first() -> None:
    engine = tiny(40)  # 640 tokens
    early = RequestSpec(0.0, 100, 400)
    late = RequestSpec(0.001, 100, 400)
    engine.add(early)
    engine.add(late, 0.001)
    by_arrival = {r.spec.arrival: r for r in drain(engine)}
    assert by_arrival[0.0].preemptions == 0
    assert by_arrival[0.001].preemptions >= 1


def test_max_num_seqs_caps_the_batch() -> None:
    engine = Engine(ReplicaConfig(model="llama-3.1-8b", gpu="h100", tp=1, max_num_seqs=4, workload="chat"),
                    sample_interval=0.05)
    for i in range(12):
        engine.add(RequestSpec(0.0, 100, 200 + i))
    drain(engine)
    assert max(s.running for s in engine.samples) == 4
    assert max(s.waiting for s in engine.samples) >= 8


def test_kv_use_never_exceeds_the_pool() -> None:
    engine = tiny(50)
    engine.sample_interval = 0.01
    for i in range(10):
        engine.add(RequestSpec(0.0, 150, 150 + i, session=f"s{i}"))
    while not engine.idle:
        engine.advance(math.inf)
        assert engine.referenced_blocks + engine.cache.total <= engine.total_blocks
    assert max(s.kv_usage for s in engine.samples) <= 1.0


def test_a_returning_session_hits_its_cached_prefix() -> None:
    engine = tiny(1000)
    engine.add(RequestSpec(0.0, 1000, 100, session="a"))
    first = drain(engine)[0]
    engine.add(RequestSpec(first.finish, 1100 + 300, 50, session="a"))  # previous context + 300 fresh
    second = drain(engine)[0]
    assert first.cached_tokens == 0
    assert second.cached_tokens == (1100 // 16) * 16  # whole blocks of the previous context
    assert second.ttft < first.ttft


def test_prefix_eviction_is_least_recently_used() -> None:
    engine = tiny(200)  # 3200 tokens
    for sid, t in (("old", 0.0), ("new", 100.0)):
        engine.add(RequestSpec(t, 1000, 10, session=sid), t)
        drain(engine, t + 50)
    engine.add(RequestSpec(200.0, 1500, 10), 200.0)  # needs the room of one cached prefix
    drain(engine)
    assert engine.cache.cached("old") < engine.cache.cached("new")


def test_a_request_larger_than_the_pool_is_rejected_not_hung() -> None:
    engine = tiny(10)
    assert not engine.add(RequestSpec(0.0, 500, 10))
    assert engine.rejected and engine.idle


def test_a_fleet_counts_a_request_larger_than_every_pool_once() -> None:
    """The engine records the refusal and `add` says False: the fleet counted both, so a replay reported
    rejected: 2 for one request too large for any replica (completed + rejected past the requests)."""
    small = ReplicaConfig(model="llama-3.1-8b", gpu="h100", tp=1, workload="chat", num_gpu_blocks=200)
    rows = [TraceRow(0.0, 100, 10), TraceRow(1.0, 9_000_000, 10), TraceRow(2.0, 100, 10)]
    fleet = Fleet(TraceReplay(rows))
    fleet.add_replica(small)
    fleet.add_replica(small)
    fleet.run_until(600.0)
    assert len(fleet.records) == 2 and len(fleet.rejected) == 1
    assert len(fleet.records) + len(fleet.rejected) == len(rows)


def test_closed_loop_fleet_holds_its_concurrency() -> None:
    fleet = Fleet(ClosedLoop(shape("chat"), 12, seed=3), sample_interval=1.0)
    name = fleet.add_replica(ReplicaConfig(model="llama-3.1-8b", gpu="h100", tp=1, workload="chat"))
    fleet.run_until(120)
    samples = fleet.replicas[name].engine.samples[30:]
    assert max(s.running + s.waiting for s in samples) <= 12
    assert sum(s.running for s in samples) / len(samples) > 9  # think time 0: nearly all in flight


def test_replica_config_reads_a_pods_vllm_flags() -> None:
    config = ReplicaConfig.from_args(["vllm", "serve", "m", "--tensor-parallel-size", "4", "--max-num-seqs=12",
                                      "--num-gpu-blocks-override", "900", "--port", "8000"])
    assert (config.tp, config.max_num_seqs, config.num_gpu_blocks) == (4, 12, 900)
    with pytest.raises(UserError, match="--max-num-seqs: 'many'"):
        ReplicaConfig.from_args(["--max-num-seqs", "many"])


def test_requests_wait_at_the_gateway_while_the_model_loads() -> None:

    fleet = Fleet(OpenSessions(shape("chat"), poisson(1.0, random.Random(0))))
    fleet.add_replica(ReplicaConfig(model="llama-3.1-8b", gpu="h100", tp=1, workload="chat",
                                    load_delay_seconds=30.0))
    fleet.run_until(29.0)
    assert fleet.gateway and not fleet.records
    fleet.run_until(120.0)
    assert fleet.records and min(r.first_token for r in fleet.records) >= 30.0


def test_a_stopped_replica_drains_and_an_abrupt_stop_reroutes() -> None:

    small = ReplicaConfig(model="llama-3.1-8b", gpu="h100", tp=1, workload="chat")
    fleet = Fleet(OpenSessions(shape("chat"), poisson(3.0, random.Random(0))), router="round-robin")
    a, b = fleet.add_replica(small), fleet.add_replica(small)
    fleet.run_until(20.0)
    held = fleet.replicas[a].engine.outstanding
    assert held > 0
    fleet.remove_replica(a)  # drain
    assert fleet.replicas[a].draining
    fleet.run_until(200.0)
    assert a not in fleet.replicas and {r.replica for r in fleet.records[-20:]} == {b}
    fleet.remove_replica(b, drain=False)
    assert fleet.gateway  # its requests wait for another replica, not lost
    c = fleet.add_replica(small)
    fleet.run_until(400.0)
    assert any(r.replica == c for r in fleet.records)


def test_a_draining_replica_is_killed_at_the_end_of_its_grace_and_its_requests_go_elsewhere() -> None:
    """A Terminating pod finishes what it can within its grace period; what it still holds then
    (a deep queue here) is served by another replica, not held for as long as the queue lasts."""
    small = ReplicaConfig(model="llama-3.1-8b", gpu="h100", tp=1, workload="chat", max_num_seqs=2)
    rows = [TraceRow(i * 0.5, 1_000, 2_000) for i in range(40)]
    fleet = Fleet(TraceReplay(rows), router="round-robin")
    a, b = fleet.add_replica(small), fleet.add_replica(small)
    fleet.run_until(20.0)
    held = [id(s.spec) for s in (*fleet.replicas[a].engine.running, *fleet.replicas[a].engine.waiting)]
    assert len(held) > 10  # two slots, 2,000-token answers: a queue
    fleet.remove_replica(a, grace_seconds=30.0)
    fleet.run_until(49.0)
    assert fleet.replicas[a].draining
    fleet.run_until(51.0)
    assert a not in fleet.replicas  # killed at 50 s with its queue, not drained to the end
    fleet.run_until(5_000.0)
    record = {id(r.spec): r for r in fleet.records}
    assert len(fleet.records) == len(rows)  # none lost
    on_a = [record[i] for i in held if record[i].replica == a]
    assert all(r.finish <= 50.0 for r in on_a)  # a finished only what it could within its grace
    assert sum(record[i].replica == b for i in held) == len(held) - len(on_a) > 10  # b served the rest
