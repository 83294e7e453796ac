"""The mis-hinted start's bound (`make bench BENCH=hinted_start`).

The bench's resource names the coding-agent ServingPolicy (its SLO) and declares the replayed traffic's
own requests as its workload hints. A resource that declares its rate but not its requests' tokens
falls back on the policy's preset: long coding-agent contexts, so on the chat scenarios its first layout,
made before any metric, runs few streams a pod on the whole pool. This prints, per chat scenario:
infertune as the bench runs it; infertune on the preset's hints alone; that preset start held for the
whole run; and hindsight's one move away from it, to the layout the scenario's heaviest window is best
served by on the same GPUs, at 60 s and at 600 s, giving one or two pods up at a time (the pool is full,
so there is no room to surge). The best of those moves estimates what a policy that starts where the
preset starts can reach by one move. And a bound no policy from that start can pass: on a full pool no
pod can serve before the first model load ends, so what the start serves until then is the most any
policy serves there, and the requests that missed their TTFT with a first token by then, on the held
start, miss under every policy (docs/bench.md, "The mis-hinted start's bound").
"""

from __future__ import annotations

import multiprocessing
from dataclasses import replace

from infertune.planner.types import Layout
from infertune_lab.bench import knobs
from infertune_lab.bench.cases import peak_demand
from infertune_lab.bench.metrics import first_load_bound
from infertune_lab.bench.policies import MoveOnce, Policy, Static
from infertune_lab.bench.runner import RunSetup, run_policy
from infertune_lab.bench.suite import Options, context, prepare
from infertune_lab.bench.tuned import Infertune, bench_resource

SCENARIOS = ("chat", "chat-load60")
MOVE_AT_SECONDS = (60.0, 600.0)
GIVEN_UP_AT_A_TIME = (1, 2)


def _shape(layout: Layout) -> str:
    return f"TP{layout.tensor_parallel_size} c={layout.max_num_seqs} x{layout.replicas}"


def _runs(name: str) -> tuple[RunSetup, list[tuple[str, Policy]]]:
    ctx = context(prepare(name, Options()))
    setup, windows = ctx.setup, ctx.windows
    ((_, infertune),) = knobs.settings("infertune", ctx, frontier=False)
    preset = bench_resource(ctx.pool_gpus, setup.load_seconds, peak_demand(ctx.arrivals, 0.0, windows[0].end))
    # The operator's own create-time plan on the preset, from a twin of the policy that runs: a started
    # reconciler (its locks) does not travel to the worker processes.
    first = Infertune(preset).start()
    heaviest = max(windows, key=lambda w: w.demand_rps).layout
    then = replace(heaviest, replicas=first.gpus // heaviest.tensor_parallel_size)
    runs: list[tuple[str, Policy]] = [("infertune (default: the resource declares the replayed requests)", infertune),
                                      ("infertune on the preset's hints alone", Infertune(preset)),
                                      (f"{_shape(first)} held (the preset's start)", Static(first))]
    for at in MOVE_AT_SECONDS:
        for given_up in GIVEN_UP_AT_A_TIME:
            runs.append((f"move to {_shape(then)} at {at:g} s, {given_up} pod(s) at a time",
                         MoveOnce(first, then, at, given_up)))
    return setup, runs


def _run(job: tuple[RunSetup, str, Policy]) -> str:
    setup, label, policy = job
    held = isinstance(policy, Static)
    run = run_policy(setup, policy, keep_records=held)
    r = run.result
    line = (f"| {label} | {r.sla_attainment_ttft:.2%} | {r.sla_attainment_tps:.2%} | {r.gpu_hours:,.1f} | "
            f"{r.relayouts} |")
    if held:
        bound = first_load_bound(run.records, r.requests, setup.slo, setup.case.warmup, setup.load_seconds)
        line += (f"\n| bound for every policy from this start (the held start's TTFT misses served within "
                 f"the first {setup.load_seconds:g} s load) | {bound:.2%} | | | |")
    return line


def run() -> None:
    for name in SCENARIOS:
        setup, runs = _runs(name)
        print(f"\n{name} ({setup.case.duration / 3600:g} h, model load {setup.load_seconds:g} s, "
              f"{setup.pool_gpus} GPUs)\n")
        print("| run | TTFT within SLA | TPS within SLA | GPU-h | re-layouts |\n|---|---:|---:|---:|---:|")
        jobs = [(setup, label, policy) for label, policy in runs]
        with multiprocessing.get_context("fork").Pool(2) as pool:
            for line in pool.imap(_run, jobs, chunksize=1):
                print(line, flush=True)


if __name__ == "__main__":
    run()
