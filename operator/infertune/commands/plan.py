"""`infertune plan`: every candidate layout with its predictions and verdict, and the choice."""

from __future__ import annotations

import argparse
import math
from dataclasses import asdict, replace
from typing import Any

from rich.console import Console
from rich.table import Table

from infertune.api.quantities import format_figure
from infertune.api.schema import (
    CONCURRENCY_MAX,
    CONTEXT_TOKENS_MAX,
    POOL_GPUS_MAX,
    PRICE_PER_GPU_HOUR_MAX,
    REQUESTS_PER_SECOND_MAX,
)
from infertune.commands._inputs import (
    SAMPLE_PASS_MS_MAX,
    SAMPLE_PASS_MS_MIN,
    check_above_token_floor,
    check_tp,
    dump_json,
    number,
    parse_int_list,
    path,
    plain_floats,
    plot_file,
    read_samples,
    resolve_model,
)
from infertune.commands.render import resolve_file
from infertune.errors import UserError
from infertune.model import LinearFit, Workload, load_gpu, workload_preset
from infertune.model.passfit import SampleSet
from infertune.model.perf import AnyFit
from infertune.planner import Candidate, Plan, PlanRequest, SloTarget, plan

SHOWN_CONCURRENCY = {1, 2, 4, 8, 12, 16, 24, 32, 36, 40, 48, 64, 96, 128, 192, 256}
MAX_TOKENS = CONTEXT_TOKENS_MAX  # a prompt or answer longer than any model's context
# A million requests per second is more than any pool this command sizes for (64 replicas of the smallest
# model each serve a few hundred); beyond it the answer would be a shortfall of billions of GPUs.
# A spread of contexts below a thousandth of the mean is no spread a trace can show; one of 1e-320 underflowed
# in the planner's arithmetic and printed numpy's overflow warning.
CONTEXT_CV_MIN = 0.001


# The TP a --fit or --samples was measured at when --fit-tp does not say: the Kimi B200 load test's.
DEFAULT_FIT_TP = 8
# Flags that say what a resource given with -f already says: with -f they would be ignored, so they
# are refused. The measurements (--samples or --fit, --demand-rps) apply on top of the resource.
DESCRIBE_THE_DEPLOYMENT = ("model", "gpu", "tp", "workload", "prompt_tokens", "cached_fraction", "output_tokens",
                           "context_cv", "min_stream_tps", "max_ttft", "price_per_gpu_hour", "pool_gpus",
                           "max_concurrency", "kv_headroom")


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser("plan", help="choose TP, max concurrency and replicas for an SLA")
    p.add_argument("-f", "--file", type=path, help="an InferenceDeployment YAML instead of the flags below")
    p.add_argument("--policy", type=path, help="with -f: the ServingPolicy YAML its policyRef names")
    p.add_argument("--config-json", type=path, help="with -f: config.json for a spec.model.configMapRef")
    p.add_argument("--model", default="kimi-k2.6", help="catalog name or a Hugging Face config.json")
    p.add_argument("--gpu", default="b200")
    p.add_argument("--tp", default="1,2,4,8", help="allowed tensor-parallel sizes")
    p.add_argument("--workload", default="coding-agent", help="coding-agent, chat or batch")
    p.add_argument("--prompt-tokens", type=number(0, MAX_TOKENS, above=True),
                   help="mean prompt tokens (overrides --workload)")
    # No default: without --prompt-tokens a preset's cached share is its own, and one given would be ignored.
    p.add_argument("--cached-fraction", type=number(0, 0.999), default=None,
                   help="share of --prompt-tokens served from cache (default 0)")
    p.add_argument("--output-tokens", type=number(0, MAX_TOKENS, above=True), help="mean generated tokens")
    p.add_argument("--context-cv", type=_context_cv,
                   help="spread of a stream's context, sd/mean (default: the workload's; 0: every context "
                        "the mean, as the load test's averages assume)")
    p.add_argument("--min-stream-tps", type=number(0, 100_000, above=True), help="SLO: minimum decode tok/s per stream")
    p.add_argument("--max-ttft", type=number(0, 3600, above=True), help="SLO: maximum TTFT in seconds")
    p.add_argument("--demand-rps", type=number(0, REQUESTS_PER_SECOND_MAX),
                   help="requests per second to size replicas for")
    p.add_argument("--price-per-gpu-hour", type=number(0, PRICE_PER_GPU_HOUR_MAX, above=True))
    p.add_argument("--pool-gpus", type=number(1, POOL_GPUS_MAX, integer=True),
                   help=f"GPUs in the node pool (at most {POOL_GPUS_MAX:,}, as spec.hardware.poolGpus)")
    p.add_argument("--max-concurrency", type=number(1, CONCURRENCY_MAX, integer=True), default=64)
    p.add_argument("--kv-headroom", type=number(0, 0.9), default=0.10, help="fraction of the KV pool kept free")
    p.add_argument("--fit", help="measured line INTERCEPT_MS,SLOPE_MS for --fit-tp "
                                 "(the Kimi B200 load test's: 5.2,1.65)")
    p.add_argument("--samples", help="CSV batch,per_pass_ms[,context_tokens] measured at --fit-tp")
    # No default here: given without --fit or --samples it would be ignored (see _check_fit_tp).
    p.add_argument("--fit-tp", type=number(1, 64, integer=True), default=None,
                   help=f"the TP the fit or samples were measured at (default {DEFAULT_FIT_TP})")
    p.add_argument("--all", action="store_true", help="show every candidate, not a sample of them")
    p.add_argument("--plot", help="write a PNG of the curve with the regions, the cliff and the choice")
    p.add_argument("--output", choices=("table", "json"), default="table")
    p.set_defaults(func=run, deployment_defaults={dest: p.get_default(dest) for dest in DESCRIBE_THE_DEPLOYMENT})


