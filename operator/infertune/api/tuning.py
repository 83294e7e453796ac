"""How the operator tunes a resource (`spec.tuning`): the TP sizes and concurrency it may choose, the
replica range, the cooldowns, and the headroom and burst knobs. A ServingPolicy may set the same fields
(api/policy.py), so their descriptions live here once for both CRDs.
"""

from __future__ import annotations

from typing import Any

from pydantic import ConfigDict, Field, ValidationInfo, field_validator, model_validator
from pydantic.alias_generators import to_camel
from pydantic.config import JsonDict

from infertune.api.schema import (
    ALLOWED_TP_SIZES,
    CONCURRENCY_MAX,
    COOLDOWN_RANGE,
    DURATION_FORMAT,
    INTERVAL_RANGE,
    REPLICAS_MAX,
    STABILIZATION_RANGE,
    STALE_AFTER_RANGE,
    ApiModel,
    Duration,
    Percent,
    TuningMode,
    check_duration_range,
    duration_rules,
    rule,
)


def _range_rule(what: str) -> dict[str, Any]:
    return rule("!has(self.min) || !has(self.max) || self.min <= self.max", f"{what}: min must be <= max")


class ConcurrencyRange(ApiModel):
    """The range of max-num-seqs the planner chooses from: the streams one replica runs at once (vLLM
    --max-num-seqs, SGLang --max-running-requests)."""

    model_config = ConfigDict(json_schema_extra={"x-kubernetes-validations": [_range_rule("concurrency")]})

    min: int | None = Field(default=None, ge=1, le=CONCURRENCY_MAX, description="Default 1.")
    max: int | None = Field(default=None, ge=1, le=CONCURRENCY_MAX, description=(
        "Default 256, or min when that is larger."))

    @model_validator(mode="after")
    def _ordered(self) -> ConcurrencyRange:
        if self.min is not None and self.max is not None and self.min > self.max:
            raise ValueError(f"spec.tuning.concurrency: min {self.min} > max {self.max}")
        return self


class ReplicaRange(ApiModel):
    """The range of replicas the operator scales within; spec.hardware.poolGpus may cap it further."""

    model_config = ConfigDict(json_schema_extra={"x-kubernetes-validations": [_range_rule("replicas")]})

    min: int | None = Field(default=None, ge=0, le=REPLICAS_MAX, description=(
        "Default 1. 0 is read as 1, not as scale to zero: a running replica is what the demand is measured "
        "on, so the operator keeps one, and with no traffic at all it scales down to it."))
    max: int | None = Field(default=None, ge=1, le=REPLICAS_MAX, description=(
        "Default 64, or min when that is larger."))

    @model_validator(mode="after")
    def _ordered(self) -> ReplicaRange:
        if self.min is not None and self.max is not None and self.min > self.max:
            raise ValueError(f"spec.tuning.replicas: min {self.min} > max {self.max}")
        return self


# Each cooldown's range (api/schema.py says why), by its field: the CEL rules and the validator read it.
COOLDOWN_RANGES = {"scale_up": COOLDOWN_RANGE, "scale_down": COOLDOWN_RANGE, "relayout": COOLDOWN_RANGE,
                   "scale_down_stabilization": STABILIZATION_RANGE}


