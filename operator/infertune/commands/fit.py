"""`infertune fit`: fits per-pass time to a load test's samples and predicts other batch sizes.

Without `--model` it is the plain line per_pass(B) = a + b x B. With `--model` (and `--gpu`, `--tp`) it
is the physics fit (model/passfit.py): the napkin's terms with fitted coefficients, each prediction
with its interval and whether the samples cover it ("fit") or the fit extrapolates ("fit+napkin").
"""

from __future__ import annotations

import argparse
import math
import statistics
from typing import Any

from rich.console import Console
from rich.table import Table

from infertune.api.schema import CONTEXT_TOKENS_MAX
from infertune.commands._inputs import (
    SAMPLE_BATCH_MAX,
    SAMPLE_PASS_MS_MAX,
    SAMPLE_PASS_MS_MIN,
    Samples,
    check_above_token_floor,
    check_tp,
    dump_json,
    number,
    parse_int_list,
    read_samples,
    resolve_model,
)
from infertune.errors import UserError
from infertune.model import FitError, fit_per_pass, load_gpu
from infertune.model.passfit import PassFit, fit_pass

DEFAULT_GPU, DEFAULT_TP = "b200", 8


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser("fit", help="fit per-pass time to load-test samples")
    p.add_argument("--samples", required=True, help="CSV with columns batch,per_pass_ms[,context_tokens]")
    p.add_argument("--predict", default="1,8,16,32,64", help="batch sizes to predict at (comma-separated)")
    p.add_argument("--model", help="catalog name or config.json: fit the napkin's terms instead of a line")
    p.add_argument("--gpu", default=None, help=f"catalog GPU name (with --model; default {DEFAULT_GPU})")
    p.add_argument("--tp", type=number(1, 64, integer=True), default=None,
                   help=f"tensor-parallel size the samples were measured at (with --model; default {DEFAULT_TP})")
    p.add_argument("--context-tokens", type=number(0, CONTEXT_TOKENS_MAX, above=True),
                   help="tokens each stream attends over, for samples without a context_tokens column and for "
                        "the predictions (default: the samples' median context)")
    p.add_argument("--output", choices=("table", "json"), default="table")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    samples = read_samples(args.samples)
    batches = parse_int_list(args.predict, "--predict", high=SAMPLE_BATCH_MAX)
    if args.model is None:
        given = [flag for flag, value in (("--gpu", args.gpu), ("--tp", args.tp)) if value is not None]
        if given:  # the line fit is the samples' own; the GPU and TP would be ignored without a word
            raise UserError(f"{given[0]}: goes with --model (the napkin's terms for that GPU and TP); the line fit "
                            "without it reads only the samples")
        return _line(args, samples, batches)
    return _physics(args, samples, batches)


def _line(args: argparse.Namespace, samples: Samples, batches: tuple[int, ...]) -> int:
    try:
        fit = fit_per_pass(samples.batches, samples.seconds)
    except FitError as exc:
        raise UserError(f"{args.samples}: {exc}") from None
    predictions = [
        {"batch": b, "per_pass_ms": fit.per_pass(b) * 1e3, "per_stream_tps": 1.0 / fit.per_pass(b)} for b in batches
    ]
    _physical(args.samples, [(p["batch"], p["per_pass_ms"]) for p in predictions])
    result = {
        "intercept_ms": fit.intercept_s * 1e3, "slope_ms": fit.slope_s * 1e3, "r2": fit.r2,
        "samples": fit.samples, "predictions": predictions,
    }
    if args.output == "json":
        print(dump_json(result))
        return 0
    console = Console()
    console.print(f"per_pass(B) = {result['intercept_ms']:.2f} ms + {result['slope_ms']:.3f} ms x B   "
                  f"(R² {fit.r2:.3f}, {fit.samples} samples, B {fit.batch_min:g}..{fit.batch_max:g})")
    table = Table("batch", "per-pass ms", "tok/s per stream", "aggregate tok/s")
    for p in predictions:
        note = "" if fit.covers(p["batch"]) else " (extrapolated)"
        table.add_row(f"{p['batch']}{note}", f"{p['per_pass_ms']:.1f}", f"{p['per_stream_tps']:.1f}",
                      f"{p['per_stream_tps'] * p['batch']:.0f}")
    console.print(table)
    return 0


_BOUND_SLACK = 1e-3


