"""`infertune observe`: what the operator sees, per deployment and per replica, plus the fit.

This is how a user debugs "why did it decide that": the same sources, queries and fault rules
the controller uses, printed. Exit code 0 when every deployment shown is trusted, 1 when any is
not (the reason is in the output), 2 on bad input.
"""

from __future__ import annotations

import argparse
import math
import ssl
import time
from typing import Any

from rich.console import Console
from rich.table import Table

from infertune.api.observation import Observation, ReplicaObservation
from infertune.api.quantities import format_duration
from infertune.commands._inputs import dump_json, number
from infertune.errors import UserError
from infertune.model.early_warning import CliffWarning, PressurePoint, cliff_warning
from infertune.observe import (
    FitMemory,
    PodsSource,
    PodTarget,
    PrometheusSource,
    Snapshot,
    fit_to_dict,
    observation_to_dict,
    pressure_point,
)
from infertune.observe.http import TIMEOUT_MAX_SECONDS, TIMEOUT_MIN_SECONDS, FetchFailed, source_url
from infertune.observe.promql import DEFAULT_METRICS_WINDOW, range_seconds
from infertune.textfile import read_text

DEFAULT_INTERVAL = 5.0  # --source pods
DEFAULT_FIT_HISTORY = "30m"  # --source prometheus


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "observe", help="print what the operator observes: per deployment, per replica, and the fit")
    p.add_argument("--source", choices=("prometheus", "pods"), required=True)
    p.add_argument("--url", help="Prometheus base URL (--source prometheus)")
    p.add_argument("--targets", help="host:port[,...] or ns/deployment/pod=host:port (--source pods)")
    p.add_argument("--namespace", help="only this namespace (pods: the namespace of --targets)")
    p.add_argument("--deployment", help="only this deployment (pods: the deployment of --targets)")
    p.add_argument("--window", default=DEFAULT_METRICS_WINDOW,
                   help="rate window, a Prometheus duration (default %(default)s); with pods, the span of polls "
                        "read over")
    # No defaults here: each belongs to one source, and given with the other it would be ignored (see _source).
    p.add_argument("--interval", type=number(0, 3600), default=None,
                   help=f"pods: seconds between the two scrapes rates come from (default {DEFAULT_INTERVAL:g}; "
                        "0: gauges only)")
    p.add_argument("--fit-history", default=None,
                   help=f"prometheus: how far back the per-pass fit looks (default {DEFAULT_FIT_HISTORY}; e.g. 30m, "
                        "2h; 0 disables)")
    p.add_argument("--token-file", help="file holding a bearer token for Prometheus")
    p.add_argument("--ca", help="CA bundle to verify Prometheus' TLS certificate")
    p.add_argument("--insecure", action="store_true", help="skip TLS verification")
    p.add_argument("--timeout", type=number(TIMEOUT_MIN_SECONDS, TIMEOUT_MAX_SECONDS), default=10.0,
                   help="seconds per request, all of it (default 10)")
    p.add_argument("--output", choices=("table", "json"), default="table")
    p.set_defaults(func=run)


def _seconds(text: str, flag: str, zero: bool = False) -> float:
    """A PromQL range duration ("30s", "5m", "1h30m"), or "0" where `zero` allows none; one line naming
    the flag otherwise."""
    text = text.strip()
    if zero and text == "0":
        return 0.0
    try:
        return range_seconds(text)
    except ValueError as exc:
        raise UserError(f"{flag}: {exc}") from None


# Prometheus answers a range query with at most this many points per series (its API refuses more,
# "exceeded maximum resolution of 11,000 points per timeseries").
PROMETHEUS_MAX_POINTS = 11_000


def _fit_history(args: argparse.Namespace) -> float:
    """--fit-history in seconds. From Prometheus the history is read in range queries stepped by --window:
    one that needs more points than Prometheus answers would fail, and the fit would say only "none yet"."""
    if args.source != "prometheus":
        return 0.0  # the pods are read twice, now: they keep no history (a --fit-history given is refused in _source)
    written = DEFAULT_FIT_HISTORY if args.fit_history is None else args.fit_history
    history = _seconds(written, "--fit-history", zero=True)
    if history > 0:
        step = _seconds(args.window, "--window")
        if history / step > PROMETHEUS_MAX_POINTS:
            most = format_duration(PROMETHEUS_MAX_POINTS * step)
            raise UserError(f"--fit-history: at most {most} with --window {args.window.strip()} (Prometheus answers "
                            f"at most {PROMETHEUS_MAX_POINTS:,} points per series, one per --window), got "
                            f"{written.strip()}")
    return history


