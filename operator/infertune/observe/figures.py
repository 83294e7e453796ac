"""Per-pod raw figures, and how a deployment's Observation is built from them and judged.

Both sources reduce what they read to `PodFigures` (gauges, per-second rates over the window,
TTFT quantiles), so the aggregation and the fault rules below are shared and the two sources
agree by construction. A figure that was not measured is absent from the mappings, never zero.
Every figure is checked against its physical range (`implausible`): KV use in [0, 1], rates and
counts non-negative, running streams within max-num-seqs, request and token rates within what a
replica of the model could serve (`ReplicaLimits`, from the layout: observe/plausible.py). A figure
outside it is an `ImplausibleValue` fault, never a number the planner sizes from.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TypedDict

from infertune.api.formats import OBJECT_NAME
from infertune.api.observation import MetricsFault, Observation, ReplicaObservation
from infertune.api.schema import CONTEXT_TOKENS_MAX
from infertune.observe.dialects import REQUIRED_GAUGES, TTFT_QUANTILES

DeploymentKey = tuple[str, str]  # (namespace, deployment)


@dataclass(frozen=True)
class ReplicaLimits:
    """What one replica can physically do, per second (None: bounded only by the fixed ranges)."""

    running: float | None = None  # streams at once: the largest max-num-seqs it may run
    requests: float | None = None  # requests started or finished
    tokens: float | None = None  # tokens decoded (speculative decoding included), or preemptions


@dataclass(frozen=True)
class Expected:
    """What the controller knows should be serving: the ready pods, or at least how many, and what
    each can physically report."""

    pods: frozenset[str] | None = None
    replicas: int | None = None
    limits: ReplicaLimits = ReplicaLimits()

    def ready(self, pods: frozenset[str]) -> Expected:
        """These pods, and no others, are ready and should report (the limits stay)."""
        return Expected(pods, len(pods), self.limits)

    def after_scaling_to(self, replicas: int) -> Expected:
        """What may still be expected to report once the workload is told to run `replicas`.

        Added pods load for minutes before they serve, so a scale-up expects no more than before;
        removed pods stop reporting before the workload's status says so, so a scale-down expects
        no more than the new count. Expecting the new count outright flagged every scale-up's next
        poll as PartialReplicas and cost the loop a cycle on data it could trust.
        """
        if self.replicas is None:
            return Expected(limits=self.limits)
        return Expected(replicas=min(self.replicas, replicas), limits=self.limits)


@dataclass(frozen=True)
class PodFigures:
    pod: str
    dialect: str | None = None
    sample_time: float | None = None
    gauges: Mapping[str, float] = field(default_factory=dict)
    # Per-second rates over the window; histogram parts as "<figure>_sum" / "<figure>_count".
    rates: Mapping[str, float] = field(default_factory=dict)
    ttft: Mapping[float, float] = field(default_factory=dict)
    capacity_tokens: int | None = None
    series_count: int = 1  # >1: the pod was scraped twice
    counter_reset: bool = False


def shown(pod: str) -> str:
    """How a message names a pod a source reported: its name, or a placeholder if that is no pod name (a
    DNS subdomain, as Kubernetes allows it). A source names pods in its label values; anything else it
    calls a pod is not repeated into a condition."""
    return pod if OBJECT_NAME.refusal(pod) is None else "(a series with an invalid pod name)"


def _finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def _sum(values: Sequence[float | None]) -> float | None:
    """The sum over replicas, or None when any replica lacks the figure: half a sum is not a sum."""
    if not values or any(v is None for v in values):
        return None
    return float(sum(v for v in values if v is not None))


# Per second: less than one event in thirty years is no traffic at all, and a ratio over it is noise
# (two rates of 1e-311 divide to infinity).
RATE_FLOOR = 1e-9


def _ratio(num: float | None, den: float | None) -> float | None:
    if num is None or den is None or den <= RATE_FLOOR:
        return None
    ratio = num / den
    return ratio if math.isfinite(ratio) else None


def _rate(fig: PodFigures, key: str) -> float | None:
    return _finite(fig.rates.get(key))


def _mean_prompt(rates: Mapping[str, float | None]) -> float | None:
    by_hist = _ratio(rates.get("prompt_length_sum"), rates.get("prompt_length_count"))
    return by_hist if by_hist is not None else _ratio(rates.get("prompt_tokens"), rates.get("completions"))


def _mean_generated(rates: Mapping[str, float | None]) -> float | None:
    by_hist = _ratio(rates.get("generation_length_sum"), rates.get("generation_length_count"))
    if by_hist is not None:
        return by_hist
    return _ratio(rates.get("generation_tokens"), rates.get("completions"))


def _cached(rates: Mapping[str, float | None]) -> float | None:
    """Mean cached prompt tokens: the prompt times the token hit rate. Dividing hits by requests
    would mix admissions (hits, recomputes included) with completions (the prompt histogram)."""
    prompt = _mean_prompt(rates)
    hit = _ratio(rates.get("prefix_hits"), rates.get("prefix_queries"))
    if prompt is not None and hit is not None:
        return prompt * hit
    return _ratio(rates.get("prefix_hits"), rates.get("completions"))  # SGLang: no query counter


_RATE_KEYS = ("preemptions", "prompt_tokens", "generation_tokens", "prefix_queries", "prefix_hits",
              "completions", "ttft_count", "itl_sum", "itl_count", "prompt_length_sum",
              "prompt_length_count", "generation_length_sum", "generation_length_count")


class RateFigures(TypedDict):
    """The figures that come from counter rates, the same for one replica and for a deployment."""

    preemption_rate: float | None
    arrival_rate: float | None
    completion_rate: float | None
    mean_prompt_tokens: float | None
    mean_cached_tokens: float | None
    mean_generated_tokens: float | None
    mean_inter_token_seconds: float | None
    prefix_hit_rate: float | None


def _rate_figures(rates: Mapping[str, float | None]) -> RateFigures:
    return RateFigures(
        preemption_rate=rates["preemptions"], arrival_rate=rates["ttft_count"],
        completion_rate=rates["completions"], mean_prompt_tokens=_mean_prompt(rates),
        mean_cached_tokens=_cached(rates), mean_generated_tokens=_mean_generated(rates),
        mean_inter_token_seconds=_ratio(rates["itl_sum"], rates["itl_count"]),
        prefix_hit_rate=_ratio(rates["prefix_hits"], rates["prefix_queries"]),
    )


def _fleet_rate_figures(figs: Sequence[PodFigures]) -> tuple[RateFigures, float | None]:
    """The deployment's rate figures, and the arrival rate of the replicas that have one while a replica
    that just became ready has none yet (None otherwise). Sums need every replica: half a sum is not a
    sum. Means are a ratio of two sums over the same replicas, so the rated ones' means are the traffic's
    shape, where None would put the spec's hint in its place."""
    whole = _rate_figures({k: _sum([_rate(f, k) for f in figs]) for k in _RATE_KEYS})
    rated = [f for f in figs if _rate(f, "ttft_count") is not None]
    if whole["arrival_rate"] is not None or not rated:
        return whole, None
    part = _rate_figures({k: _sum([_rate(f, k) for f in rated]) for k in _RATE_KEYS})
    return _with_means(whole, part), part["arrival_rate"]


