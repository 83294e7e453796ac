"""The InferenceDeployment status as pydantic models. Status may carry decimals (they are
observations, not intent); the spec may not."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from infertune.api.policy import ServingPolicySpec
from infertune.api.spec import ApiModel


class ConditionStatus(ApiModel):
    type: str
    status: Literal["True", "False", "Unknown"]
    reason: str
    message: str = ""
    last_transition_time: str
    observed_generation: int | None = None


class AppliedLayout(ApiModel):
    tensor_parallel_size: int
    max_num_seqs: int
    replicas: int
    workload_kind: Literal["Deployment", "LeaderWorkerSet"] = "Deployment"
    applied_at: str = ""


class Predictions(ApiModel):
    stream_tokens_per_second: float | None = None
    ttft_seconds: float | None = None
    kv_working_set_percent: int | None = None
    cliff_concurrency: float | None = None
    cost_per_million_tokens: float | None = None
    region: str | None = None


class DemandFigures(ApiModel):
    """The demand replicas are sized for, one model load ahead (model/forecast.py), requests/s."""

    current_rps: float | None = None
    burst_rps: float | None = None
    trend_rps: float | None = None
    seasonal_rps: float | None = None
    sized_rps: float | None = Field(default=None, description="The largest of the four: what replicas serve.")
    driven_by: str | None = None
    horizon_seconds: float | None = Field(default=None, description="One model load.")


class Recommendation(ApiModel):
    tensor_parallel_size: int | None = None
    max_num_seqs: int | None = None
    replicas: int | None = None
    feasible: bool = False
    reason: str = ""
    message: str = ""
    predictions: Predictions = Field(default_factory=Predictions)
    needed_gpus: int | None = None
    capacity_shortfall_gpus: int | None = None
    demand: DemandFigures | None = None
    burst_headroom_gpus: int | None = Field(default=None, description=(
        "GPUs the burst headroom (spec.tuning.burstHeadroomPercent) holds above what the demand figures "
        "alone need: its cost in GPU-hours per hour (0 while the recent bursts ask for more)."))


class ObservedFigures(ApiModel):
    metrics_available: bool = False
    kv_usage_percent: int | None = None
    ttft_seconds: float | None = Field(default=None, description="At the SLO's percentile.")
    stream_tokens_per_second: float | None = None
    running: float | None = None
    waiting: float | None = None
    requests_per_second: float | None = None
    kv_headroom_percent: int | None = Field(default=None, description=(
        "100 x (1 - KV pressure): observed use or the predicted working set, whichever is larger."))
    time_to_cliff_seconds: float | None = Field(default=None, description=(
        "Predicted from the pressure trend and the preemption rate; absent when not approaching."))
    sample_time: str | None = None


class FittedModel(ApiModel):
    """The applied layout's per-pass fit: the napkin's terms (overhead, weights, kv, compute) with fitted
    coefficients, 1 being the napkin's own."""

    tensor_parallel_size: int
    terms: dict[str, float] = Field(default_factory=dict)
    r2: float
    samples: int
    batch_min: float | None = None
    batch_max: float | None = None
    context_min: float | None = None
    context_max: float | None = None


class FitSamples(ApiModel):
    """What the online fit has learned, per TP: rows of [batch, seconds per pass, weight, time, context].
    Kept in status so that an operator restart does not forget it."""

    version: int
    layouts: dict[str, list[list[float]]] = Field(default_factory=dict)


class DemandProfile(ApiModel):
    """The demand learnt by hour of the day and day of the week (UTC, requests/s), with the samples
    behind each, so a restarted operator forecasts a season it has already seen."""

    daily: list[float] = Field(default_factory=list, max_length=24)
    daily_samples: list[int] = Field(default_factory=list, max_length=24)
    weekly: list[float] = Field(default_factory=list, max_length=7)
    weekly_samples: list[int] = Field(default_factory=list, max_length=7)
    updated_at: str | None = None


class DecisionRecord(ApiModel):
    time: str
    action: str
    reason: str
    message: str = ""


class RolledFrom(ApiModel):
    tensor_parallel_size: int = Field(ge=1)
    max_num_seqs: int = Field(ge=1)
    replicas: int = Field(ge=0)


class LeftUnsafeShape(ApiModel):
    """The last shape left as unsafe and the working set's level then (the KV a running stream held, over the
    metrics history's memory): for one re-layout horizon a move for cost is judged at no less than that."""

    tensor_parallel_size: int = Field(ge=1)
    max_num_seqs: int = Field(ge=1)
    stream_tokens: float = Field(ge=0, allow_inf_nan=False)
    at: float = Field(ge=0, allow_inf_nan=False, description="When it was left (Unix seconds).")


class GuardrailMemory(ApiModel):
    """The planner's guardrail state between cycles (Unix seconds), so a restart keeps cooldowns."""

    last_scale_up_at: float | None = None
    last_scale_down_at: float | None = None
    last_relayout_at: float | None = None
    recent_recommendations: list[list[float]] = Field(default_factory=list)
    # The shape the last re-layout rolled from, at the old pods it kept: room a scale-up mid-rollout leaves.
    rolled_from: RolledFrom | None = None
    left_unsafe: LeftUnsafeShape | None = None


class PolicySnapshot(ApiModel):
    """The ServingPolicy last seen under spec.policyRef, so that a deleted policy (or one the operator
    cannot see after a restart) keeps governing the resource until it is back or the reference changes."""

    name: str
    spec: ServingPolicySpec = Field(default_factory=ServingPolicySpec)
    seen_at: str = ""


class InferenceDeploymentStatus(ApiModel):
    observed_generation: int | None = None
    conditions: list[ConditionStatus] = Field(default_factory=list)
    replicas: int | None = Field(default=None, description="Replicas applied (scale subresource).")
    selector: str | None = Field(default=None, description="Label selector of the pods (scale subresource).")
    applied: AppliedLayout | None = None
    recommendation: Recommendation | None = None
    observed: ObservedFigures | None = None
    fit: FittedModel | None = None
    fit_samples: FitSamples | None = None
    demand_profile: DemandProfile | None = None
    decisions: list[DecisionRecord] = Field(default_factory=list, max_length=10)
    guardrails: GuardrailMemory | None = None
    policy: PolicySnapshot | None = None


MAX_DECISIONS = 5