def _physical(path: str, predictions: list[tuple[float, float]]) -> None:
    """A fit that predicts a pass no engine runs is not one: samples whose pass time falls as the batch
    grows extrapolate a line below zero (tok/s negative or infinite), and a few samples that jump a
    thousandfold between neighbouring batches fit a line of no time or of minutes. The bounds are the
    samples' own (PASS_MS_RANGE): what a decode step can take."""
    # A line through samples at a bound lands a rounding error past it: that is the bound, not past it.
    low, high = SAMPLE_PASS_MS_MIN * (1 - _BOUND_SLACK), SAMPLE_PASS_MS_MAX * (1 + _BOUND_SLACK)
    for batch, per_pass_ms in predictions:
        if not (math.isfinite(per_pass_ms) and low <= per_pass_ms <= high):
            raise UserError(f"{path}: the fit predicts a pass of {per_pass_ms:.3g} ms at batch {batch:g}, outside "
                            f"the {SAMPLE_PASS_MS_MIN:g}..{SAMPLE_PASS_MS_MAX:,.0f} ms a decode step takes; check "
                            "that per_pass_ms grows with batch (columns batch,per_pass_ms), or predict at batches "
                            "nearer the samples'")


def _contexts(args: argparse.Namespace, samples: Samples) -> tuple[list[float], float]:
    """Each sample's context and the context to predict at."""
    given = args.context_tokens
    if samples.context_tokens is None:
        if given is None:
            raise UserError(f"{args.samples}: no context_tokens column; give --context-tokens (the tokens each "
                            "stream attends over: prompt plus half the answer)")
        return [given] * len(samples.batches), given
    contexts = [c if c > 0 else (given or 0.0) for c in samples.context_tokens]
    if any(c <= 0 for c in contexts):
        raise UserError(f"{args.samples}: a row has no context_tokens; give --context-tokens for those rows")
    return contexts, given if given is not None else statistics.median(contexts)


def _physics(args: argparse.Namespace, samples: Samples, batches: tuple[int, ...]) -> int:
    model, gpu, tp = resolve_model(args.model), load_gpu(args.gpu or DEFAULT_GPU), args.tp or DEFAULT_TP
    check_tp(model, (tp,), "--tp")
    check_above_token_floor(min(samples.seconds), model, gpu, tp, args.samples)
    contexts, at = _contexts(args, samples)
    if len(set(samples.batches)) < 2:
        # The fit would be the napkin's proportions scaled to one point (R² about 0): the calibration the
        # planner takes from such samples, but no fit of how a pass grows with the batch.
        raise UserError(f"{args.samples}: all samples share one batch size ({samples.batches[0]:g}): how a pass "
                        "grows with the batch is undetermined")
    try:
        fit = fit_pass(model, gpu, tp, samples.batches, samples.seconds, contexts)
    except FitError as exc:
        raise UserError(f"{args.samples}: {exc}") from None
    result = physics_json(fit, model, gpu, batches, at)
    _physical(args.samples, [(p["batch"], p["per_pass_ms"]) for p in result["predictions"]])
    if args.output == "json":
        print(dump_json(result))
        return 0
    _print_physics(fit, result, at, model.name, gpu.name)
    return 0


def physics_json(fit: PassFit, model: Any, gpu: Any, batches: tuple[int, ...], context: float) -> dict[str, Any]:
    predictions = []
    for b in batches:
        mean, low, high = fit.per_pass(model, gpu, float(b), context)
        predictions.append({"batch": b, "per_pass_ms": mean * 1e3, "low_ms": low * 1e3, "high_ms": high * 1e3,
                            "source": "fit" if fit.covers(b) else "fit+napkin"})
    return {"terms": [{"name": name, "coefficient": value} for name, value in fit.terms], "r2": fit.r2,
            "predictions": predictions}


def _print_physics(fit: PassFit, result: dict[str, Any], context: float, model: str, gpu: str) -> None:
    console = Console()
    console.print(f"{model} on TP{fit.tp} x {gpu}: per_pass = Σ coefficient x the napkin's term   "
                  f"(R² {fit.r2:.3f}, {fit.samples} samples, B {fit.batch_min:g}..{fit.batch_max:g}, "
                  f"context {fit.context_min:.0f}..{fit.context_max:.0f} tokens)")
    terms = Table("term", "coefficient (1 = the napkin's)")
    for term in result["terms"]:
        terms.add_row(term["name"], f"{term['coefficient']:.3f}")
    console.print(terms)
    table = Table("batch", "per-pass ms", "interval ms", "tok/s per stream", "aggregate tok/s", "source")
    for p in result["predictions"]:
        tps = 1e3 / p["per_pass_ms"]
        table.add_row(str(p["batch"]), f"{p['per_pass_ms']:.2f}", f"{p['low_ms']:.2f}..{p['high_ms']:.2f}",
                      f"{tps:.1f}", f"{tps * p['batch']:.0f}", p["source"])
    console.print(table)
    console.print(f"predictions at {context:.0f} tokens of context per stream")