def _with_means(sums: RateFigures, means: RateFigures) -> RateFigures:
    """`sums`' sums with `means`' means."""
    return RateFigures(
        preemption_rate=sums["preemption_rate"], arrival_rate=sums["arrival_rate"],
        completion_rate=sums["completion_rate"], mean_prompt_tokens=means["mean_prompt_tokens"],
        mean_cached_tokens=means["mean_cached_tokens"], mean_generated_tokens=means["mean_generated_tokens"],
        mean_inter_token_seconds=means["mean_inter_token_seconds"], prefix_hit_rate=means["prefix_hit_rate"],
    )


def replica_observation(fig: PodFigures) -> ReplicaObservation:
    rates = {k: _rate(fig, k) for k in _RATE_KEYS}
    return ReplicaObservation(
        pod=fig.pod,
        running=_finite(fig.gauges.get("running")),
        waiting=_finite(fig.gauges.get("waiting")),
        kv_usage=_finite(fig.gauges.get("kv_usage")),
        **_rate_figures(rates),
        ttft_p50_seconds=_finite(fig.ttft.get(0.5)),
        ttft_p95_seconds=_finite(fig.ttft.get(0.95)),
        ttft_p99_seconds=_finite(fig.ttft.get(0.99)),
        kv_capacity_tokens=fig.capacity_tokens,
    )


def _kv_tokens_in_use(kv_usage: float | None, capacity_tokens: float | None) -> float | None:
    """Tokens a pod's KV pool holds: its use times its capacity; None when either is missing or outside
    its range."""
    if kv_usage is None or capacity_tokens is None:
        return None
    if not (math.isfinite(kv_usage) and 0 <= kv_usage <= 1.5 and math.isfinite(capacity_tokens)
            and capacity_tokens > 0):
        return None
    return kv_usage * capacity_tokens


