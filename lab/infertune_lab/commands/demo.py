"""`infertune demo`: the closed loop on one machine (kmock's cluster, the fleet agent, Prometheus,
the operator) through a ramp, a 3x spike and context growth, with a live view and a report."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from pathlib import Path
from typing import Any

import structlog
from rich.console import Console

from infertune.commands._inputs import dump_json, number, path, writable_dir
from infertune_lab.demo.display import Quiet, RichView, View
from infertune_lab.demo.report import REPORT_FILES
from infertune_lab.demo.run import DemoOptions, run_demo

LOG_FILE = "operator.log"


def register(sub: Any) -> None:
    parser = sub.add_parser("demo", help="run the operator against a simulated B200 fleet and write a report")
    parser.add_argument("--fast", action="store_true", help="a shorter version of the same story (< 1 min)")
    parser.add_argument("--output", choices=("text", "json"), default="text", help="what to print at the end")
    parser.add_argument("--report", type=path, default=Path("demo-report"), help="report directory")
    parser.add_argument("--no-prometheus", dest="prometheus", action="store_false",
                        help="the operator scrapes the pods itself instead of reading Prometheus")
    parser.add_argument("--seed", type=number(0, 2**32 - 1, integer=True), default=0, help="traffic seed")
    parser.set_defaults(func=handle)


def _quiet_logs(path: Path) -> None:
    """The operator's and kopf's logs go to a file: the terminal belongs to the live view."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(path, mode="w")
    handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO)
    structlog.configure(logger_factory=structlog.stdlib.LoggerFactory(),
                        processors=[structlog.processors.add_log_level, structlog.processors.KeyValueRenderer()])


def handle(args: argparse.Namespace) -> int:
    writable_dir("--report", args.report, (LOG_FILE, *REPORT_FILES))
    _quiet_logs(args.report / LOG_FILE)
    console = Console(stderr=True)
    view: View = RichView(console) if args.output == "text" and console.is_terminal else Quiet()
    with view:
        summary, report = asyncio.run(run_demo(DemoOptions(args.fast, args.report, args.prometheus, args.seed), view))
    if args.output == "json":
        print(dump_json(summary.to_json()))
        return 0
    s = summary
    print(f"{s.scenario}: {s.requests} requests in {s.traffic_seconds:g} s of traffic ({s.wall_seconds:g} s wall), "
          f"metrics from {s.metrics_source}")
    print(f"  SLA attainment: TTFT {s.sla_attainment_ttft}, per-stream speed {s.sla_attainment_tps}")
    print(f"  past the cliff: {s.seconds_past_cliff} s, over the headroom line: {s.seconds_over_headroom} s, "
          f"preemptions: {s.preemptions}")
    print(f"  {len(s.decisions)} decisions, final layout {s.final_layout}, peak {s.peak_replicas} replicas")
    print(f"report: {report}", file=sys.stdout)
    return 0
