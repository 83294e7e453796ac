"""One scenario, every policy: build the case, the sweep and the schedules, run the policies.

The twin's replicas follow the load test's measured per-pass line at TP8, 5.2 ms + 1.65 ms x B
(docs/sources.md#kimi-b200), and the calibrated napkin elsewhere, the same truth for every policy;
infertune does not get that line, it learns its own from the pods' metrics. Policies run in up to two processes (this
machine has two cores); each rebuilds the traffic from the seed, so all see the same requests.
"""

from __future__ import annotations

import multiprocessing
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from infertune.errors import UserError
from infertune.model import LinearFit
from infertune.planner.types import Layout
from infertune_lab.bench.actuation import FleetPoint
from infertune_lab.bench.capacity import CapacitySweep
from infertune_lab.bench.cases import BenchCase, build
from infertune_lab.bench.keda_slo import KedaSlo
from infertune_lab.bench.metrics import PolicyResult
from infertune_lab.bench.oracle import Window, peak_demand, schedule, static_layout
from infertune_lab.bench.policies import HpaKv, KedaQueue, Oracle, Policy, Static
from infertune_lab.bench.runner import PolicyRun, RunSetup, run_policy
from infertune_lab.bench.tuned import Infertune, bench_resource, slo_of
from infertune_lab.sim import ReplicaConfig

POLICIES = ("infertune", "static", "hpa-kv", "keda-queue", "keda-slo", "oracle")
HAND_PICKED = (4, 8)  # the load test's hand pick: TP4, max-num-seqs 8
SEED_000_TP8 = LinearFit(0.0052, 0.00165, 1.0, 0, 1, 64)
POOL_GPUS = 64

Progress = Callable[[str], None]


def stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


@dataclass(frozen=True)
class Options:
    seed: int = 0
    pool_gpus: int = POOL_GPUS
    startup_seconds: float | None = None  # None: the example resource's spec.engine.startupSeconds
    duration: float | None = None  # None: the scenario's own
    trace: Path | None = None
    rate_multiplier: float | None = None
    policies: tuple[str, ...] = POLICIES
    processes: int = 2


@dataclass(frozen=True)
class ScenarioResult:
    name: str
    note: str
    duration: float
    load_seconds: float
    pool_gpus: int
    results: dict[str, PolicyResult]
    timelines: dict[str, tuple[FleetPoint, ...]]
    windows: tuple[Window, ...] = field(default=())
    wall_seconds: float = 0.0


def _replica(model: str, gpu: str) -> ReplicaConfig:
    return ReplicaConfig(model=model, gpu=gpu, fits={8: SEED_000_TP8})


def _policies(names: Sequence[str], setup: RunSetup, sweep: CapacitySweep, windows: Sequence[Window],
              tps: Sequence[int], pool_gpus: int, arrivals: Sequence[float]) -> list[Policy]:
    case = setup.case
    picked = sweep.measure(case.shape_at(0.0), *HAND_PICKED)
    first = Layout(*HAND_PICKED, static_layout(picked, windows[:1], pool_gpus).replicas)
    max_replicas = pool_gpus // HAND_PICKED[0]
    first_demand = peak_demand(arrivals, 0.0, windows[0].end)
    resource = bench_resource(pool_gpus, setup.load_seconds, first_demand)
    build_one: dict[str, Callable[[], Policy]] = {
        "infertune": lambda: Infertune(resource),
        "static": lambda: Static(static_layout(picked, windows, pool_gpus)),
        "hpa-kv": lambda: HpaKv(first, max_replicas),
        "keda-queue": lambda: KedaQueue(first, max_replicas),
        "keda-slo": lambda: KedaSlo(first, max_replicas, setup.slo),
        "oracle": lambda: Oracle(windows, setup.load_seconds),
    }
    return [build_one[n]() for n in names]


def _run(job: tuple[RunSetup, Policy]) -> tuple[str, PolicyRun]:
    setup, policy = job
    return policy.name, run_policy(setup, policy)


def run_scenario(name: str, options: Options, progress: Progress = stderr) -> ScenarioResult:
    wall = time.perf_counter()
    unknown = [p for p in options.policies if p not in POLICIES]
    if unknown:
        raise UserError(f"unknown policy {unknown[0]!r}; known: {', '.join(POLICIES)}")
    resolved = bench_resource(options.pool_gpus, options.startup_seconds).resolved()
    load = options.startup_seconds or float(resolved.spec.engine.startup_seconds)
    slo = slo_of(resolved)
    tps = resolved.request.tp_sizes
    sweep = CapacitySweep(_replica(resolved.model.name, resolved.gpu.name), slo)
    case: BenchCase = build(name, sweep, tps, options.pool_gpus, options.seed, options.duration, options.trace,
                            options.rate_multiplier)
    progress(f"[{case.name}] {case.note}")
    arrivals = case.arrivals()
    windows = schedule(case, sweep, tps, options.pool_gpus, max(900.0, case.duration / 24), arrivals)
    price = float(resolved.request.price_per_gpu_hour or 0.0)
    setup = RunSetup(case, sweep.base, load, slo, price, options.pool_gpus)
    policies = _policies(options.policies, setup, sweep, windows, tps, options.pool_gpus, arrivals)
    progress(f"[{case.name}] {len(arrivals):,} requests, model load {load:g} s, sweep and schedule "
             f"{time.perf_counter() - wall:.1f} s; running {', '.join(p.name for p in policies)}")
    runs: dict[str, PolicyRun] = {}
    jobs = [(setup, p) for p in policies]
    if options.processes > 1 and len(jobs) > 1:
        with multiprocessing.get_context("fork").Pool(min(options.processes, len(jobs))) as pool:
            for policy_name, run in pool.imap_unordered(_run, jobs):
                runs[policy_name] = run
                progress(f"[{case.name}] {policy_name}: {run.result.wall_seconds:.1f} s wall")
    else:
        for job in jobs:
            policy_name, run = _run(job)
            runs[policy_name] = run
            progress(f"[{case.name}] {policy_name}: {run.result.wall_seconds:.1f} s wall")
    ordered = [p.name for p in policies]
    return ScenarioResult(case.name, case.note, case.duration, load, options.pool_gpus,
                          {n: runs[n].result for n in ordered}, {n: runs[n].timeline for n in ordered},
                          tuple(windows), time.perf_counter() - wall)