def stream_context(kv_usage: float | None, capacity_tokens: float | None, running: float | None) -> float:
    """Mean tokens each running stream holds in the KV pool: the pool's use over the streams; 0 when
    any figure is missing (the fit then takes the workload's context)."""
    tokens = _kv_tokens_in_use(kv_usage, capacity_tokens)
    if tokens is None or running is None or running < 1:
        return 0.0
    return tokens / running


def fleet_stream_context(reps: Sequence[ReplicaObservation]) -> float | None:
    """Mean tokens a running stream holds across the fleet: KV in use over running streams. None when
    any replica lacks a figure (a partial sum would read one pod as the fleet) or fewer than one runs."""
    tokens = running = 0.0
    for rep in reps:
        held = _kv_tokens_in_use(rep.kv_usage, rep.kv_capacity_tokens)
        if held is None or rep.running is None or not rep.running >= 0:
            return None
        tokens += held
        running += rep.running
    return tokens / running if running >= 1 else None


def decoding_streams(fig: PodFigures) -> float | None:
    """The mean number of streams decoding over the window, exactly: the inter-token latencies of one
    request add up to the time it spent decoding, so the histogram's sum grows by one second per second
    per decoding stream.

    The fit's batch comes from here, not from the running gauge: two readings of a gauge that moves
    with every arrival are a noisy estimate of the window's mean, and noise in the batch flattens the
    fitted slope (regression dilution). Fitted on small-batch windows, that flat slope predicted 32 ms
    a pass at 40 streams where the twin took 53 (docs/model-validation.md).
    """
    return _rate(fig, "itl_sum")


def fit_samples(figs: Sequence[PodFigures]) -> tuple[tuple[float, float, float], ...]:
    """(mean decoding batch, mean inter-token seconds, tokens per running stream) per pod whose window
    was clean.

    A window with any preemption is dropped: recompute stretches passes and the sample would
    sit above the line. So is one with no decoded tokens or an idle batch.
    """
    out = []
    for fig in figs:
        preempt = _rate(fig, "preemptions")
        itl = _ratio(_rate(fig, "itl_sum"), _rate(fig, "itl_count"))
        batch = decoding_streams(fig)
        if preempt is None or preempt > 0 or itl is None or batch is None or batch < 1 or fig.counter_reset:
            continue
        context = stream_context(_finite(fig.gauges.get("kv_usage")), fig.capacity_tokens,
                                 _finite(fig.gauges.get("running")))
        out.append((batch, itl, context))
    return tuple(out)


@dataclass(frozen=True)
class Judgement:
    fault: MetricsFault
    message: str


# Ranges no engine reading leaves, whatever the layout: a pool is at most full, nothing counts
# backwards, a queue or a pool of a billion is no replica's, a first token does not take a day.
KV_USAGE_MAX = 1.0 + 1e-6
ANY_COUNT_MAX = 1e9
TTFT_MAX_SECONDS = 86_400.0
ITL_MAX_SECONDS = 60.0
# The inter-token seconds a window counts can exceed its streams x its length by what straddles its edges
# (at most one token's wait per stream): twice the most streams a replica runs is past any edge effect.
DECODING_SLACK = 2.0
# A sample dated after the poll that read it: Prometheus evaluates a query at the poll's own time and
# returns no sample newer than that, and a pod is scraped by the poll's clock. A little is allowed for a
# store that rounds (Thanos, a remote-read); more is a clock no one should read figures by, and a sample
# dated in the future would hold every later poll out of the history (observe/history.py keeps time order).
SAMPLE_AHEAD_MAX_SECONDS = 60.0
TOKENS_MAX = float(CONTEXT_TOKENS_MAX)  # a mean prompt or answer longer than any model's context
_REQUEST_RATES = ("ttft_count", "completions", "prompt_length_count", "generation_length_count")
_TOKEN_RATES = ("generation_tokens", "itl_count", "preemptions")


def _outside(value: float, high: float) -> bool:
    return not 0.0 <= value <= high


