"""`infertune run`: starts the operator (kubeconfig or in-cluster), with one Prometheus poller for
every InferenceDeployment, /metrics for the operator itself, a liveness endpoint, and either kopf
peering (`--peering NAME`: only one replica acts) or none. These are the flags the Helm chart's
Deployment and the image's CMD pass (charts/infertune/templates/deployment.yaml, Dockerfile)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
import time
import urllib.parse
from pathlib import Path
from typing import Any

import kopf
import structlog

from infertune.api.formats import DATA_KEY, shown
from infertune.api.names import is_namespace_name, is_object_name
from infertune.commands._inputs import cluster_client, number, written_number
from infertune.controller import OperatorContext, build_registry
from infertune.errors import UserError
from infertune.observe.http import AllowList
from infertune.observe.promql import DEFAULT_METRICS_WINDOW, range_seconds

# Where a pod's own namespace is when the downward API did not set POD_NAMESPACE.
SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
LOG_LEVELS = ("debug", "info", "warning", "error")
# The timer and the poll: faster than ten a second would hammer the API server and Prometheus, slower
# than once a day would never tune (NaN, compared with either, fails both).
INTERVAL_MIN_SECONDS = 0.1
INTERVAL_MAX_SECONDS = 86_400.0
# The key of the token in --prometheus-token-secret unless --prometheus-token-key names another.
DEFAULT_TOKEN_KEY = "token"


def register(sub: Any) -> None:
    parser = sub.add_parser("run", help="run the operator against the cluster in KUBECONFIG or in-cluster")
    parser.add_argument("--namespace", action="append", default=[], metavar="NS",
                        help="watch only this namespace; repeat for more (default: every namespace)")
    peering = parser.add_mutually_exclusive_group()
    peering.add_argument("--peering", metavar="NAME",
                         help="coordinate replicas through the KopfPeering (with --namespace) or ClusterKopfPeering "
                              "NAME, which must exist: one replica acts, the others stand by")
    peering.add_argument("--standalone", action="store_true", help="no peering, a single replica (the default)")
    parser.add_argument("--priority", type=number(integer=True),
                        help="peering priority, highest acts (default: the replica that started first acts)")
    parser.add_argument("--prometheus-url", help="Prometheus for every resource without its own metrics.url")
    parser.add_argument("--allowed-prometheus-url", action="append", default=[], metavar="URL",
                        help="a URL prefix resources may name in spec.metrics.prometheus.url; repeat for more "
                             "(default: any URL)")
    parser.add_argument("--prometheus-token-secret", metavar="NAME",
                        help="Secret in the operator's own namespace (POD_NAMESPACE) holding the bearer token for "
                             "--prometheus-url; read on every poll, so a rotated token is picked up")
    parser.add_argument("--prometheus-token-key", default=None, metavar="KEY",
                        help=f"key of the token in that Secret (default: {DEFAULT_TOKEN_KEY})")
    parser.add_argument("--cycle-seconds", type=written_number(), default=30.0, help="tuning timer interval")
    parser.add_argument("--poll-seconds", type=written_number(), default=15.0, help="metrics poll interval")
    parser.add_argument("--metrics-window", default=DEFAULT_METRICS_WINDOW,
                        help="the span rates and quantiles are read over: the PromQL range (at least 4x "
                             "Prometheus' scrape interval), and for Pods sources the span of polls")
    parser.add_argument("--metrics-port", type=number(integer=True), default=9090,
                        help="the operator's own /metrics (0: off)")
    parser.add_argument("--liveness", default="http://0.0.0.0:8080/healthz", help="kopf liveness endpoint")
    parser.add_argument("--log-format", choices=("json", "plain"), default="json",
                        help="json: one object per line, for log shippers; plain: for people")
    parser.add_argument("--log-level", choices=LOG_LEVELS, default="info")
    parser.add_argument("--verbose", action="store_true", help="debug logs (same as --log-level=debug)")
    parser.set_defaults(func=handle)


def _checked(args: argparse.Namespace) -> None:
    """Every flag is checked before anything starts: one line naming the bad value, nothing changed."""
    if not all(INTERVAL_MIN_SECONDS <= s <= INTERVAL_MAX_SECONDS for s in (args.cycle_seconds, args.poll_seconds)):
        raise UserError(f"--cycle-seconds and --poll-seconds must be positive, from {INTERVAL_MIN_SECONDS:g} to "
                        f"{INTERVAL_MAX_SECONDS:g} s, got {args.cycle_seconds:g} and {args.poll_seconds:g}")
    try:
        range_seconds(args.metrics_window)
    except ValueError as exc:
        raise UserError(f"--metrics-window: {exc}") from None
    if not 0 <= args.metrics_port <= 65535:
        raise UserError(f"--metrics-port must be 0..65535, got {args.metrics_port}")
    why = _liveness_refusal(args.liveness)
    if why is not None:
        raise UserError(f"--liveness {shown(args.liveness)}: {why}")
    for ns in args.namespace:
        if not is_namespace_name(ns):
            raise UserError(f"--namespace {ns!r} is not a namespace name (lower-case DNS label)")
    if args.peering is not None and not is_object_name(args.peering):
        raise UserError(f"--peering {args.peering!r} is not an object name (lower-case DNS subdomain)")
    if args.priority is not None and args.peering is None:
        raise UserError("--priority needs --peering")
    if args.prometheus_token_secret is not None:
        if not args.prometheus_url:
            raise UserError("--prometheus-token-secret needs --prometheus-url (the token is for that Prometheus)")
        if not is_object_name(args.prometheus_token_secret):
            raise UserError(f"--prometheus-token-secret {args.prometheus_token_secret!r} is not a Secret name")
        if DATA_KEY.refusal(_token_key(args)) is not None:
            raise UserError(f"--prometheus-token-key {args.prometheus_token_key!r} is not a Secret key")
    elif args.prometheus_token_key is not None:
        raise UserError("--prometheus-token-key needs --prometheus-token-secret (the Secret the key is read from)")


def _liveness_refusal(endpoint: str) -> str | None:
    """Why kopf could not serve its liveness probe at `endpoint`, or None. kopf reads it only once the
    operator has started (an "Unsupported scheme" or a port error in its probe task), so it is read here."""
    parts = urllib.parse.urlsplit(endpoint)
    try:
        parts.port  # noqa: B018 - the property raises on a port that is not 0..65535
    except ValueError:
        return "the port must be a number from 0 to 65535"
    if parts.scheme != "http" or not parts.netloc:
        return "must be an http:// URL, e.g. http://0.0.0.0:8080/healthz"
    if not parts.path.startswith("/") or parts.query or parts.fragment:
        return "needs a path such as /healthz, and no query or fragment"
    return None


def _token_key(args: argparse.Namespace) -> str:
    return DEFAULT_TOKEN_KEY if args.prometheus_token_key is None else str(args.prometheus_token_key)


def own_namespace() -> str:
    """The namespace the operator runs in: the chart sets POD_NAMESPACE from the downward API."""
    found = os.environ.get("POD_NAMESPACE", "").strip()
    if not found and SERVICE_ACCOUNT_NAMESPACE.is_file():
        found = SERVICE_ACCOUNT_NAMESPACE.read_text().strip()
    if not found:
        raise UserError("--prometheus-token-secret: the Secret is read from the operator's own namespace; "
                         "set POD_NAMESPACE (the Helm chart does)")
    return found


def default_priority(now_ns: int | None = None) -> int:
    """Higher acts. Earlier start -> higher, so a replica that starts later (a rolling update's new pod,
    a restarted pod) stands by instead of taking over from one that is working; microseconds make
    two replicas with equal priority (which kopf pauses both of) practically impossible."""
    return -((time.time_ns() if now_ns is None else now_ns) // 1000)


def configure_logging(log_format: str, level: str) -> None:
    """kopf's records and ours, one format on stderr: JSON lines, or kopf's text and structlog's console."""
    number = getattr(logging, level.upper())
    kopf.configure(verbose=number <= logging.DEBUG,
                   log_format=kopf.LogFormat.JSON if log_format == "json" else kopf.LogFormat.FULL)
    logging.getLogger().setLevel(number)
    renderer: Any = (structlog.processors.JSONRenderer() if log_format == "json"
                     else structlog.dev.ConsoleRenderer(colors=False))
    structlog.configure(
        processors=[structlog.contextvars.merge_contextvars, structlog.processors.add_log_level,
                    structlog.processors.TimeStamper(fmt="iso"), renderer],
        wrapper_class=structlog.make_filtering_bound_logger(number),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr))


