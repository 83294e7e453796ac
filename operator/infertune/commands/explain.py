"""`infertune explain NAME [-n NS]` (from the cluster) or `infertune explain -f FILE` (offline): the
current against the recommended layout, the predictions, and why the other layouts were rejected."""

from __future__ import annotations

import argparse
import math
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from infertune.api.policy import parse_policy
from infertune.api.quantities import format_duration, format_figure
from infertune.api.spec import API_VERSION, KIND, parse_spec
from infertune.commands._inputs import cluster_client, number, path
from infertune.commands.render import resolve_file
from infertune.controller.status import layout_of
from infertune.errors import UserError
from infertune.model.perf import unmeasured_pass_factor
from infertune.planner import Candidate, Plan, plan
from infertune.planner.request import Resolved, resolve
from infertune.planner.rollout import plan_rollout
from infertune.planner.types import Layout, stabilization_window

DEFAULT_NAMESPACE = "default"  # kubectl's, for NAME without -n


def register(sub: Any) -> None:
    parser = sub.add_parser("explain", help="why a resource runs the layout it runs")
    parser.add_argument("name", nargs="?", help="InferenceDeployment in the cluster")
    parser.add_argument("-n", "--namespace", default=None, help="NAME's namespace (default: default)")
    parser.add_argument("-f", "--file", type=path, help="explain a YAML file offline instead")
    parser.add_argument("--policy", type=path, help="ServingPolicy YAML for -f (default: policies/<name>.yaml)")
    parser.add_argument("--config-json", type=path, help="config.json for a configMapRef with -f")
    parser.add_argument("--top", type=number(0, 1000, integer=True), default=8, help="rejected layouts to list")
    parser.set_defaults(func=handle)