def implausible(fig: PodFigures, limits: ReplicaLimits) -> str | None:
    """The first figure of `fig` outside its physical range, as a sentence; None when all are inside."""
    def said(figure: str, value: float, high: float) -> str:
        return (f"pod {shown(fig.pod)} reports {figure} = {value:.4g}, outside its physical range "
                f"0..{high:.4g}; not believed")

    for gauge, high in (("kv_usage", KV_USAGE_MAX), ("running", limits.running or ANY_COUNT_MAX),
                        ("waiting", ANY_COUNT_MAX)):
        value = fig.gauges.get(gauge)
        if value is not None and math.isfinite(value) and _outside(value, high):
            return said(gauge, value, high)
    decoding = decoding_streams(fig)
    if decoding is not None and _outside(decoding, DECODING_SLACK * (limits.running or ANY_COUNT_MAX)):
        return said("mean decoding streams (inter-token seconds per second)", decoding,
                    DECODING_SLACK * (limits.running or ANY_COUNT_MAX))
    for name, rate in sorted(fig.rates.items()):
        bound = (limits.requests if name in _REQUEST_RATES else limits.tokens if name in _TOKEN_RATES else None)
        if _outside(rate, bound or ANY_COUNT_MAX):
            return said(f"{name} per second", rate, bound or ANY_COUNT_MAX)
    itl = _ratio(_rate(fig, "itl_sum"), _rate(fig, "itl_count"))
    if itl is not None and itl > ITL_MAX_SECONDS:
        return said("inter-token seconds", itl, ITL_MAX_SECONDS)
    hits, queries = _rate(fig, "prefix_hits"), _rate(fig, "prefix_queries")
    if hits is not None and queries is not None and hits > queries * 1.01 + 1.0:
        return f"pod {shown(fig.pod)} reports more prefix-cache hits than queries; not believed"
    for quantile, seconds in fig.ttft.items():
        if math.isfinite(seconds) and _outside(seconds, TTFT_MAX_SECONDS):
            return said(f"TTFT p{quantile * 100:g}", seconds, TTFT_MAX_SECONDS)
    return None


def judge(key: DeploymentKey, figs: Sequence[PodFigures], expected: Expected | None, now: float,
          stale_after: float) -> Judgement:
    """The first fault that makes this deployment's figures untrustworthy, or OK."""
    ns, name = key
    if not figs:
        return Judgement(MetricsFault.EMPTY, f"no series for {ns}/{name}")
    dup = sorted(shown(f.pod) for f in figs if f.series_count > 1)
    if dup:
        return Judgement(MetricsFault.DUPLICATE_SERIES, f"pod {', '.join(dup[:5])} scraped more than once")
    seen = {f.pod for f in figs}
    if expected is not None and expected.pods is not None and not expected.pods <= seen:
        missing = sorted(shown(p) for p in expected.pods - seen)
        return Judgement(MetricsFault.PARTIAL,
                         f"{len(missing)} of {len(expected.pods)} pods missing: {', '.join(missing[:5])}")
    if expected is not None and expected.replicas is not None and len(seen) < expected.replicas:
        return Judgement(MetricsFault.PARTIAL, f"{len(seen)} of {expected.replicas} replicas report metrics")
    for fig in sorted(figs, key=lambda f: f.pod):
        for gauge in REQUIRED_GAUGES:
            value = fig.gauges.get(gauge)
            if value is None:
                return Judgement(MetricsFault.EMPTY, f"pod {shown(fig.pod)} has no {gauge} series")
            if not math.isfinite(value):
                return Judgement(MetricsFault.NOT_A_NUMBER, f"pod {shown(fig.pod)} reports {gauge} = {value}")
        for rate_name, rate in sorted(fig.rates.items()):
            if not math.isfinite(rate):
                return Judgement(MetricsFault.NOT_A_NUMBER, f"pod {shown(fig.pod)} reports {rate_name} per second "
                                                            f"= {rate}")
    limits = expected.limits if expected is not None else ReplicaLimits()
    for fig in sorted(figs, key=lambda f: f.pod):
        why = implausible(fig, limits)
        if why is not None:
            return Judgement(MetricsFault.IMPLAUSIBLE, why)
    reset = sorted(shown(f.pod) for f in figs if f.counter_reset)
    if reset:
        return Judgement(MetricsFault.COUNTER_RESET,
                         f"counters reset in the window on pod {', '.join(reset[:5])} (restart?)")
    times = [f.sample_time for f in figs if f.sample_time is not None]
    if not all(math.isfinite(t) for t in times):
        return Judgement(MetricsFault.NOT_A_NUMBER, "a sample's timestamp is not a number")
    if times and max(times) > now + SAMPLE_AHEAD_MAX_SECONDS:
        return Judgement(MetricsFault.IMPLAUSIBLE, f"a sample is dated {max(times) - now:.0f}s after the poll "
                                                   f"that read it (at most {SAMPLE_AHEAD_MAX_SECONDS:.0f}s)")
    if times and now - min(times) > stale_after:
        age = now - min(times)
        return Judgement(MetricsFault.STALE, f"newest sample is {age:.0f}s old (limit {stale_after:.0f}s)")
    return Judgement(MetricsFault.OK, "")