class Cooldowns(ApiModel):
    """The least time between changes of each kind."""

    model_config = ConfigDict(json_schema_extra={"x-kubernetes-validations": [*duration_rules(
        {to_camel(name): bounds for name, bounds in COOLDOWN_RANGES.items()})]})

    scale_up: Duration | None = Field(default=None, description=(
        "Least time between two scale-ups; skipped when the running layout is unsafe or the observed TTFT or "
        "per-stream speed misses the SLO. Default 1m. 0s..720h (30 days). " + DURATION_FORMAT))
    scale_down: Duration | None = Field(default=None, description=(
        "Least time from the last scale change, up or down, to a scale-down. Default 5m. 0s..720h (30 days). "
        + DURATION_FORMAT))
    relayout: Duration | None = Field(default=None, description=(
        "Least time between two re-layouts (a new TP or max-num-seqs: every replica restarts). A layout whose "
        "KV working set is over the headroom line, or that the engine reports past the cliff, is left within "
        "it; a rollout that gives serving pods up waits twice it. Default 30m. 0s..720h (30 days). "
        + DURATION_FORMAT))
    scale_down_stabilization: Duration | None = Field(default=None, description=(
        "HPA-style scale-down stabilisation window: replicas go down only to the highest count recommended "
        "within it. The operator never uses a window shorter than the model load (spec.engine.startupSeconds), "
        "since a replica released on a dip takes a model load to come back: 5m with a 15-minute load is a "
        "15-minute window. Default 5m. 0s..24h. " + DURATION_FORMAT))

    @field_validator("scale_up", "scale_down", "relayout", "scale_down_stabilization")
    @classmethod
    def _in_range(cls, value: str | None, info: ValidationInfo) -> str | None:
        return check_duration_range(value, COOLDOWN_RANGES[str(info.field_name)])


# The descriptions of the tuning fields a ServingPolicy may also set (api/policy.py), so the two CRDs say the
# same. The defaults they state are the planner's (planner/request.py, planner/types.py `Guardrails`);
# tests/unit/test_crds_schema.py checks that they agree.
TP_SIZES_DESCRIPTION = (
    "Tensor-parallel sizes (GPUs per replica) the planner may choose from, each one of "
    + ", ".join(str(t) for t in ALLOWED_TP_SIZES) + ", and each one the model's attention heads allow (the spec "
    "is invalid otherwise). Default: those of 1, 2, 4 and 8 the model allows. A size above "
    "spec.hardware.gpusPerNode runs each replica across nodes, as a LeaderWorkerSet.")
# The API server refuses a size listed twice: the list is a set (which one was meant twice is not a question).
TP_SIZES_LIST_TYPE: JsonDict = {"x-kubernetes-list-type": "set"}


def distinct_tp_sizes(sizes: list[int] | None) -> list[int] | None:
    """The sizes as given, or an error naming the first one listed twice (the CRD's list type refuses it too)."""
    for index, tp in enumerate(sizes or ()):
        if tp in (sizes or [])[:index]:
            raise ValueError(f"tensorParallelSizes[{index}]: {tp} is listed twice")
    return sizes


KV_HEADROOM_DESCRIPTION = (
    "Share of each replica's KV cache kept free, percent 0-90: a layout qualifies only while its KV working set "
    "stays under the line at (100 - this)% of the KV pool at the load it is sized for (a new layout may cross it "
    "5% of the time, a running one 25% before it is replaced). The CacheHeadroom condition warns against the "
    "same line. Default 10.")
HYSTERESIS_DESCRIPTION = (
    "Replica changes smaller than this percentage of the running count are not made (WithinHysteresis), unless "
    "the running layout is unsafe or a scale-up answers an observed SLO miss; a re-layout must save more than "
    "this share of the GPUs. Percent 0-100. Default 10.")
MAX_REPLICA_STEP_DESCRIPTION = (
    "Most replicas one decision adds or removes; a larger change takes several decisions, each behind its "
    f"cooldown. A re-layout is not bound by it. At most {REPLICAS_MAX}, the most replicas a resource runs. "
    "Unset: 4 down, and up 4 or as many as run, whichever is more (the HorizontalPodAutoscaler's default "
    "scale-up), since a replica ordered a decision late serves a whole model load late.")
STALE_AFTER_DESCRIPTION = (
    "Metrics whose newest sample is older than this hold every decision (MetricsStale). Default 2m. 0s..24h. "
    + DURATION_FORMAT)
BURST_HEADROOM_DESCRIPTION = (
    "Capacity kept spare, when replicas are sized, above the demand now and the level its trend and "
    "daily profile forecast one model load ahead, for bursts faster than a model load; where the recent "
    "bursts' percentile (burstPercentile) asks for more, that figure is the spare and nothing is stacked "
    "on it. The GPUs it holds are reported in status.recommendation.burstHeadroomGpus. Default 15.")
