"""`infertune fit`: fits per_pass(B) = a + b*B to a load test's samples and predicts other batches."""

from __future__ import annotations

import argparse
import json
from typing import Any

from rich.console import Console
from rich.table import Table

from infertune.commands._inputs import parse_int_list, read_samples
from infertune.errors import UserError
from infertune.model import FitError, fit_per_pass


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser("fit", help="fit the per-pass line to load-test samples")
    p.add_argument("--samples", required=True, help="CSV with columns batch,per_pass_ms[,context_tokens]")
    p.add_argument("--predict", default="1,8,16,32,64", help="batch sizes to predict at (comma-separated)")
    p.add_argument("--output", choices=("table", "json"), default="table")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    samples = read_samples(args.samples)
    try:
        fit = fit_per_pass(samples.batches, samples.seconds)
    except FitError as exc:
        raise UserError(f"{args.samples}: {exc}") from None
    batches = parse_int_list(args.predict, "--predict")
    predictions = [
        {"batch": b, "per_pass_ms": fit.per_pass(b) * 1e3, "per_stream_tps": 1.0 / fit.per_pass(b)} for b in batches
    ]
    result = {
        "intercept_ms": fit.intercept_s * 1e3, "slope_ms": fit.slope_s * 1e3, "r2": fit.r2,
        "samples": fit.samples, "predictions": predictions,
    }
    if args.output == "json":
        print(json.dumps(result, indent=2))
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
