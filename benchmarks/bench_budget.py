"""Planning budget per resource: the most expensive spec the CRD admits (every allowed TP size, max-num-seqs
1..1,024, both SLOs, a demand, a live fit at every TP), planned cold and warm, and one whole tuning cycle of
the Reconciler on in-memory ports. Reports time, the memory one plan allocates at its peak (tracemalloc),
what stays resident after it (the Erlang C tables), and what the operator's worker threads could hold at
once against the chart's memory limit."""

from __future__ import annotations

import copy
import os
import resource
import statistics
import time
import tracemalloc
from pathlib import Path
from typing import Any

import yaml

from infertune.api.observation import Observation
from infertune.api.schema import ALLOWED_TP_SIZES, CONCURRENCY_MAX
from infertune.controller.hub import MetricsHub
from infertune.controller.memory import MemoryCluster, MemoryReport
from infertune.controller.reconciler import Reconciler, Resource
from infertune.model import load_gpu, load_model, workload_preset
from infertune.model.passfit import SampleSet
from infertune.observe.snapshot import Snapshot
from infertune.planner import PlanRequest, SloTarget, plan

ROOT = Path(__file__).resolve().parents[1]
CHART_LIMIT_MIB = 512  # charts/infertune/values.yaml operator.resources.limits.memory
# asyncio.to_thread's default executor: min(32, cores + 4) threads may plan at once.
WORKERS = min(32, (os.cpu_count() or 1) + 4)


def worst_request(model: str = "kimi-k2.6") -> PlanRequest:
    samples = SampleSet((1.0, 4.0, 8.0, 16.0), (0.012, 0.015, 0.019, 0.031), (80e3,) * 4, (1.0,) * 4)
    return PlanRequest(
        model=load_model(model), gpu=load_gpu("b200"), workload=workload_preset("coding-agent"),
        slo=SloTarget(25.0, 3.0), tp_sizes=ALLOWED_TP_SIZES, concurrency_min=1, concurrency_max=CONCURRENCY_MAX,
        replicas_max=1024, demand_rps=5.0, fits={tp: samples for tp in ALLOWED_TP_SIZES})


def _peak_mib(work: Any) -> float:
    tracemalloc.start()
    work()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak / 2**20


def _cycle_world() -> tuple[Reconciler, Resource, MemoryReport, MetricsHub, Any]:
    example = yaml.safe_load((ROOT / "examples/kimi-k2.6-b200.yaml").read_text())
    policy = yaml.safe_load((ROOT / "policies/coding-agent.yaml").read_text())
    spec = copy.deepcopy(example["spec"])
    spec["tuning"] = {**spec.get("tuning", {}), "tensorParallelSizes": list(ALLOWED_TP_SIZES),
                      "concurrency": {"min": 1, "max": CONCURRENCY_MAX}, "interval": "1s"}
    clock = [1.767e9]
    cluster, hub = MemoryCluster({"coding-agent": policy["spec"]}), MetricsHub()
    reconciler = Reconciler(cluster, hub, lambda: clock[0])
    report = MemoryReport()
    key = ("inference", "kimi-k2")

    def resource_now() -> Resource:
        return Resource(*key, uid="uid-1", spec=spec, status=report.current, generation=1)

    reconciler.converge(resource_now(), report)
    return reconciler, resource_now(), report, hub, (key, clock, resource_now)


def run() -> None:
    request = worst_request()
    started = time.perf_counter()
    result = plan(request, None, 0.0)
    cold_ms = (time.perf_counter() - started) * 1e3
    resident = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    times = []
    for i in range(30):
        started = time.perf_counter()
        plan(request, None, float(i))
        times.append((time.perf_counter() - started) * 1e3)
    peak = _peak_mib(lambda: plan(request, None, 1.0))
    print(f"plan, the costliest spec the CRD admits ({len(result.table)} candidates: TP "
          f"{','.join(map(str, ALLOWED_TP_SIZES))} x max-num-seqs 1..{CONCURRENCY_MAX}, live fits at every TP)")
    print(f"  cold {cold_ms:.0f} ms (builds the 1,024-slot Erlang C table once per process), "
          f"warm median {statistics.median(times):.1f} ms, max {max(times):.1f} ms")
    print(f"  allocated at its peak by one warm plan: {peak:.1f} MiB (tracemalloc)")

    reconciler, _, report, hub, (key, clock, resource_now) = _cycle_world()
    cycle_times = []
    for i in range(10):
        clock[0] += 2.0
        obs = Observation(*key, sample_time=clock[0], available=True, running=4.0, waiting=0.0, kv_usage=0.4,
                          mean_kv_usage=0.4, preemption_rate=0.0, arrival_rate=1.0 + 0.01 * i, completion_rate=1.0,
                          mean_prompt_tokens=84_000, mean_cached_tokens=71_000, mean_generated_tokens=1_000,
                          ttft_p50_seconds=0.5, ttft_p95_seconds=1.0, ttft_p99_seconds=1.2,
                          mean_inter_token_seconds=0.02)
        hub.ingest(hub.routes[key].source, Snapshot(time=clock[0], observations={key: obs}))
        started = time.perf_counter()
        reconciler.tune(resource_now(), report)
        cycle_times.append((time.perf_counter() - started) * 1e3)
    cycle_peak = _peak_mib(lambda: (clock.__setitem__(0, clock[0] + 2.0), reconciler.tune(resource_now(), report)))
    print(f"  one tuning cycle of such a resource (Reconciler.tune, in-memory ports): median "
          f"{statistics.median(cycle_times):.1f} ms, {cycle_peak:.1f} MiB at its peak")
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    worst = rss + WORKERS * max(peak, cycle_peak)
    print(f"  process peak RSS {rss:.0f} MiB (after the first plan: {resident:.0f} MiB); {WORKERS} worker threads "
          f"planning such resources at once: <= {worst:.0f} MiB of the chart's {CHART_LIMIT_MIB} MiB limit")