def handle(args: argparse.Namespace) -> int:
    _checked(args)
    token = None if args.prometheus_token_secret is None else (
        "Secret", own_namespace(), args.prometheus_token_secret, _token_key(args))
    configure_logging(args.log_format, "debug" if args.verbose else args.log_level)
    allowed = AllowList.parse(args.allowed_prometheus_url)
    source = None
    if args.prometheus_url:
        from infertune.observe import PrometheusSource

        source = PrometheusSource(args.prometheus_url, window=args.metrics_window)
    ctx = OperatorContext(kube=cluster_client(), source=source, poll_seconds=args.poll_seconds,
                          cycle_seconds=args.cycle_seconds, metrics_window=args.metrics_window,
                          default_token=token, allowed_urls=allowed)
    if args.metrics_port:
        try:
            ctx.telemetry.serve(args.metrics_port)
        except OSError as exc:
            raise UserError(f"--metrics-port {args.metrics_port}: cannot listen: {exc.strerror}") from None
    registry = build_registry(args.cycle_seconds)
    kopf.on.login(registry=registry)(kopf.login_via_client)
    peering: dict[str, Any] = {"standalone": True}
    if args.peering is not None:
        peering = {"standalone": False, "peering_name": args.peering,
                   "priority": default_priority() if args.priority is None else args.priority}
    # The peering record names the pod (kopf reads POD_ID; the chart sets POD_NAME).
    identity: Any = os.environ.get("POD_NAME") or None  # kopf's Identity is a NewType of str
    asyncio.run(kopf.operator(registry=registry, clusterwide=not args.namespace, namespaces=args.namespace,
                              liveness_endpoint=args.liveness, memo=kopf.Memo(ctx=ctx), identity=identity,
                              **peering))
    return 0
