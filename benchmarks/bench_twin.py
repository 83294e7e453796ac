"""Twin speed: simulated seconds per wall second for a 16-replica coding-agent fleet on the plateau,
peak memory, and the fidelity figures the twin is held to (vLLM's Llama 3.1 8B batch figures,
docs/sources.md#vllm-batch-basics; the B200 load test's cliff)."""

from __future__ import annotations

import random
import resource
import time
import tracemalloc

from infertune.model import LinearFit, PerformanceModel, Workload, load_gpu, load_model
from infertune_lab.sim import Fleet, OpenSessions, ReplicaConfig, SessionShape, shape, uniform_fleet
from infertune_lab.sim.sweep import sweep
from infertune_lab.sim.traffic import poisson

SEED_FIT = {8: LinearFit(0.0052, 0.00165, 1.0, 0, 1, 64)}
REPLICAS = 16
# New sessions a second that put ~16-20 streams on each of 16 TP8 replicas (the plateau).
SESSION_RATE = 0.7


def plateau_fleet() -> Fleet:
    traffic = OpenSessions(shape("coding-agent"), poisson(SESSION_RATE, random.Random(3)), seed=3)
    return uniform_fleet(ReplicaConfig(fits=SEED_FIT), REPLICAS, traffic, router="session-affinity",
                         sample_interval=10.0)


def fleet_speed(warmup: float = 900.0, measured: float = 3600.0) -> None:
    fleet = plateau_fleet()
    fleet.run_until(warmup)
    start = time.perf_counter()
    done = fleet.run_until(warmup + measured)
    wall = time.perf_counter() - start
    running = [s.running for r in fleet.replicas.values() for s in r.engine.samples if s.time >= warmup]
    tokens = sum(r.spec.output_tokens for r in done)
    print(f"16x TP8 Kimi K2.6, coding-agent, {SESSION_RATE} sessions/s: mean running per replica "
          f"{sum(running) / len(running):.1f}, {len(done)} requests, {tokens / measured:,.0f} output tok/s")
    print(f"  simulated seconds per wall second: {measured / wall:,.0f}x  ({measured:.0f} s in {wall:.2f} s)")
    print(f"  peak RSS of the process: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")


def fleet_memory(measured: float = 1800.0) -> None:
    tracemalloc.start()
    fleet = plateau_fleet()
    fleet.run_until(measured)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    print(f"  peak Python allocations for {measured:.0f} simulated s (records kept): {peak / 2**20:.1f} MiB")


def sweep_speed() -> None:
    levels = [1, 2, 4, 8, 16, 24, 32, 40, 48, 64]
    start = time.perf_counter()
    rows = sweep(ReplicaConfig(fits=SEED_FIT), shape("coding-agent"), levels)
    wall = time.perf_counter() - start
    print(f"sweep of {len(levels)} levels x 1,200 simulated s: {wall:.2f} s wall")
    for r in rows:
        print(f"  c={r.concurrency:>2}  agg {r.aggregate_tps:6.1f} tok/s  stream {r.per_stream_tps:6.1f}  "
              f"TTFT p95 {r.ttft_p95_seconds:6.2f} s  KV {r.kv_usage:5.1%}  preempt {r.preemptions:>4}  "
              f"hit {r.prefix_hit_rate:5.1%}")


def vllm_llama_batch() -> None:
    want = {1: 95.0, 8: 620.0, 32: 2400.0}
    perf = PerformanceModel(load_model("llama-3.1-8b"), load_gpu("h100"), Workload(256, 0, 1024),
                            measured_points={1: (1.0, 1 / want[1])})
    traffic = SessionShape("decode", 256, 200, 1024, 800, 1, 1, 10**6, 0.0, 0.0)
    rows = sweep(ReplicaConfig(model="llama-3.1-8b", gpu="h100", tp=1, perf=perf), traffic, list(want),
                 warmup=60, duration=600)
    cells = ", ".join(f"c={r.concurrency}: {r.aggregate_tps:,.0f} vs ~{want[r.concurrency]:,.0f} "
                      f"({r.aggregate_tps / want[r.concurrency] - 1:+.1%})" for r in rows)
    print(f"vLLM batch basics, Llama-3.1-8B on 1x H100 (napkin, one ratio at B=1): {cells}")


def run() -> None:
    fleet_speed()
    fleet_memory()
    sweep_speed()
    vllm_llama_batch()


if __name__ == "__main__":
    run()
