"""`infertune bench`: the closed-loop benchmark against HPA-, KEDA-style, static and oracle policies.

The same traffic goes through the same simulated fleet once per policy, in virtual time. Progress
goes to stderr, the table (or JSON) to stdout; `--report DIR` also writes bench.md and the plots.
Input is checked before anything runs, and nothing is written unless every run finished.
"""

from __future__ import annotations

import argparse
from typing import Any

from infertune.commands._inputs import dump_json, number, path, writable_dir
from infertune.errors import UserError
from infertune_lab.bench.cases import NAMES, RANDOM, case_name, check_duration
from infertune_lab.bench.report import document, file_names, text, write
from infertune_lab.bench.runner import DEFAULT_ROUTER
from infertune_lab.bench.suite import POLICIES, Options, ScenarioResult, run_scenario, stderr
from infertune_lab.sim.fleet import ROUTERS
from infertune_lab.sim.trace import load_trace

MAX_VIRTUAL_SECONDS = 30 * 86_400.0  # a month of traffic; more is a typo, and NaN would never end


def _policies(text: str) -> tuple[str, ...]:
    # An empty item ("static,,oracle") is a typo, as in every other list flag; a name given twice ran the
    # policy twice and printed its row twice.
    names = tuple(n.strip() for n in text.split(","))
    unknown = [n for n in names if n not in POLICIES]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"expected some of {','.join(POLICIES)}, got {text!r}")
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise argparse.ArgumentTypeError(f"{', '.join(repeated)} named more than once, got {text!r}")
    return names


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "bench", help="closed-loop benchmark: infertune vs static, HPA-, KEDA-style and oracle policies")
    p.add_argument("--scenario", choices=(*NAMES, RANDOM, "all"), default=None,
                   help="a named scenario, all of them, or random (drawn from --seed; not in all) "
                        "(default: coding-agent-day unless --trace)")
    p.add_argument("--trace", type=path, default=None,
                   help="replay a TIMESTAMP,ContextTokens,GeneratedTokens CSV instead of a scenario")
    p.add_argument("--rate-multiplier", type=number(0, 1000, above=True), default=None,
                   help="replay the trace this many times faster (default: sized for the pool)")
    p.add_argument("--duration", type=number(0, MAX_VIRTUAL_SECONDS, above=True), default=None,
                   help="scored virtual seconds (default: per scenario)")
    p.add_argument("--startup-seconds", type=number(0, 7200, above=True), default=None,
                   help="model load time for every policy (default: the example's spec.engine.startupSeconds)")
    p.add_argument("--pool-gpus", type=number(1, 100_000, integer=True), default=64,
                   help="GPUs in the pool (default 64)")
    p.add_argument("--policies", type=_policies, default=POLICIES, help=f"comma-separated, from {','.join(POLICIES)}")
    p.add_argument("--seed", type=number(0, 2**32 - 1, integer=True), default=0)
    p.add_argument("--processes", type=number(1, 64, integer=True), default=2,
                   help="policies run in parallel (default 2)")
    p.add_argument("--frontier", action="store_true",
                   help="run every policy at each setting of its own knob and report attainment against GPU-hours")
    p.add_argument("--router", choices=ROUTERS, default=DEFAULT_ROUTER,
                   help="the gateway in front of every policy's pods: session-affinity (a session's turns stay "
                        "where its prefix is cached), llm-d (its default endpoint picker: prefix, queue and "
                        f"free KV scored 3:2:2), least-outstanding or round-robin (default: {DEFAULT_ROUTER})")
    p.add_argument("--output", choices=("table", "json"), default="table")
    p.add_argument("--report", type=path, default=None,
                   help="write bench.md and bench-<scenario>.png (and -frontier.png) here")
    p.set_defaults(func=handle)


def _scenarios(args: argparse.Namespace) -> list[str]:
    if args.trace is not None:
        if args.scenario is not None:
            raise UserError("--scenario and --trace are exclusive")
        return ["trace"]
    if args.rate_multiplier is not None and args.scenario != "azure-code":
        raise UserError("--rate-multiplier applies to --trace or --scenario azure-code")
    names = list(NAMES) if args.scenario == "all" else [args.scenario or "coding-agent-day"]
    for name in names:  # before the first scenario runs for minutes
        check_duration(name, args.duration)
    return names


def handle(args: argparse.Namespace) -> int:
    names = _scenarios(args)
    # The report's files by name: a directory standing at bench.md was found only after every run, with the
    # plots already written beside it.
    reported = [case_name(name, args.trace) for name in names]
    writable_dir("--report", args.report, file_names(reported, args.frontier))
    if args.trace is not None:
        load_trace(args.trace)  # read and checked whole now: a directory or a bad row is named before any run
    options = Options(seed=args.seed, pool_gpus=args.pool_gpus, startup_seconds=args.startup_seconds,
                      duration=args.duration, trace=args.trace, rate_multiplier=args.rate_multiplier,
                      policies=args.policies, processes=max(1, args.processes), frontier=args.frontier,
                      router=args.router)
    results: list[ScenarioResult] = [run_scenario(name, options) for name in names]
    if args.output == "json":
        docs = [document(r) for r in results]
        print(dump_json(docs[0] if len(docs) == 1 else docs))
    else:
        print("\n\n".join(text(r) for r in results))
    if args.report is not None:
        for path in write(results, args.report):
            stderr(f"wrote {path}")
    total = sum(r.wall_seconds for r in results)
    stderr(f"benchmark wall time {total:.1f} s ({', '.join(f'{r.name} {r.wall_seconds:.1f} s' for r in results)})")
    return 0
