"""Decision core: median time to plan the full grid (TP 1..16 x concurrency 1..256) and peak memory."""

from __future__ import annotations

import resource
import statistics
import time
from dataclasses import replace

from infertune.model import LinearFit, load_gpu, load_model, workload_preset
from infertune.planner import PlanRequest, SloTarget, plan

TARGET_MS = 5.0


def full_grid_request() -> PlanRequest:
    return PlanRequest(
        model=load_model("kimi-k2.6"), gpu=load_gpu("b200"), workload=workload_preset("coding-agent"),
        slo=SloTarget(25.0, 3.0), tp_sizes=tuple(range(1, 17)), concurrency_min=1, concurrency_max=256,
        pool_gpus=256, fits={8: LinearFit(0.0052, 0.00165, 1.0, 7, 1, 32)}, demand_rps=2.0,
    )


def _times_ms(request: PlanRequest, runs: int) -> list[float]:
    times = []
    for i in range(runs):
        start = time.perf_counter()
        plan(request, None, float(i))
        times.append((time.perf_counter() - start) * 1e3)
    return times


def run() -> None:
    request = full_grid_request()
    result = plan(request, None, 0.0)  # warms the catalog caches
    times = _times_ms(request, 200)
    median = statistics.median(times)
    print(f"plan, full grid ({len(result.table)} candidates: TP 1..16 x concurrency 1..256)")
    print(f"  median {median:.2f} ms, p95 {sorted(times)[int(0.95 * len(times))]:.2f} ms "
          f"(target < {TARGET_MS:.0f} ms: {median / TARGET_MS:.2f}x of target)")
    print(f"  choice: {result.reason.split(';')[0]}")
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"  peak RSS of the process: {peak_mib:.0f} MiB")
    # Before any pass is measured the queueing search runs twice: counts on the hedged pass, shapes on its point.
    unmeasured = replace(request, fits={})
    plan(unmeasured, None, 0.0)
    napkin = statistics.median(_times_ms(unmeasured, 100))
    print(f"  with nothing measured (the napkin alone, counts hedged): median {napkin:.2f} ms, "
          f"{napkin / median:.2f}x the measured grid's")