def _context_cv(text: str) -> float:
    """0 (every context the mean), or a spread from CONTEXT_CV_MIN to 10."""
    value: float = number(0, 10)(text)
    if 0 < value < CONTEXT_CV_MIN:
        raise argparse.ArgumentTypeError(f"expected 0 (every context the mean) or a number from {CONTEXT_CV_MIN:g} "
                                         f"to 10, got {text!r}")
    return value


_context_cv.__name__ = "number"  # what argparse calls the type in its messages


def _workload(args: argparse.Namespace) -> Workload:
    workload = _mean_workload(args)
    if args.context_cv is None:
        return workload
    return replace(workload, context_cv=args.context_cv)


def _mean_workload(args: argparse.Namespace) -> Workload:
    if args.prompt_tokens is None and args.output_tokens is None:
        if args.cached_fraction is not None:  # planned exactly as without it
            raise UserError(f"--cached-fraction: goes with --prompt-tokens and --output-tokens; the --workload preset "
                            f"({args.workload}) has its own cached share")
        return workload_preset(args.workload)
    if args.prompt_tokens is None or args.output_tokens is None:
        raise UserError("--prompt-tokens and --output-tokens go together")
    cached = args.prompt_tokens * (args.cached_fraction or 0.0)
    return Workload(args.prompt_tokens - cached, cached, args.output_tokens)


def _fits(args: argparse.Namespace) -> dict[int, AnyFit]:
    if args.fit and args.samples:
        raise UserError("give --fit or --samples, not both")
    if args.fit:
        written = plain_floats(args.fit, 2)
        if written is None:
            raise UserError(f"--fit: expected INTERCEPT_MS,SLOPE_MS, got {args.fit!r}")
        a_ms, b_ms = written
        # A slope of 0 is batching for free: refused in samples and load tests alike, it planned the largest
        # batch the KV holds.
        if not (SAMPLE_PASS_MS_MIN <= a_ms < 1e5 and 0 < b_ms < 1e5):
            raise UserError(f"--fit: the intercept must be at least {SAMPLE_PASS_MS_MIN:g} ms (no pass is shorter) "
                            f"and the slope above 0 ms a stream (a pass takes longer with more streams), "
                            f"got {args.fit!r}")
        return {_fit_tp(args): LinearFit(a_ms / 1e3, b_ms / 1e3, 1.0, 0, 1.0, float(args.max_concurrency))}
    if args.samples:
        # The planner fits the napkin's terms to them (model/passfit.py); a row without context_tokens
        # stands at the workload's context.
        samples = read_samples(args.samples)
        contexts = samples.context_tokens or (0.0,) * len(samples.batches)
        return {_fit_tp(args): SampleSet(samples.batches, samples.seconds, contexts, (1.0,) * len(samples.batches))}
    return {}


