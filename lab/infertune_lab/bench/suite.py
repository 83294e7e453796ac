"""One scenario, every policy: build the case, the sweep and the schedules, run the policies (at
their default settings, or with `frontier` at every setting of their knob, bench.knobs).

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
from infertune_lab.bench import knobs
from infertune_lab.bench.actuation import FleetPoint
from infertune_lab.bench.capacity import CapacitySweep
from infertune_lab.bench.cases import BenchCase, build
from infertune_lab.bench.frontier import FrontierPoint
from infertune_lab.bench.knobs import Setting
from infertune_lab.bench.metrics import PolicyResult
from infertune_lab.bench.oracle import Window, schedule
from infertune_lab.bench.policies import Policy
from infertune_lab.bench.runner import DEFAULT_ROUTER, PolicyRun, RunSetup, run_policy
from infertune_lab.bench.tuned import bench_resource, slo_of
from infertune_lab.sim import ReplicaConfig, load_trace
from infertune_lab.sim.fleet import ROUTERS

POLICIES = knobs.POLICIES
SEED_000_TP8 = LinearFit(0.0052, 0.00165, 1.0, 0, 1, 64)
POOL_GPUS = 64
# A trace is sized for the pool on its mean rate (requests over its span) and its requests' mean and
# median sizes (bench.cases), each read off its rows: from n rows the rate is known to about 1/sqrt(n),
# 10% at this count, and one row gives no rate at all (its span is the padding second). A shorter trace
# is refused before the capacity sweep, which costs the same minutes whatever the trace's length.
TRACE_MIN_REQUESTS = 100

Progress = Callable[[str], None]


def stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


@dataclass(frozen=True)
class Options:
    seed: int = 0
    pool_gpus: int = POOL_GPUS
    startup_seconds: float | None = None  # None: the scenario's, else the example's spec.engine.startupSeconds
    duration: float | None = None  # None: the scenario's own
    trace: Path | None = None
    rate_multiplier: float | None = None
    policies: tuple[str, ...] = POLICIES
    processes: int = 2
    frontier: bool = False  # every setting of each policy's knob (bench.knobs), not only its default
    router: str = DEFAULT_ROUTER  # one of sim.fleet.ROUTERS


@dataclass(frozen=True)
class ScenarioResult:
    name: str
    note: str
    duration: float
    load_seconds: float
    pool_gpus: int
    results: dict[str, PolicyResult]  # each policy at its default setting
    timelines: dict[str, tuple[FleetPoint, ...]]
    windows: tuple[Window, ...] = field(default=())
    wall_seconds: float = 0.0
    frontier: dict[str, tuple[FrontierPoint, ...]] = field(default_factory=dict)  # with Options.frontier
    router: str = DEFAULT_ROUTER


def _replica(model: str, gpu: str) -> ReplicaConfig:
    return ReplicaConfig(model=model, gpu=gpu, fits={8: SEED_000_TP8})


Job = tuple[RunSetup, Setting, Policy]


def _run(job: Job) -> tuple[Setting, PolicyRun]:
    setup, setting, policy = job
    return setting, run_policy(setup, policy)


def _jobs(setup: RunSetup, built: Sequence[tuple[Setting, Policy]]) -> list[Job]:
    """Longest first, so the two processes finish together: the operator's cycle makes an
    infertune run several times the cost of any other."""
    return sorted(((setup, s, p) for s, p in built), key=lambda job: job[1].policy != "infertune")


@dataclass(frozen=True)
class Prepared:
    """A scenario ready to run: its case, and what every policy's run shares."""

    case: BenchCase
    setup: RunSetup
    sweep: CapacitySweep
    tps: tuple[int, ...]


