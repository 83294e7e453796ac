"""ServingPolicy: cluster-scoped SLO and guardrail presets, and the pure merge in which an
InferenceDeployment's own fields override its policy's, field by field."""

from __future__ import annotations

from typing import Any

from pydantic import Field, ValidationError

from infertune.api.spec import (
    BURST_HEADROOM_DESCRIPTION,
    BURST_PERCENTILE_DESCRIPTION,
    ApiModel,
    ConcurrencyRange,
    Cooldowns,
    Duration,
    InferenceDeploymentSpec,
    ReplicaRange,
    Slo,
    WorkloadHints,
    describe_error,
)
from infertune.errors import SpecError

POLICY_KIND = "ServingPolicy"
POLICY_PLURAL = "servingpolicies"


class PolicyTuning(ApiModel):
    """The guardrail presets a policy may set; mode and layout bounds stay with each resource."""

    tensor_parallel_sizes: list[int] | None = Field(default=None, min_length=1, max_length=7)
    concurrency: ConcurrencyRange | None = None
    replicas: ReplicaRange | None = None
    kv_headroom_percent: int | None = Field(default=None, ge=0, le=90)
    burst_headroom_percent: int | None = Field(default=None, ge=0, le=300, description=BURST_HEADROOM_DESCRIPTION)
    burst_percentile: int | None = Field(default=None, ge=50, le=99, description=BURST_PERCENTILE_DESCRIPTION)
    hysteresis_percent: int | None = Field(default=None, ge=0, le=100)
    max_replica_step: int | None = Field(default=None, ge=1)
    stale_after: Duration | None = None
    cooldowns: Cooldowns | None = None


class ServingPolicySpec(ApiModel):
    description: str = ""
    slo: Slo | None = None
    workload: WorkloadHints | None = None
    tuning: PolicyTuning | None = None


def parse_policy(raw: Any) -> ServingPolicySpec:
    try:
        return ServingPolicySpec.model_validate(raw or {})
    except ValidationError as exc:
        raise SpecError(describe_error(exc, "ServingPolicy spec")) from None


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
                        f"{describe_error(exc, 'spec')}") from None