def build_observation(key: DeploymentKey, figs: Sequence[PodFigures], expected: Expected | None,
                      now: float, stale_after: float, deployment_ttft: Mapping[float, float],
                      fit_figs: Sequence[PodFigures] | None = None) -> Observation:
    """The deployment's Observation. When it is faulted the figures still cover the pods seen, for
    display, but `available` is False and nothing should be decided from them. `fit_figs` are the
    figures the fit's samples come from, when they are not `figs` (the pods source's last poll)."""
    verdict = judge(key, figs, expected, now, stale_after)
    figs = sorted(figs, key=lambda f: f.pod)
    observation = _assemble(key, figs, verdict, now, deployment_ttft, figs if fit_figs is None else fit_figs)
    why = implausible_means(observation) if observation.available else None
    if why is not None:
        return replace(observation, available=False, fault=MetricsFault.IMPLAUSIBLE, message=why)
    return observation


def implausible_means(obs: Observation) -> str | None:
    """The first figure derived from several rates that no request has (a mean prompt longer than any
    context, a pass longer than a minute), as a sentence; None when all are plausible."""
    for name, value, high in (("mean prompt tokens", obs.mean_prompt_tokens, TOKENS_MAX),
                              ("mean cached tokens", obs.mean_cached_tokens, TOKENS_MAX),
                              ("mean generated tokens", obs.mean_generated_tokens, TOKENS_MAX),
                              ("tokens per running stream", obs.stream_context_tokens, TOKENS_MAX),
                              ("mean inter-token seconds", obs.mean_inter_token_seconds, ITL_MAX_SECONDS),
                              ("prefix-cache hit rate", obs.prefix_hit_rate, 1.01),
                              # From the deployment's own histogram query, which no pod's check reads.
                              ("TTFT p50", obs.ttft_p50_seconds, TTFT_MAX_SECONDS),
                              ("TTFT p95", obs.ttft_p95_seconds, TTFT_MAX_SECONDS),
                              ("TTFT p99", obs.ttft_p99_seconds, TTFT_MAX_SECONDS)):
        if value is not None and not 0.0 <= value <= high:
            return f"the deployment's {name} = {value:.4g}, outside its physical range 0..{high:.4g}; not believed"
    return None


def _assemble(key: DeploymentKey, figs: Sequence[PodFigures], verdict: Judgement, now: float,
              deployment_ttft: Mapping[float, float], fit_figs: Sequence[PodFigures]) -> Observation:
    reps = tuple(replica_observation(f) for f in figs)
    rate_figures, arrival_floor = _fleet_rate_figures(figs)
    usages = [r.kv_usage for r in reps]
    known_usage = [u for u in usages if u is not None]
    capacities = [f.capacity_tokens for f in figs if f.capacity_tokens is not None]
    # Only a time a status can show: a faulted observation is still displayed (observed figures' sampleTime).
    times = [f.sample_time for f in figs if f.sample_time is not None and 0 <= f.sample_time <= now
             + SAMPLE_AHEAD_MAX_SECONDS]
    dialects = sorted({f.dialect for f in figs if f.dialect})
    return Observation(
        namespace=key[0], deployment=key[1],
        sample_time=min(times) if times else now,
        available=verdict.fault is MetricsFault.OK, fault=verdict.fault, message=verdict.message,
        dialect="+".join(dialects) if dialects else "unknown",
        replicas=reps,
        running=_sum([r.running for r in reps]),
        waiting=_sum([r.waiting for r in reps]),
        kv_usage=max(known_usage) if known_usage and len(known_usage) == len(usages) else None,
        mean_kv_usage=sum(known_usage) / len(known_usage) if known_usage else None,
        **rate_figures,
        arrival_rate_floor=arrival_floor,
        ttft_p50_seconds=_finite(deployment_ttft.get(TTFT_QUANTILES[0])),
        ttft_p95_seconds=_finite(deployment_ttft.get(TTFT_QUANTILES[1])),
        ttft_p99_seconds=_finite(deployment_ttft.get(TTFT_QUANTILES[2])),
        # Per replica; the smallest pool is where the cliff comes first.
        kv_capacity_tokens=min(capacities) if capacities else None,
        stream_context_tokens=fleet_stream_context(reps),
        fit_samples=fit_samples(fit_figs),
    )


def faulted(key: DeploymentKey, fault: MetricsFault, message: str, now: float) -> Observation:
    """A deployment the source could not read at all (Prometheus down, 5xx, ...)."""
    return Observation(namespace=key[0], deployment=key[1], sample_time=now, available=False,
                       fault=fault, message=message, dialect="unknown")