def _source(args: argparse.Namespace) -> PrometheusSource | PodsSource:
    # A flag of the other source would be ignored without a word (`--source prometheus --targets ...`
    # read Prometheus, not the pods named).
    # `--source pods --fit-history 2h` and `--source prometheus --interval 60` were ignored the same way.
    others = (("--targets", args.targets), ("--interval", args.interval)) if args.source == "prometheus" else (
        ("--url", args.url), ("--token-file", args.token_file), ("--ca", args.ca),
        ("--insecure", args.insecure or None), ("--fit-history", args.fit_history))
    given = [flag for flag, value in others if value is not None]
    if given:
        raise UserError(f"{given[0]}: does not go with --source {args.source}")
    if args.source == "prometheus":
        source_url(args.url or "", "--url")  # one line naming the flag and the rule it breaks
        _seconds(args.window, "--window")
        token = None
        if args.token_file:
            token = read_text(args.token_file, "--token-file").strip()
            if not token:
                raise UserError(f"--token-file: {args.token_file} is empty")
        if args.ca:
            _check_ca(args.ca)
        return PrometheusSource(args.url, token=token, ca_path=args.ca, insecure=args.insecure,
                                timeout=args.timeout, window=args.window, namespace=args.namespace,
                                deployment=args.deployment)
    targets = [PodTarget.parse(t, args.namespace or "default", args.deployment or "default")
               for t in (args.targets or "").split(",") if t.strip()]
    if not targets:  # "," or " " named none, and an empty fleet would read as "ok"
        raise UserError(f"--targets: at least one host:port is required with --source pods, got {args.targets!r}")
    _each_once(targets)
    return PodsSource(targets, timeout=args.timeout, window_seconds=_seconds(args.window, "--window"))


def _each_once(targets: list[PodTarget]) -> None:
    """A target named twice was scraped twice and counted as two replicas (its running streams and KV read
    double); one pod named at two addresses is two readings of which one is a guess."""
    urls: set[str] = set()
    pods: set[tuple[str, str, str]] = set()
    for target in targets:
        pod = (target.namespace, target.deployment, target.pod)
        if target.url in urls:
            raise UserError(f"--targets: {target.url} is named twice")
        if pod in pods:
            raise UserError(f"--targets: the pod {'/'.join(pod)} is named twice")
        urls.add(target.url)
        pods.add(pod)


def _check_ca(path: str) -> None:
    """The CA bundle must hold a certificate: ssl's own refusal names neither the flag nor the file."""
    text = read_text(path, "--ca")  # missing, a directory, unreadable or not text: one line naming the flag
    if not text.strip():
        raise UserError(f"--ca: {path} is empty; it holds no PEM certificate")
    try:
        # The text already read, not the path again: a FIFO read as empty would block a second open.
        ssl.create_default_context(cadata=text)
    except ssl.SSLError as exc:
        raise UserError(f"--ca: {path} holds no PEM certificate ssl can load ({exc.reason or exc})") from None


def _fits(source: PrometheusSource | PodsSource, snap: Snapshot, history: float) -> dict[tuple[str, str], Any]:
    """One fit per deployment on its current layout (the observer does not know the TP)."""
    samples: dict[tuple[str, str], list[Any]] = {k: list(o.fit_samples) for k, o in snap.observations.items()}
    if isinstance(source, PrometheusSource) and history > 0 and snap.available:
        try:
            for key, found in source.fit_history(snap.time - history, snap.time, source.window).items():
                samples.setdefault(key, []).extend(found)
        except FetchFailed:
            pass  # the fit is a bonus here; the snapshot already says what is wrong
    out = {}
    for key, found in samples.items():
        memory = FitMemory(max_samples=256)
        memory.add(0, found, snap.time)
        out[key] = (memory.fit(0), len(memory.samples(0)))
    return out


def _warning(obs: Observation) -> CliffWarning:
    point = pressure_point(obs) if obs.available else PressurePoint(obs.sample_time)
    return cliff_warning([point], obs.sample_time, obs.preemption_rate)


def run(args: argparse.Namespace) -> int:
    history = _fit_history(args)  # before the source, which holds a connection pool once made
    source = _source(args)
    try:
        snap = source.poll()
        interval = DEFAULT_INTERVAL if args.interval is None else args.interval
        if isinstance(source, PodsSource) and interval > 0:
            time.sleep(interval)
            snap = source.poll()
        fits = _fits(source, snap, history)
    finally:
        source.close()
    keys = sorted(k for k in snap.observations
                  if (not args.namespace or k[0] == args.namespace)
                  and (not args.deployment or k[1] == args.deployment))
    if args.namespace and args.deployment and not keys:
        keys = [(args.namespace, args.deployment)]  # say why it is missing rather than print nothing
    observations = [snap.get(*k) for k in keys]
    if args.output == "json":
        print(dump_json(_as_json(snap, observations, fits)))
    else:
        _print(snap, observations, fits)
    trusted = snap.available and all(o.available for o in observations)
    return 0 if trusted else 1