def _fit_tp(args: argparse.Namespace) -> int:
    return DEFAULT_FIT_TP if args.fit_tp is None else int(args.fit_tp)


def _check_fit_tp(args: argparse.Namespace, request: PlanRequest) -> PlanRequest:
    """A fit measured at a TP the plan does not consider would be dropped without a word, and one faster
    than the model can run at that TP would be planned on; a --fit-tp with no fit was ignored the same way."""
    if not (args.fit or args.samples):
        if args.fit_tp is not None:
            raise UserError(f"--fit-tp: says where --fit or --samples was measured, and neither is given, so TP"
                            f"{args.fit_tp} would be ignored")
        return request
    fit_tp = _fit_tp(args)
    if fit_tp not in request.tp_sizes:
        raise UserError(f"--fit-tp: {fit_tp} is not one of the TP sizes planned "
                        f"({', '.join(str(t) for t in request.tp_sizes)}), so the fit would be ignored")
    given = request.fits[fit_tp]
    assert isinstance(given, SampleSet | LinearFit)  # what `_fits` reads from the flags
    if isinstance(given, LinearFit):
        _check_fit_in_range(args.fit, given, request.concurrency_max)
    fastest = min(given.seconds) if isinstance(given, SampleSet) else given.per_pass(1.0)
    check_above_token_floor(fastest, request.model, request.gpu, fit_tp, "--fit" if args.fit else "--samples")
    return request


def _check_fit_in_range(written: str, fit: LinearFit, concurrency_max: int) -> None:
    """The line must predict a pass a decode step can take (PASS_MS_RANGE, as `fit` checks its predictions)
    up to the largest batch planned: `--fit 99999,1` planned on passes of 100 s, 0.0 tok/s a stream."""
    slowest_ms = fit.per_pass(float(concurrency_max)) * 1e3
    if slowest_ms > SAMPLE_PASS_MS_MAX:
        raise UserError(f"--fit: {written} predicts a pass of {slowest_ms:,.0f} ms at batch {concurrency_max}, the "
                        f"largest planned; a decode step takes {SAMPLE_PASS_MS_MIN:g}..{SAMPLE_PASS_MS_MAX:,.0f} ms")


def _flag(dest: str) -> str:
    return "--" + dest.replace("_", "-")


def request_from_args(args: argparse.Namespace) -> PlanRequest:
    if args.file:
        given = [dest for dest in DESCRIBE_THE_DEPLOYMENT if getattr(args, dest) != args.deployment_defaults[dest]]
        if given:
            raise UserError(f"{_flag(given[0])}: the resource given with -f says this; edit the resource, or "
                            "drop -f to plan from the flags")
        _, resolved = resolve_file(args)
        request = resolved.request
        demand = request.demand_rps if args.demand_rps is None else args.demand_rps
        return _check_fit_tp(args, replace(request, demand_rps=demand, fits={**request.fits, **_fits(args)}))
    for dest in ("policy", "config_json"):
        if getattr(args, dest) is not None:
            raise UserError(f"{_flag(dest)}: goes with -f FILE (the resource whose policyRef or configMapRef it "
                            "stands for)")
    model, tp_sizes = resolve_model(args.model), parse_int_list(args.tp, "--tp")
    check_tp(model, tp_sizes, "--tp")
    return _check_fit_tp(args, PlanRequest(
        model=model, gpu=load_gpu(args.gpu), workload=_workload(args),
        slo=SloTarget(args.min_stream_tps, args.max_ttft), tp_sizes=tp_sizes,
        concurrency_max=args.max_concurrency, pool_gpus=args.pool_gpus, kv_headroom=args.kv_headroom,
        price_per_gpu_hour=args.price_per_gpu_hour, demand_rps=args.demand_rps, fits=_fits(args),
    ))


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None


