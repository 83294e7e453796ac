"""`infertune run`: starts the operator (kubeconfig or in-cluster), with one Prometheus poller for
every InferenceDeployment, /metrics for the operator itself, a liveness endpoint and kopf peering."""

from __future__ import annotations

import argparse
import asyncio
import logging
from typing import Any

import kopf
import structlog

from infertune.actuate.apply import client_from_environment
from infertune.controller import OperatorContext, build_registry
from infertune.errors import UserError
from infertune.observe.http import AllowList


def _configure_logging(level: str) -> None:
    logging.basicConfig(level=getattr(logging, level.upper(), logging.INFO), format="%(message)s")
    structlog.configure(processors=[
        structlog.contextvars.merge_contextvars, structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso"), structlog.processors.JSONRenderer(),
    ])


def register(sub: Any) -> None:
    parser = sub.add_parser("run", help="run the operator against the cluster in KUBECONFIG or in-cluster")
    parser.add_argument("--prometheus-url", help="Prometheus for every resource without its own metrics.url")
    parser.add_argument("--allowed-prometheus-url", action="append", default=[], metavar="URL",
                        help="a URL prefix resources may name in spec.metrics.prometheus.url; repeat for more "
                             "(default: any URL)")
    parser.add_argument("--cycle-seconds", type=float, default=30.0, help="tuning timer interval")
    parser.add_argument("--poll-seconds", type=float, default=15.0, help="metrics poll interval")
    parser.add_argument("--metrics-window", default="1m",
                        help="PromQL range for rates and quantiles (at least 4x Prometheus' scrape interval)")
    parser.add_argument("--metrics-port", type=int, default=9090, help="the operator's own /metrics (0: off)")
    parser.add_argument("--liveness", default="http://0.0.0.0:8080/healthz", help="kopf liveness endpoint")
    parser.add_argument("--standalone", action="store_true", help="no peering (a single replica)")
    parser.add_argument("--log-level", default="info")
    parser.set_defaults(func=handle)


def handle(args: argparse.Namespace) -> int:
    if args.cycle_seconds <= 0 or args.poll_seconds <= 0:
        raise UserError("--cycle-seconds and --poll-seconds must be positive")
    _configure_logging(args.log_level)
    allowed = AllowList.parse(args.allowed_prometheus_url)
    source = None
    if args.prometheus_url:
        from infertune.observe import PrometheusSource

        source = PrometheusSource(args.prometheus_url, window=args.metrics_window)
    ctx = OperatorContext(kube=client_from_environment(), source=source, poll_seconds=args.poll_seconds,
                          cycle_seconds=args.cycle_seconds, metrics_window=args.metrics_window,
                          allowed_urls=allowed)
    if args.metrics_port:
        ctx.telemetry.serve(args.metrics_port)
    registry = build_registry(args.cycle_seconds)
    kopf.on.login(registry=registry)(kopf.login_via_client)
    asyncio.run(kopf.operator(registry=registry, clusterwide=True, standalone=args.standalone,
                              peering_name="infertune", liveness_endpoint=args.liveness,
                              memo=kopf.Memo(ctx=ctx)))
    return 0
