"""ServingPolicy: cluster-scoped SLO and guardrail presets, and the pure merge in which an
InferenceDeployment's own fields override its policy's, field by field."""

from __future__ import annotations

from typing import Any

from pydantic import ConfigDict, Field, ValidationError, field_validator

from infertune.api.schema import (
    REPLICAS_MAX,
    STALE_AFTER_RANGE,
    ApiModel,
    Description,
    Duration,
    check_duration_range,
    duration_rules,
)
from infertune.api.spec import (
    InferenceDeploymentSpec,
    Slo,
    WorkloadHints,
    describe_error,
)
from infertune.api.tuning import (
    BURST_HEADROOM_DESCRIPTION,
    BURST_PERCENTILE_DESCRIPTION,
    HYSTERESIS_DESCRIPTION,
    KV_HEADROOM_DESCRIPTION,
    MAX_REPLICA_STEP_DESCRIPTION,
    STALE_AFTER_DESCRIPTION,
    TP_SIZES_DESCRIPTION,
    TP_SIZES_LIST_TYPE,
    ConcurrencyRange,
    Cooldowns,
    ReplicaRange,
    distinct_tp_sizes,
)
from infertune.errors import SpecError

POLICY_KIND = "ServingPolicy"
POLICY_PLURAL = "servingpolicies"


class PolicyTuning(ApiModel):
    """The tuning bounds and guardrails a policy may preset; mode and interval stay with each resource."""

    model_config = ConfigDict(json_schema_extra={"x-kubernetes-validations": [*duration_rules(
        {"staleAfter": STALE_AFTER_RANGE})]})

    tensor_parallel_sizes: list[int] | None = Field(default=None, min_length=1, max_length=7,
                                                    description=TP_SIZES_DESCRIPTION,
                                                    json_schema_extra=TP_SIZES_LIST_TYPE)
    concurrency: ConcurrencyRange | None = None
    replicas: ReplicaRange | None = None
    kv_headroom_percent: int | None = Field(default=None, ge=0, le=90, description=KV_HEADROOM_DESCRIPTION)
    burst_headroom_percent: int | None = Field(default=None, ge=0, le=300, description=BURST_HEADROOM_DESCRIPTION)
    burst_percentile: int | None = Field(default=None, ge=50, le=99, description=BURST_PERCENTILE_DESCRIPTION)
    hysteresis_percent: int | None = Field(default=None, ge=0, le=100, description=HYSTERESIS_DESCRIPTION)
    max_replica_step: int | None = Field(default=None, ge=1, le=REPLICAS_MAX, description=MAX_REPLICA_STEP_DESCRIPTION)
    stale_after: Duration | None = Field(default=None, description=STALE_AFTER_DESCRIPTION)
    cooldowns: Cooldowns | None = None

    @field_validator("tensor_parallel_sizes")
    @classmethod
    def _distinct_tp(cls, value: list[int] | None) -> list[int] | None:
        return distinct_tp_sizes(value)

    @field_validator("stale_after")
    @classmethod
    def _stale_after_in_range(cls, value: str | None) -> str | None:
        return check_duration_range(value, STALE_AFTER_RANGE)


class ServingPolicySpec(ApiModel):
    """Presets for the InferenceDeployments that name this policy in spec.policyRef: each field applies where
    the resource leaves it unset, field by field."""

    description: Description = Field(default="", description=(
        "Free text saying what the policy is for; it may run over several lines, but hold no NUL character."))
    slo: Slo | None = None
    workload: WorkloadHints | None = None
    tuning: PolicyTuning | None = None


def parse_policy(raw: Any) -> ServingPolicySpec:
    if raw is not None and not isinstance(raw, dict):
        # The CRD's spec is an object; a list or a string read as `raw or {}` named a missing field instead.
        raise SpecError(f"ServingPolicy spec: must be an object, got {type(raw).__name__}")
    try:
        return ServingPolicySpec.model_validate(raw or {})
    except ValidationError as exc:
        raise SpecError(describe_error(exc, "ServingPolicy spec", ServingPolicySpec)) from None


def _deep_merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """Override wins per leaf; lists are leaves (a resource's TP list replaces the policy's)."""
    out = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def apply_policy(spec: InferenceDeploymentSpec, policy: ServingPolicySpec | None) -> InferenceDeploymentSpec:
    """The effective spec: the policy's slo/workload/tuning under the resource's own fields."""
    if policy is None:
        return spec
    base = policy.wire()
    base.pop("description", None)
    merged = _deep_merge(base, spec.wire())
    try:
        return InferenceDeploymentSpec.model_validate(merged)
    except ValidationError as exc:
        name = spec.policy_ref.name if spec.policy_ref else ""
        raise SpecError(f"spec: does not combine with ServingPolicy {name}: "
                        f"{describe_error(exc, 'spec', InferenceDeploymentSpec)}") from None