BURST_PERCENTILE_DESCRIPTION = (
    "The percentile of the recent demand (over at least two model loads, in bins a quarter of a load "
    "wide) that replicas are sized to hold: the bursts standing capacity absorbs. Lower spends fewer "
    "GPUs and leaves more bursts to queue, and a replica that queues runs every slot, where its KV "
    "working set is largest. Default 98.")


class Tuning(ApiModel):
    """How the operator tunes TP, max-num-seqs and replicas, and the guardrails on each change. A field left
    unset takes the ServingPolicy's (spec.policyRef), else the operator's default."""

    model_config = ConfigDict(json_schema_extra={"x-kubernetes-validations": [rule(
        "!has(self.tensorParallelSizes) || self.tensorParallelSizes.all(t, t in "
        + "[" + ", ".join(str(t) for t in ALLOWED_TP_SIZES) + "])",
        "tensorParallelSizes: each must be one of " + ", ".join(str(t) for t in ALLOWED_TP_SIZES),
        ".tensorParallelSizes"), *duration_rules({"interval": INTERVAL_RANGE, "staleAfter": STALE_AFTER_RANGE})]})

    mode: TuningMode = Field(default=TuningMode.AUTO, description=(
        "Auto applies decisions; Recommend only writes them to status.recommendation; Off holds the workload "
        "as it is, as the infertune.io/paused: \"true\" annotation does. In every mode a resource with no "
        "workload yet gets one, at the layout planned on the workload hints. Default Auto."))
    tensor_parallel_sizes: list[int] | None = Field(default=None, min_length=1, max_length=7,
                                                    description=TP_SIZES_DESCRIPTION,
                                                    json_schema_extra=TP_SIZES_LIST_TYPE)
    concurrency: ConcurrencyRange | None = None
    replicas: ReplicaRange | None = None
    kv_headroom_percent: int | None = Field(default=None, ge=0, le=90, description=KV_HEADROOM_DESCRIPTION)
    burst_headroom_percent: int | None = Field(default=None, ge=0, le=300, description=BURST_HEADROOM_DESCRIPTION)
    burst_percentile: int | None = Field(default=None, ge=50, le=99, description=BURST_PERCENTILE_DESCRIPTION)
    hysteresis_percent: Percent | None = Field(default=None, description=HYSTERESIS_DESCRIPTION)
    max_replica_step: int | None = Field(default=None, ge=1, le=REPLICAS_MAX, description=MAX_REPLICA_STEP_DESCRIPTION)
    interval: Duration = Field(default="30s", description=(
        "How often the tuning cycle runs for this resource. It runs on the operator's timer (--cycle-seconds, "
        "30 s unless set): a shorter interval runs no more often than the timer, a longer one at the first "
        "firing after it has passed. Default 30s. 0s..24h. " + DURATION_FORMAT))
    stale_after: Duration | None = Field(default=None, description=STALE_AFTER_DESCRIPTION)
    cooldowns: Cooldowns | None = None

    @field_validator("tensor_parallel_sizes")
    @classmethod
    def _distinct_tp(cls, value: list[int] | None) -> list[int] | None:
        return distinct_tp_sizes(value)

    @field_validator("interval")
    @classmethod
    def _interval_in_range(cls, value: str) -> str | None:
        return check_duration_range(value, INTERVAL_RANGE)

    @field_validator("stale_after")
    @classmethod
    def _stale_after_in_range(cls, value: str | None) -> str | None:
        return check_duration_range(value, STALE_AFTER_RANGE)

    @model_validator(mode="after")
    def _allowed_tp(self) -> Tuning:
        for index, tp in enumerate(self.tensor_parallel_sizes or ()):
            if tp not in ALLOWED_TP_SIZES:
                raise ValueError(f"spec.tuning.tensorParallelSizes[{index}]: {tp} is not one of "
                                 + ", ".join(str(t) for t in ALLOWED_TP_SIZES))
        return self
