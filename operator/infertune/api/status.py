"""The InferenceDeployment status as pydantic models. Status may carry decimals (they are
observations, not intent); the spec may not."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from infertune.api.policy import ServingPolicySpec
from infertune.api.schema import ApiModel

# Every time the operator writes (controller/status.py `iso`).
TIMESTAMP = "RFC 3339, UTC"


class ConditionStatus(ApiModel):
    """One aspect of the resource's state, as metav1.Condition has it."""

    type: str = Field(description=(
        "The condition's type, in CamelCase: Ready, SLOMet, CacheHeadroom, MetricsAvailable, Progressing, "
        "InvalidSpec or PolicyResolved."))
    status: Literal["True", "False", "Unknown"] = Field(description="True, False or Unknown.")
    reason: str = Field(description=(
        "Why the condition has its status, a CamelCase identifier such as WorkloadReady or SLOMissed; the "
        "Events use the same reasons."))
    message: str = Field(default="", description="Human-readable details, e.g. '2/4 replicas ready'.")
    last_transition_time: str = Field(description=(
        f"When the status last changed from one value to another ({TIMESTAMP}); a new reason or message "
        "alone does not move it."))
    observed_generation: int | None = Field(default=None, description=(
        "The metadata.generation the condition was set at: older than the resource's, it may be out of date."))


class AppliedLayout(ApiModel):
    """The layout that runs, as the workload itself reports it."""

    tensor_parallel_size: int = Field(description="Tensor-parallel size: GPUs per replica.")
    max_num_seqs: int = Field(description=(
        "Streams one replica runs at once (vLLM --max-num-seqs, SGLang --max-running-requests)."))
    replicas: int = Field(description="Replicas of the workload.")
    workload_kind: Literal["Deployment", "LeaderWorkerSet"] = Field(default="Deployment", description=(
        "Deployment, or LeaderWorkerSet when a replica's TP spans more than one node."))
    applied_at: str = Field(default="", description=f"When the operator last changed the workload ({TIMESTAMP}).")


class Predictions(ApiModel):
    """What the performance model predicts of the recommended layout, or of the closest candidate when no
    layout is feasible."""

    stream_tokens_per_second: float | None = Field(default=None, description=(
        "Decode speed of each stream, tokens/s."))
    ttft_seconds: float | None = Field(default=None, description=(
        "Time to first token, seconds, while the prefill shares the batch; no queueing counted."))
    kv_working_set_percent: int | None = Field(default=None, description=(
        "KV the streams hold with every slot busy, percent of the KV pool."))
    cliff_concurrency: float | None = Field(default=None, description=(
        "Streams per replica at which the KV working set fills the pool: past it the engine preempts."))
    cost_per_million_tokens: float | None = Field(default=None, description=(
        "USD per million processed tokens (fresh, cached and output), at spec.hardware.pricePerGpuHour."))
    region: str | None = Field(default=None, description=(
        "Where the layout sits on its throughput curve: climb (more streams add throughput almost in "
        "proportion), bend, plateau (they add little) or cliff (past the KV pool)."))


class DemandFigures(ApiModel):
    """The demand replicas are sized for, one model load ahead (model/forecast.py), requests/s."""

    current_rps: float | None = Field(default=None, description=(
        "The demand now: the arrival rate, plus the waiting queue as the rate that would drain it in a minute."))
    burst_rps: float | None = Field(default=None, description=(
        "The recent demand at spec.tuning.burstPercentile; absent until enough of it is binned."))
    trend_rps: float | None = Field(default=None, description=(
        "A significant rise over the last model load, carried one load ahead; absent without one."))
    seasonal_rps: float | None = Field(default=None, description=(
        "The level now times the rise the learnt daily and weekly profile (status.demandProfile) shows one "
        "load ahead; absent when it shows none."))
    sized_rps: float | None = Field(default=None, description="The largest of the four: what replicas serve.")
    driven_by: str | None = Field(default=None, description=(
        "Which figure that is: current, burst, trend or seasonal."))
    horizon_seconds: float | None = Field(default=None, description="One model load.")
    recent_peak_rps: float | None = Field(default=None, description=(
        "The highest demand read within the last model load: a re-layout for cost must still save GPUs with "
        "both shapes sized for it (and the burst headroom), or its saving lasts only while a dip does."))