def candidate_json(c: Candidate) -> dict[str, Any]:
    return {
        "tensor_parallel_size": c.tp, "max_num_seqs": c.max_num_seqs, "per_stream_tps": c.per_stream_tps,
        "ttft_seconds": c.ttft_seconds, "cost_per_million_tokens": _finite(c.cost_per_million_tokens),
        "cost_per_million_output_tokens": _finite(c.cost_per_million_output_tokens),
        "processed_tps": c.processed_tps, "sustainable_rate": c.sustainable_rate,
        "kv_working_set_fraction": _finite(c.kv_working_set_fraction), "kv_tail_fraction": _finite(c.kv_tail_fraction),
        "kv_risk": _finite(c.kv_risk),
        "cliff_concurrency": _finite(c.cliff_concurrency), "region": c.region.value,
        "pass_source": c.pass_source, "per_pass_ms": c.per_pass_seconds * 1e3,
        "per_pass_low_ms": c.per_pass_low_seconds * 1e3, "per_pass_high_ms": c.per_pass_high_seconds * 1e3,
        "judged_pessimistic": c.pessimistic, "feasible": c.feasible, "reason": c.reason,
    }


def plan_json(result: Plan) -> dict[str, Any]:
    choice = None
    if result.choice is not None and result.layout is not None:
        choice = {k: v for k, v in candidate_json(result.choice).items()
                  if k in ("tensor_parallel_size", "max_num_seqs", "per_stream_tps", "ttft_seconds",
                           "cost_per_million_tokens", "sustainable_rate", "region")}
        choice["replicas"] = result.layout.replicas
    return {
        "feasible": serves(result), "reason": result.reason, "choice": choice,
        "closest": candidate_json(result.closest) if result.closest else None,
        "demand_rps": result.demand_rps, "capacity_shortfall_gpus": result.capacity_shortfall_gpus,
        "workload": asdict(result.workload),
        "candidates": [candidate_json(c) for c in result.candidates()],
    }


def serves(result: Plan) -> bool:
    """Feasible as a user means it: a layout exists and the pool can serve the demand with it."""
    return result.feasible and result.capacity_shortfall_gpus == 0


def run(args: argparse.Namespace) -> int:
    plot_file("--plot", args.plot)
    request = request_from_args(args)
    if args.plot:
        try:
            from infertune.commands._plan_plot import plot_plan
        except ImportError:
            raise UserError("--plot needs matplotlib: pip install 'infertune[plot]'") from None
    result = plan(request, None, now=0.0)
    if args.plot:
        plot_plan(result, request, args.plot)
    if args.output == "json":
        print(dump_json(plan_json(result)))
        return 0 if serves(result) else 1
    _print_table(result, show_all=args.all)
    return 0 if serves(result) else 1


def _print_table(result: Plan, show_all: bool) -> None:
    console = Console()
    table = Table("TP", "max seqs", "tok/s/stream", "TTFT s", "KV ws", "region", "$/M tok", "verdict")
    chosen = (result.choice.tp, result.choice.max_num_seqs) if result.choice else None
    for c in result.candidates():
        key = (c.tp, c.max_num_seqs)
        if not (show_all or c.max_num_seqs in SHOWN_CONCURRENCY or key == chosen):
            continue
        style = "bold green" if key == chosen else ("" if c.feasible else "dim")
        figures = (format_figure(c.per_stream_tps, ".1f"), format_figure(c.ttft_seconds, ".2f"),
                   format_figure(c.kv_working_set_fraction, ".0%"))
        table.add_row(str(c.tp), str(c.max_num_seqs), *figures, c.region.value,
                      format_figure(c.cost_per_million_tokens, ".3f"),
                      ("CHOSEN" if key == chosen else c.reason.split(":")[0]), style=style)
    console.print(table)
    if serves(result) and result.layout is not None:
        console.print(f"[bold]choice:[/] {result.reason}")
    else:
        console.print(f"[bold red]infeasible:[/] {result.reason}")