@contextmanager
def _reading(what: str) -> Iterator[None]:
    """A call to the API server, whose failure is one line naming what was read: the server refused it
    (ApiError), or the kubeconfig's server could not be reached or answered with what is not JSON (the
    client raises urllib3's errors, a socket's OSError or json's ValueError, none of them words for the user)."""
    import urllib3

    from infertune.errors import ApiError

    try:
        yield
    except ApiError as exc:
        raise UserError(f"cannot read {what}: {exc}") from None
    except (urllib3.exceptions.HTTPError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", None) or exc  # MaxRetryError's own words bury the cause in the URL
        raise UserError(f"cannot read {what}: the API server did not answer: {reason}") from None


def _from_cluster(args: argparse.Namespace) -> tuple[Resolved, dict[str, Any]]:
    kube = cluster_client()
    namespace = DEFAULT_NAMESPACE if args.namespace is None else args.namespace
    with _reading(f"{KIND} {namespace}/{args.name}"):
        body = kube.get(API_VERSION, KIND, namespace, args.name)
    if body is None:
        raise UserError(f"{KIND} {namespace}/{args.name} not found")
    spec = parse_spec(body.get("spec"))
    policy = None
    if spec.policy_ref is not None:
        with _reading(f"ServingPolicy {spec.policy_ref.name}"):
            raw = kube.get(API_VERSION, "ServingPolicy", None, spec.policy_ref.name)
        if raw is None:
            raise UserError(f"spec.policyRef.name: ServingPolicy {spec.policy_ref.name!r} not found")
        policy = parse_policy(raw.get("spec"))
    config = None
    if spec.model.config_map_ref is not None:
        with _reading(f"ConfigMap {namespace}/{spec.model.config_map_ref.name}"):
            cm = kube.get("v1", "ConfigMap", namespace, spec.model.config_map_ref.name) or {}
        config = (cm.get("data") or {}).get(spec.model.config_map_ref.key)
    return resolve(spec, policy, config), dict(body.get("status") or {})


def _layout(layout: Layout | None) -> str:
    if layout is None:
        return "none"
    return f"TP{layout.tensor_parallel_size} max-num-seqs {layout.max_num_seqs} x{layout.replicas} replica(s)"


def pass_interval(c: Candidate) -> str:
    """The per-pass prediction with its interval, where it came from, and which end the planner judged."""
    text = (f"{c.per_pass_seconds * 1e3:.1f} ms (interval {c.per_pass_low_seconds * 1e3:.1f}.."
            f"{c.per_pass_high_seconds * 1e3:.1f} ms, {c.pass_source})")
    if c.pessimistic and c.pass_source == "calibrated-napkin":
        text += ("; this TP is not measured (another TP's measurement carried to it), so the SLO floor was "
                 "judged at the slow end")
    elif c.pessimistic:
        text += "; beyond the sampled batches, so the SLO floor and sizing were judged at the slow end"
    factor = float(unmeasured_pass_factor(np.array([float(c.max_num_seqs)]))[0])
    if c.pass_source == "napkin" and factor > 1.0:
        # Applied at the busy batch the sized load runs, so the cap's factor is the most it can be.
        text += (f"; nothing measured yet, so replicas were sized on a pass up to {factor - 1:.0%} slower (the "
                 "napkin's miss at its B200 load test at this batch)")
    return text


def _load_test_lines(resolved: Resolved, status: dict[str, Any]) -> list[str]:
    """Each declared load test, and whether the fleet's own samples have replaced it yet."""
    measured = set((status.get("fitSamples") or {}).get("layouts") or {})
    lines = []
    for test in resolved.spec.model.load_tests:
        tp, batches = test.tensor_parallel_size, [p.batch for p in test.points]
        state = (f"the fleet has samples of TP{tp} too, which replace it once there are enough to fit"
                 if str(tp) in measured else f"planned on until the fleet measures TP{tp} itself")
        lines.append(f"load test:    TP{tp}, {len(batches)} batches ({min(batches)}..{max(batches)}) "
                     f"(spec.model.loadTests): {state}")
    return lines


def _kv_share(fraction: float) -> str:
    # Not finite when the weights leave no HBM for KV: a share of nothing is no figure at all.
    return f"KV working set {fraction:.0%} of capacity" if math.isfinite(fraction) else "no KV capacity left"


def render_explanation(resolved: Resolved, status: dict[str, Any], the_plan: Plan, top: int) -> str:
    current = layout_of(status.get("applied"))
    lines = [f"current:      {_layout(current)}", f"recommended:  {_layout(the_plan.layout)}",
             f"why:          {the_plan.reason}"]
    choice = the_plan.choice or the_plan.closest
    if choice is not None:
        lines.append(f"predictions:  {format_figure(choice.per_stream_tps, '.1f')} tok/s per stream, "
                     f"TTFT {format_figure(choice.ttft_seconds, '.2f')} s, "
                     f"{_kv_share(choice.kv_working_set_fraction)} (cliff at "
                     f"{format_figure(choice.cliff_concurrency, '.0f')} streams), "
                     f"${format_figure(choice.cost_per_million_tokens, '.3f')}/M tokens, region {choice.region.value}")
        lines.append(f"per pass:     {pass_interval(choice)}")
    lines += _load_test_lines(resolved, status)
    lines += _sizing_lines(resolved, status, the_plan, current)
    last = status.get("recommendation") or {}
    if last:
        lines.append(f"operator:     last cycle recommended TP{last.get('tensorParallelSize', '?')} max-num-seqs "
                     f"{last.get('maxNumSeqs', '?')} x{last.get('replicas', '?')} ({last.get('reason', '')})")
    fit = status.get("fit") or {}
    if fit.get("terms"):
        terms = ", ".join(f"{name} {value:g}" for name, value in fit["terms"].items())
        source = ", from spec.model.loadTests" if fit.get("source") == "LoadTest" else ""
        lines.append(f"fit:          TP{fit.get('tensorParallelSize', '?')} per-pass = napkin terms x ({terms}); "
                     f"R² {fit.get('r2', '?')} over {fit.get('samples', '?')} samples, B {fit.get('batchMin', '?')}.."
                     f"{fit.get('batchMax', '?')}, context {fit.get('contextMin', '?')}.."
                     f"{fit.get('contextMax', '?')}{source}")
    observed = status.get("observed") or {}
    if observed.get("metricsAvailable"):
        lines.append(f"observed:     KV {observed.get('kvUsagePercent', '?')}%, "
                     f"{observed.get('streamTokensPerSecond', '?')} tok/s per stream, "
                     f"TTFT {observed.get('ttftSeconds', '?')} s")
    rows = the_plan.candidates()
    rejected = [c for c in rows if not c.feasible]
    tally = Counter(c.reason.split(":")[0].split(" (")[0] for c in rejected)
    lines.append(f"candidates:   {len(rows)} considered, {len(rows) - len(rejected)} feasible; rejected: "
                 + (", ".join(f"{n} {why}" for why, n in tally.most_common()) or "none"))
    per_tp: dict[int, Any] = {}
    for c in rejected:  # the lowest rejected concurrency per TP says where each TP hits its wall
        per_tp[c.tp] = c if c.tp not in per_tp or c.max_num_seqs < per_tp[c.tp].max_num_seqs else per_tp[c.tp]
    for c in sorted(per_tp.values(), key=lambda c: c.tp)[:top]:
        lines.append(f"  TP{c.tp:<3} max-num-seqs {c.max_num_seqs:<4} rejected: {c.reason}")
    return "\n".join(lines)


def _sizing_lines(resolved: Resolved, status: dict[str, Any], the_plan: Plan, current: Layout | None) -> list[str]:
    """What the replicas are sized for, what the burst headroom costs, and what a re-layout from what
    runs would take (planner/rollout.py)."""
    lines = []
    percentile = f"p{round(resolved.request.burst_quantile * 100)}"
    demand = (status.get("recommendation") or {}).get("demand") or {}
    if demand:
        bursts = f"bursts {percentile}"
        parts = ", ".join(f"{name} {demand[key]:g}" for name, key in (
            ("now", "currentRps"), (bursts, "burstRps"), ("trend", "trendRps"), ("season", "seasonalRps"))
            if key in demand)
        lines.append(f"demand:       sized for {demand.get('sizedRps', '?')} req/s one model load ahead "
                     f"({parts}; driven by {demand.get('drivenBy', '?')})")
        if "recentPeakRps" in demand:
            lines.append(f"              read up to {demand['recentPeakRps']:g} req/s within the last model load: a "
                         f"re-layout for cost must still save there")
    headroom = round(resolved.request.demand_headroom * 100)
    gpus = (status.get("recommendation") or {}).get("burstHeadroomGpus", the_plan.headroom_gpus)
    lines.append(f"headroom:     burst headroom {headroom}% holds {gpus} GPU(s): {gpus} GPU-hours an hour, "
                 f"{24 * gpus} a day (spec.tuning.burstHeadroomPercent); the recent bursts are held to their "
                 f"{percentile} (spec.tuning.burstPercentile)")
    lines.append(_scale_up_line(resolved))
    lines.append(_scale_down_line(resolved))
    target = the_plan.layout
    if current is not None and target is not None and not current.same_shape(target):
        rollout = plan_rollout(current, target, None, resolved.request.pool_gpus,
                               resolved.request.guardrails.model_load_seconds)
        lines.append("re-layout:    " + (rollout.describe() if rollout is not None else
                                         f"does not fit the pool's {resolved.request.pool_gpus} GPUs beside the "
                                         f"pods that run, even one new pod at a time"))
    return lines


def _scale_up_line(resolved: Resolved) -> str:
    """How fast replicas come: the step one decision takes (HPA's default unless the resource sets one) and
    the cooldown between scale-ups."""
    rails = resolved.request.guardrails
    cooldown = (f"{format_duration(rails.scale_up_cooldown_s)} after the last scale-up "
                "(spec.tuning.cooldowns.scaleUp)")
    if rails.scale_up_share > 0:
        return (f"scale-up:     adds at most {rails.max_step_replicas} replica(s) or {rails.scale_up_share:.0%} of "
                f"those that run, whichever is more (HPA's default; spec.tuning.maxReplicaStep sets a bound both "
                f"ways), {cooldown}")
    return (f"scale-up:     adds at most {rails.max_step_replicas} replica(s) a decision "
            f"(spec.tuning.maxReplicaStep), {cooldown}")


def _scale_down_line(resolved: Resolved) -> str:
    """When replicas go: the stabilisation window the guardrails use, which a configured window shorter
    than a model load does not shorten, and the cooldown after any scale change."""
    rails = resolved.request.guardrails
    window = stabilization_window(rails)
    why = ("the highest count recommended within it is kept" if window <= rails.scale_down_stabilization_s else
           f"spec.tuning.cooldowns.scaleDownStabilization {format_duration(rails.scale_down_stabilization_s)} is "
           f"raised to the {format_duration(rails.model_load_seconds)} model load: a replica released on a dip "
           f"takes that long to come back")
    return (f"scale-down:   waits until {format_duration(window)} of recommendations ask for fewer ({why}), and "
            f"{format_duration(rails.scale_down_cooldown_s)} after the last scale change "
            f"(spec.tuning.cooldowns.scaleDown)")


def handle(args: argparse.Namespace) -> int:
    if args.file is not None and args.name:  # one of the two would be explained and the other ignored
        raise UserError(f"give NAME or -f FILE, not both (got {args.name!r} and {args.file})")
    if args.file is not None and args.namespace is not None:  # the file is explained offline: -n would be ignored
        raise UserError(f"-n/--namespace: goes with NAME, the resource in the cluster; {args.file} is explained "
                        "offline (drop -n, or give NAME to read it from that namespace)")
    if args.file is None:
        given = [flag for flag, value in (("--policy", args.policy), ("--config-json", args.config_json)) if value]
        if given:  # from the cluster, the policy and the ConfigMap are the ones the resource names there
            raise UserError(f"{given[0]}: goes with -f FILE (the cluster's own objects are read for NAME)")
    if args.file is not None:
        _, resolved = resolve_file(args)
        status: dict[str, Any] = {}
    elif args.name:
        resolved, status = _from_cluster(args)
    else:
        raise UserError("give NAME (with -n NAMESPACE) or -f FILE")
    print(render_explanation(resolved, status, plan(resolved.request, None, time.time()), args.top))
    return 0