class Recommendation(ApiModel):
    """What the planner recommends this cycle, before the guardrails: the cheapest layout that meets the SLO
    for the demand one model load ahead. In Recommend mode it is all the operator does."""

    tensor_parallel_size: int | None = Field(default=None, description="Recommended tensor-parallel size.")
    max_num_seqs: int | None = Field(default=None, description="Recommended max-num-seqs.")
    replicas: int | None = Field(default=None, description=(
        "Recommended replicas, within spec.tuning.replicas and spec.hardware.poolGpus; absent when no layout is "
        "feasible."))
    feasible: bool = Field(default=False, description=(
        "Whether a layout meets the SLO within the KV headroom; when not, message says what the closest misses."))
    reason: str = Field(default="", description=(
        "The reason of this cycle's decision: the guardrail that held a change (e.g. ScaleUpCooldown), the "
        "change made (e.g. DemandRising), or a metrics fault (e.g. SourceTimeout)."))
    message: str = Field(default="", description=(
        "The planner's account of its choice: cost, speed, TTFT and KV working set of the layout and the "
        "replicas for the demand."))
    predictions: Predictions = Field(default_factory=Predictions)
    needed_gpus: int | None = Field(default=None, description=(
        "GPUs the recommended layout needs for the demand, before spec.tuning.replicas.max and "
        "spec.hardware.poolGpus cap it."))
    capacity_shortfall_gpus: int | None = Field(default=None, description=(
        "GPUs of that need the caps leave out; 0 when the demand is served."))
    demand: DemandFigures | None = None
    burst_headroom_gpus: int | None = Field(default=None, description=(
        "GPUs the burst headroom (spec.tuning.burstHeadroomPercent) holds above what the demand figures "
        "alone need: its cost in GPU-hours per hour (0 while the recent bursts ask for more)."))


class ObservedFigures(ApiModel):
    """The engine's figures at the last observation, over every replica."""

    metrics_available: bool = Field(default=False, description=(
        "Whether the last observation was trusted; when not, the figures are absent and the MetricsAvailable "
        "condition says why."))
    kv_usage_percent: int | None = Field(default=None, description=(
        "KV cache in use on the fullest replica, percent of its pool."))
    ttft_seconds: float | None = Field(default=None, description=(
        "Time to first token, seconds, at the SLO's percentile (the nearest of p50, p95 and p99)."))
    stream_tokens_per_second: float | None = Field(default=None, description=(
        "Decode speed of a stream, tokens/s: one over the mean inter-token latency."))
    running: float | None = Field(default=None, description="Streams running, summed over the replicas.")
    waiting: float | None = Field(default=None, description="Requests waiting in the queues, summed.")
    requests_per_second: float | None = Field(default=None, description=(
        "Arrival rate, requests/s, summed; absent while a replica that just became ready has no rate yet."))
    kv_headroom_percent: int | None = Field(default=None, description=(
        "100 x (1 - KV pressure): observed use or the predicted working set, whichever is larger."))
    time_to_cliff_seconds: float | None = Field(default=None, description=(
        "Predicted from the pressure trend and the preemption rate; absent when not approaching."))
    sample_time: str | None = Field(default=None, description=(
        f"Time of the newest sample, by the metrics source's clock ({TIMESTAMP})."))


class FittedModel(ApiModel):
    """The applied layout's per-pass fit: the napkin's terms (overhead, weights, kv, compute) with fitted
    coefficients, 1 being the napkin's own."""

    tensor_parallel_size: int = Field(description="The TP it is a fit of.")
    terms: dict[str, float] = Field(default_factory=dict, description="Coefficient of each term, by name.")
    r2: float = Field(description="Coefficient of determination over its samples.")
    samples: int = Field(description="Samples it rests on.")
    batch_min: float | None = Field(default=None, description=(
        "Fewest streams per replica the samples saw; the fit extrapolates outside batchMin..batchMax."))
    batch_max: float | None = Field(default=None, description="Most streams per replica the samples saw.")
    context_min: float | None = Field(default=None, description="Shortest mean context of a stream seen, tokens.")
    context_max: float | None = Field(default=None, description="Longest mean context of a stream seen, tokens.")
    source: Literal["Fleet", "LoadTest"] = Field(default="Fleet", description=(
        "Fleet: samples the running pods reported; LoadTest: spec.model.loadTests, until the fleet has "
        "measured this TP itself."))


class FitSamples(ApiModel):
    """What the online fit has learned, per TP: rows of [batch, seconds per pass, weight, time, context].
    Kept in status so that an operator restart does not forget it."""

    version: int = Field(description="Format of the rows: 2 (with the context) or 1 (without).")
    layouts: dict[str, list[list[float]]] = Field(default_factory=dict, description=(
        "The rows of each TP, keyed by the TP; time is Unix seconds, context tokens per stream."))