def _as_json(snap: Snapshot, observations: list[Observation], fits: dict[Any, Any]) -> dict[str, Any]:
    deployments = []
    for obs in observations:
        fit, n = fits.get((obs.namespace, obs.deployment), (None, 0))
        w = _warning(obs)
        data = observation_to_dict(obs)
        data["fit"] = fit_to_dict(fit) if fit is not None else None
        data["fit_window_samples"] = n
        data["cache_headroom"] = {
            "reason": w.reason.value, "headroom_ratio": w.headroom_ratio, "message": w.message,
            "time_to_cliff_seconds": None if math.isinf(w.time_to_cliff_seconds) else w.time_to_cliff_seconds,
        }
        deployments.append(data)
    return {"source": snap.source, "time": snap.time, "queries": snap.queries,
            "fault": snap.fault.value, "message": snap.message, "deployments": deployments}


def _f(value: float | None, fmt: str, scale: float = 1.0) -> str:
    return "-" if value is None else format(value * scale, fmt)


def _print(snap: Snapshot, observations: list[Observation], fits: dict[Any, Any]) -> None:
    console = Console(width=150)
    faulty = sum(not o.available for o in observations)
    # The source can answer while every pod behind it is unreachable (the pods source has no server of
    # its own): "ok" then would contradict every line below it.
    state = (f"{snap.fault.value}: {snap.message}" if not snap.available
             else f"{faulty} of {len(observations)} deployment(s) not trusted" if faulty else "ok")
    console.print(f"source {snap.source}: {snap.queries} queries, {state}")
    if not observations and snap.available:
        console.print("no deployments with engine metrics found")
    for obs in observations:
        state = "MetricsAvailable" if obs.available else f"{obs.fault.value}: {obs.message}"
        age = max(0.0, snap.time - obs.sample_time)
        console.print(f"\n[bold]{obs.namespace}/{obs.deployment}[/bold]  dialect {obs.dialect}  "
                      f"{len(obs.replicas)} replicas  sample age {age:.0f}s  {state}")
        if not obs.replicas:
            continue
        table = Table("pod", "running", "waiting", "KV %", "KV cap tok", "preempt/s", "req/s", "TTFT p50",
                      "TTFT p95", "TTFT p99", "ITL ms", "prefix hit %")
        rows: list[ReplicaObservation | Observation] = [*obs.replicas, obs]
        for r in rows:
            name = r.pod if isinstance(r, ReplicaObservation) else "all"
            table.add_row(name, _f(r.running, ".0f"), _f(r.waiting, ".0f"), _f(r.kv_usage, ".1f", 100),
                          _f(r.kv_capacity_tokens, ",.0f"), _f(r.preemption_rate, ".2f"),
                          _f(r.arrival_rate, ".2f"), _f(r.ttft_p50_seconds, ".2f"), _f(r.ttft_p95_seconds, ".2f"),
                          _f(r.ttft_p99_seconds, ".2f"), _f(r.mean_inter_token_seconds, ".1f", 1e3),
                          _f(r.prefix_hit_rate, ".0f", 100))
        console.print(table)
        console.print(f"mean request: prompt {_f(obs.mean_prompt_tokens, ',.0f')}, cached "
                      f"{_f(obs.mean_cached_tokens, ',.0f')}, generated {_f(obs.mean_generated_tokens, ',.0f')} "
                      f"tokens; completions {_f(obs.completion_rate, '.2f')}/s; KV per running stream "
                      f"{_f(obs.stream_context_tokens, ',.0f')} tokens")
        fit, n = fits.get((obs.namespace, obs.deployment), (None, 0))
        if fit is None:
            console.print(f"fit: none yet ({n} clean windows; it needs 6 or more spanning several batch sizes)")
        else:
            console.print(f"fit: per_pass(B) = {fit.intercept_s * 1e3:.2f} ms + {fit.slope_s * 1e3:.3f} ms x B "
                          f"(R² {fit.r2:.3f}, {fit.samples} samples, B {fit.batch_min:.0f}..{fit.batch_max:.0f})")
        w = _warning(obs)
        console.print(f"cache headroom: {w.reason.value} ({w.message})")
