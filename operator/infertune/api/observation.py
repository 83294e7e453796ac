"""What the operator saw of one deployment at one instant: the contract between observe/ and planner/.

Every figure is optional because missing data must never be read as zero: a source that could not
measure something leaves it `None`, and sets `available=False` with a reason when what is missing
is needed to decide.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

# A queue is demand the fleet did not serve: it counts as the rate that would drain it in this time.
BACKLOG_DRAIN_SECONDS = 60.0

# Fewer streams than this running on average over a load are a few sessions, each climbing through its own
# turns: their mean is theirs, not the workload's level. It rises for minutes together while nothing in the
# workload grows, and a line through it passes its test (the bench's week at night: 0-3 streams on three to
# five pods, a rise of 25-90K carried a load ahead, and a running TP4 c=7 torn down six times); one long
# session fills a 60 s load's mean (ramp-load60: 157K with no stream running, where the level was 96K,
# and a running TP4 c=6 torn down; docs/bench-history.md).
FEW_STREAMS = 8.0


class MetricsFault(StrEnum):
    """Why an observation is not trusted. The values double as condition reasons."""

    OK = "MetricsFresh"
    UNREACHABLE = "SourceUnreachable"
    TIMEOUT = "SourceTimeout"
    SERVER_ERROR = "SourceServerError"
    MALFORMED = "MalformedAnswer"
    EMPTY = "NoSeries"
    NOT_A_NUMBER = "NaNValues"
    PARTIAL = "PartialReplicas"
    COUNTER_RESET = "CounterReset"
    DUPLICATE_SERIES = "DuplicateSeries"
    STALE = "StaleSamples"
    NOT_CONFIGURED = "NoMetricsSource"  # no URL in the spec and no operator default
    CREDENTIALS = "CredentialsUnavailable"  # the token Secret or CA the spec names cannot be read (or used)
    NOT_ALLOWED = "SourceNotAllowed"  # the URL is outside the platform's allow-list, or not a URL to use
    IMPLAUSIBLE = "ImplausibleValue"  # a figure outside its physical range, or a jump not yet corroborated


@dataclass(frozen=True)
class ReplicaObservation:
    """One serving pod's figures. Rates are per second over the observation window."""

    pod: str
    running: float | None = None
    waiting: float | None = None
    kv_usage: float | None = None  # 0..1 of the KV pool
    preemption_rate: float | None = None
    arrival_rate: float | None = None
    completion_rate: float | None = None
    mean_prompt_tokens: float | None = None
    mean_cached_tokens: float | None = None
    mean_generated_tokens: float | None = None
    ttft_p50_seconds: float | None = None
    ttft_p95_seconds: float | None = None
    ttft_p99_seconds: float | None = None
    mean_inter_token_seconds: float | None = None
    prefix_hit_rate: float | None = None
    kv_capacity_tokens: int | None = None  # num_gpu_blocks x block_size, from cache_config_info


@dataclass(frozen=True)
class Observation:
    """A deployment's figures, aggregated over its replicas, plus the per-replica breakdown.

    `sample_time` is the source's own timestamp of the newest sample (Unix seconds), so the
    planner can judge staleness against its `now` without a clock of its own.
    """

    namespace: str
    deployment: str
    sample_time: float
    available: bool
    fault: MetricsFault = MetricsFault.OK
    message: str = ""
    dialect: str = "vllm"
    replicas: tuple[ReplicaObservation, ...] = ()
    running: float | None = None  # sum over replicas
    waiting: float | None = None  # sum over replicas
    kv_usage: float | None = None  # max over replicas: the cliff is hit by the fullest one
    mean_kv_usage: float | None = None
    preemption_rate: float | None = None  # sum
    arrival_rate: float | None = None  # sum, requests/s
    # The same sum over the replicas that have a rate while one that just became ready has none yet (its
    # counters need a second scrape): the demand is at least this. None when every replica has a rate
    # (then `arrival_rate` is the figure) or none has.
    arrival_rate_floor: float | None = None
    completion_rate: float | None = None  # sum, requests/s
    mean_prompt_tokens: float | None = None
    mean_cached_tokens: float | None = None
    mean_generated_tokens: float | None = None
    ttft_p50_seconds: float | None = None
    ttft_p95_seconds: float | None = None
    ttft_p99_seconds: float | None = None
    mean_inter_token_seconds: float | None = None
    prefix_hit_rate: float | None = None
    kv_capacity_tokens: int | None = None  # per replica
    # Mean tokens a running stream holds in the KV pool: the fleet's KV in use over its running streams.
    # The working set measured, where the request means infer it from what finished (and lag a
    # session workload whose contexts grow). None when a replica's KV figures are missing or none runs.
    stream_context_tokens: float | None = None
    # The same over the metrics history's whole memory (15 minutes), where the above is over the last model
    # load: with few streams running it swings as sessions end and start, and a trough is not its level.
    stream_context_recent_tokens: float | None = None
    # The mean number of streams running behind `stream_context_tokens` (over the last load): below
    # FEW_STREAMS its mean is those sessions' own, not the workload's level. None when unmeasured.
    stream_context_streams: float | None = None
    # By how many tokens the above will have grown one model load ahead along its own significant rise
    # (0 when it shows none); None when not settled over a load or too few streams ran to tell.
    stream_context_growth_tokens: float | None = None
    # How long the history has measured the working set: since its first point in this process (the
    # memory above keeps 15 minutes, this does not forget). None when nothing was recorded.
    stream_context_measured_seconds: float | None = None
    # (running batch, seconds per pass, tokens per running stream; 0 when the KV figures are missing)
    fit_samples: tuple[tuple[float, float, float], ...] = field(default=())

    @property
    def demand_rate(self) -> float | None:
        """Requests/s the fleet is asked for: the arrival rate, plus the waiting queue as the rate that
        would drain it in BACKLOG_DRAIN_SECONDS (the first-token rate saturates at what the fleet
        serves, so the queue is demand it did not serve). None without an arrival rate."""
        if not self.available or self.arrival_rate is None:
            return None
        return max(self.arrival_rate, 0.0) + max(self.waiting or 0.0, 0.0) / BACKLOG_DRAIN_SECONDS

    @property
    def demand_floor(self) -> float | None:
        """Requests/s the fleet is asked for at least, while a replica that just became ready has no rate
        yet: the rated replicas' arrivals plus the whole queue. Enough to add replicas on, never to remove
        any. None when the demand is known (`demand_rate`) or nothing is."""
        if not self.available or self.arrival_rate is not None or self.arrival_rate_floor is None:
            return None
        return max(self.arrival_rate_floor, 0.0) + max(self.waiting or 0.0, 0.0) / BACKLOG_DRAIN_SECONDS

    @property
    def demand_read(self) -> float | None:
        """What this reading says of the demand: `demand_rate`, or while a replica has no rate yet its
        `demand_floor` (the guardrails then let it add replicas only)."""
        known = self.demand_rate
        return known if known is not None else self.demand_floor

    @property
    def stream_tps(self) -> float | None:
        """Per-stream decode speed: one token per inter-token interval."""
        itl = self.mean_inter_token_seconds
        return None if itl is None or itl <= 0 else 1.0 / itl

    def ttft_at(self, percentile: int) -> float | None:
        """The observed TTFT quantile nearest the SLO's percentile (p50, p95 or p99)."""
        by_percentile = {50: self.ttft_p50_seconds, 95: self.ttft_p95_seconds, 99: self.ttft_p99_seconds}
        return by_percentile[min(by_percentile, key=lambda p: abs(p - percentile))]