class DemandProfile(ApiModel):
    """The demand learnt by hour of the day and day of the week (UTC, requests/s), with the samples
    behind each, so a restarted operator forecasts a season it has already seen."""

    daily: list[float] = Field(default_factory=list, max_length=24, description=(
        "Mean demand of each hour of the day, 00:00 UTC first."))
    daily_samples: list[int] = Field(default_factory=list, max_length=24, description="Samples behind each hour.")
    weekly: list[float] = Field(default_factory=list, max_length=7, description=(
        "Mean demand of each day of the week, Monday first."))
    weekly_samples: list[int] = Field(default_factory=list, max_length=7, description="Samples behind each day.")
    updated_at: str | None = Field(default=None, description=f"When it was last written ({TIMESTAMP}).")


class DecisionRecord(ApiModel):
    """One decision of the tuning cycle."""

    time: str = Field(description=f"When it was made ({TIMESTAMP}).")
    action: str = Field(description="None, Hold, ScaleUp, ScaleDown or Relayout.")
    reason: str = Field(description=(
        "The one check that decided it, or the mode that held it (Paused, TuningOff, Recommended)."))
    message: str = Field(default="", description="What it did or waits for, in words.")


class RolledFrom(ApiModel):
    """The shape the last re-layout rolled from and the old pods it kept serving: while it rolls, a scale-up
    leaves them their GPUs."""

    tensor_parallel_size: int = Field(ge=1, description="TP of the old pods.")
    max_num_seqs: int = Field(ge=1, description="Their max-num-seqs.")
    replicas: int = Field(ge=0, description="Old pods the rollout kept.")


class LeftUnsafeShape(ApiModel):
    """The last shape left as unsafe and the working set's level then (the KV a running stream held, over the
    metrics history's memory): for one re-layout horizon a move for cost is judged at no less than that."""

    tensor_parallel_size: int = Field(ge=1, description="TP of the shape left.")
    max_num_seqs: int = Field(ge=1, description="Its max-num-seqs.")
    stream_tokens: float = Field(ge=0, allow_inf_nan=False, description="KV tokens a running stream held then.")
    at: float = Field(ge=0, allow_inf_nan=False, description="When it was left (Unix seconds).")


class GuardrailMemory(ApiModel):
    """The planner's guardrail state between cycles (Unix seconds), so a restart keeps cooldowns."""

    last_scale_up_at: float | None = Field(default=None, description="When replicas were last added.")
    last_scale_down_at: float | None = Field(default=None, description="When replicas were last removed.")
    last_relayout_at: float | None = Field(default=None, description=(
        "When a layout (TP and max-num-seqs) was last applied, the first one included."))
    recent_recommendations: list[list[float]] = Field(default_factory=list, description=(
        "[time, replicas] the demand asked of the running shape: what the scale-down stabilisation window "
        "remembers. Only its highest count is read, so an entry with a later one as high is dropped: at most "
        "one entry per replica count, however fast the cycle runs."))
    # The shape the last re-layout rolled from, at the old pods it kept: room a scale-up mid-rollout leaves.
    rolled_from: RolledFrom | None = None
    left_unsafe: LeftUnsafeShape | None = None


class PolicySnapshot(ApiModel):
    """The ServingPolicy last seen under spec.policyRef, so that a deleted policy (or one the operator
    cannot see after a restart) keeps governing the resource until it is back or the reference changes."""

    name: str = Field(description="Name of the ServingPolicy.")
    spec: ServingPolicySpec = Field(default_factory=ServingPolicySpec, description="Its spec as last seen.")
    seen_at: str = Field(default="", description=f"When the operator first saw that spec ({TIMESTAMP}).")


class InferenceDeploymentStatus(ApiModel):
    """What the operator observed, recommended and applied; only the operator writes it."""

    observed_generation: int | None = Field(default=None, description=(
        "The metadata.generation of the spec the operator last acted on."))
    conditions: list[ConditionStatus] = Field(default_factory=list, description=(
        "Ready, SLOMet, CacheHeadroom, MetricsAvailable and Progressing (Unknown on the first visit), "
        "InvalidSpec, and PolicyResolved with a policyRef."))
    replicas: int | None = Field(default=None, description="Replicas applied (scale subresource).")
    selector: str | None = Field(default=None, description="Label selector of the pods (scale subresource).")
    applied: AppliedLayout | None = None
    recommendation: Recommendation | None = None
    observed: ObservedFigures | None = None
    fit: FittedModel | None = None
    fit_samples: FitSamples | None = None
    demand_profile: DemandProfile | None = None
    decisions: list[DecisionRecord] = Field(default_factory=list, max_length=10, description=(
        "The last five decisions, oldest first; one of the same action and reason as the last is not added."))
    guardrails: GuardrailMemory | None = None
    policy: PolicySnapshot | None = None


MAX_DECISIONS = 5