def prepare(name: str, options: Options) -> Prepared:
    """The example resource's SLO and TP sizes, the twin's capacity sweep, and the case sized for the pool."""
    if options.trace is not None:
        _check_trace_length(options.trace)
    resolved = bench_resource(options.pool_gpus, options.startup_seconds).resolved()
    slo = slo_of(resolved)
    tps = tuple(resolved.request.tp_sizes)
    sweep = CapacitySweep.shared(_replica(resolved.model.name, resolved.gpu.name), slo)
    case: BenchCase = build(name, sweep, tps, options.pool_gpus, options.seed, options.duration, options.trace,
                            options.rate_multiplier)
    load = options.startup_seconds or case.load_seconds or float(resolved.spec.engine.startup_seconds)
    price = float(resolved.request.price_per_gpu_hour or 0.0)
    return Prepared(case, RunSetup(case, sweep.base, load, slo, price, options.pool_gpus, options.router), sweep, tps)


def _check_trace_length(path: Path) -> None:
    count = len(load_trace(path))
    if count < TRACE_MIN_REQUESTS:
        raise UserError(f"{path}: {count:,} request{'' if count == 1 else 's'}, too few to size a pool on: the bench "
                        f"needs at least {TRACE_MIN_REQUESTS} to read a trace's rate and request sizes "
                        "(`infertune simulate replay --trace` replays a shorter one)")


def context(prepared: Prepared) -> knobs.Context:
    """What every policy's settings are built from: the case's arrivals and the hindsight windows, in
    hour-long windows for a day or more (a week too) and quarters of an hour for shorter runs."""
    case, setup = prepared.case, prepared.setup
    arrivals = case.arrivals()
    window = min(3_600.0, max(900.0, case.duration / 24))
    windows = schedule(case, prepared.sweep, prepared.tps, setup.pool_gpus, window, arrivals)
    return knobs.Context(setup, prepared.sweep, windows, setup.pool_gpus, arrivals)


def run_scenario(name: str, options: Options, progress: Progress = stderr) -> ScenarioResult:
    wall = time.perf_counter()
    if options.router not in ROUTERS:
        raise UserError(f"unknown router {options.router!r}; known: {', '.join(ROUTERS)}")
    unknown = [p for p in options.policies if p not in POLICIES]
    if unknown:
        raise UserError(f"unknown policy {unknown[0]!r}; known: {', '.join(POLICIES)}")
    prepared = prepare(name, options)
    case, setup = prepared.case, prepared.setup
    load = setup.load_seconds
    progress(f"[{case.name}] {case.note}")
    ctx = context(prepared)
    arrivals, windows = ctx.arrivals, ctx.windows
    built = [b for name in options.policies for b in knobs.settings(name, ctx, options.frontier)]
    progress(f"[{case.name}] {len(arrivals):,} requests, model load {load:g} s, sweep and schedule "
             f"{time.perf_counter() - wall:.1f} s; running {len(built)} runs of "
             f"{', '.join(options.policies)} behind the {options.router} router")
    runs: dict[tuple[str, str], PolicyRun] = {}
    jobs = _jobs(setup, built)

    def done(setting: Setting, run: PolicyRun) -> None:
        runs[setting.key] = run
        progress(f"[{case.name}] {setting.policy} ({setting.label}): {run.result.wall_seconds:.1f} s wall")

    if options.processes > 1 and len(jobs) > 1:
        with multiprocessing.get_context("fork").Pool(min(options.processes, len(jobs))) as pool:
            for setting, run in pool.imap_unordered(_run, jobs, chunksize=1):
                done(setting, run)
    else:
        for job in jobs:
            done(*_run(job))
    defaults = {s.policy: runs[s.key] for s, _ in built if s.default}
    frontier = {name: tuple(FrontierPoint(s.label, runs[s.key].result, s.default) for s, _ in built if s.policy == name)
                for name in options.policies} if options.frontier else {}
    return ScenarioResult(case.name, case.note, case.duration, load, options.pool_gpus,
                          {n: defaults[n].result for n in options.policies},
                          {n: defaults[n].timeline for n in options.policies},
                          tuple(windows), time.perf_counter() - wall, frontier, options.router)
