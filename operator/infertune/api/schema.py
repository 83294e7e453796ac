"""What every model of the API shares: camelCase on the wire with unknown fields refused, the CEL rule
helper crdgen attaches, the string and integer forms Kubernetes conventions ask for (no floats; the string
formats of api/formats.py as field types), and the limits several resources state.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Annotated, Any, get_args

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    GetCoreSchemaHandler,
    GetJsonSchemaHandler,
    ValidationInfo,
    field_validator,
)
from pydantic.alias_generators import to_camel
from pydantic_core import CoreSchema, core_schema

from infertune.api.formats import (
    CATALOG_NAME,
    DATA_KEY,
    DESCRIPTION,
    IMAGE,
    LABEL_KEY,
    LABEL_VALUE,
    OBJECT_NAME,
    QUANTITY,
    RESOURCE_NAME,
    TAINT_KEY,
    Format,
    shown,
)
from infertune.api.quantities import DECIMAL_PATTERN, DURATION_PATTERN, parse_duration

ALLOWED_TP_SIZES: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64)
# The most streams a replica may be given (max-num-seqs): vLLM's own default on GPUs of 70 GiB and more
# (docs/sources.md). It bounds what one resource's plan costs (docs/reliability.md).
CONCURRENCY_MAX = 1024
# The most replicas of one resource (spec.replicas, spec.tuning.replicas): 1,024 replicas at TP 8 are 8,192
# GPUs, more than any single model deployment runs; it bounds what one plan costs as CONCURRENCY_MAX does.
REPLICAS_MAX = 1024

# Physical ranges of what a user states in a resource or a policy. Each is generous for any real deployment
# and keeps the figure one the planner and the Kubernetes objects built from it can carry (int32 probe
# thresholds, numpy int64 arrays, finite floats).
#
# GPUs one deployment may use (spec.hardware.poolGpus): the most it could ever hold is REPLICAS_MAX replicas
# at the largest TP, twice over while a re-layout rolls (old and new pods together), 131,072; a larger pool
# limits nothing. It is also about the size of the largest GPU clusters built (~100K-200K GPUs).
POOL_GPUS_MAX = 2 * REPLICAS_MAX * max(ALLOWED_TP_SIZES)
# Tokens of one request (spec.workload, spec.model.loadTests[].contextTokens): no model holds a context of
# more than 10M tokens (Llama 4 Scout's, the longest published), so no mean prompt or answer is longer.
CONTEXT_TOKENS_MAX = 10_000_000
# A per-stream decode floor (spec.slo.minStreamTokensPerSecond): the fastest single streams published run
# 2-3K tokens/s (wafer-scale engines), GPUs a few hundred; a floor above 10,000 no hardware can meet.
STREAM_TOKENS_PER_SECOND_MAX = 10_000
# A model load (spec.engine.startupSeconds): a multi-TB checkpoint pulled over a slow link loads in hours;
# a day is past any. The startup probe's failureThreshold and the Deployment's progressDeadlineSeconds are
# built from it, and both are int32 in Kubernetes.
STARTUP_SECONDS_MAX = 86_400
# How long a pod tolerates a NoExecute taint (spec.hardware.tolerations[].tolerationSeconds). Kubernetes
# evicts at once for 0 and below, so 0 is the least; a taint tolerated for more than 30 days is tolerated
# for good, which is what leaving the field unset says.
TOLERATION_SECONDS_MAX = 30 * 86_400
# The most tolerations of the engine pods (spec.hardware.tolerations): more than any pod carries, and a bound
# on what the CRD's CEL rules on each toleration cost the API server (an unbounded list is estimated at a
# million items).
TOLERATIONS_MAX = 64
# Cooldowns between changes (spec.tuning.cooldowns scaleUp, scaleDown, relayout): at most 30 days, a
# month's freeze; a longer one is "never", which a resource says with mode Recommend or Off.
COOLDOWN_RANGE = ("0s", "720h")
# The scale-down stabilisation window: the HPA's own ends at 1 h, and the operator stretches it to the model
# load (at most STARTUP_SECONDS_MAX, a day); a longer window would keep a replica for a dip days old.
STABILIZATION_RANGE = ("0s", "24h")
# Requests/s a resource declares it expects (spec.workload.expectedRequestsPerSecond): a million a second is
# past the busiest public LLM APIs' whole traffic; the count of replicas sized for more overflows int64.
REQUESTS_PER_SECOND_MAX = 1_000_000.0
# USD for one GPU-hour (spec.hardware.pricePerGpuHour): on-demand B200s rent for a few dollars, and no GPU for
# more than a hundred; 10,000 catches a price in cents or per month, and keeps every cost finite.
PRICE_PER_GPU_HOUR_MAX = 10_000.0
# No decimal needs more characters; a bound on the length bounds what parsing it and its CEL rule cost.
DECIMAL_MAX_LENGTH = 32
# A TTFT target (spec.slo.ttft.limit): above 0, which no request meets, and at most a day, the completion
# window of the batch APIs, the slowest service anyone sells; a longer limit is no target.
TTFT_LIMIT_RANGE = ("1ms", "24h")
# The tuning interval and staleAfter: at most a day; a cycle or a metric older than that misses the daily
# traffic profile the forecast reads.
INTERVAL_RANGE = ("0s", "24h")
STALE_AFTER_RANGE = ("0s", "24h")
# No duration needs more characters; a bound on the length bounds what the API server's CEL rules cost.
DURATION_MAX_LENGTH = 32

Duration = Annotated[str, Field(pattern=DURATION_PATTERN, max_length=DURATION_MAX_LENGTH)]
Decimal = Annotated[str, Field(pattern=DECIMAL_PATTERN, max_length=DECIMAL_MAX_LENGTH)]
Percent = Annotated[int, Field(ge=0, le=100)]

# How a duration is written (DURATION_PATTERN), for the description of every duration field.
DURATION_FORMAT = "A duration: numbers with units h, m, s or ms, no spaces, e.g. '90s', '1m30s', '1.5h', '800ms'."


class TuningMode(StrEnum):
    """Auto applies decisions; Recommend only writes them to status; Off holds the workload as it is."""

    AUTO = "Auto"
    RECOMMEND = "Recommend"
    OFF = "Off"


def rule(expression: str, message: str, field_path: str | None = None) -> dict[str, Any]:
    """One CEL `x-kubernetes-validations` entry, attached to the schema by crdgen."""
    entry: dict[str, Any] = {"rule": expression, "message": message}
    if field_path:
        entry["fieldPath"] = field_path
    return entry


def duration_rules(ranges: dict[str, tuple[str, str]]) -> list[dict[str, Any]]:
    """The CEL rules that hold each named duration field of a model (its camelCase name) within its range,
    as the operator's `check_duration_range` does."""
    return [rule(f"!has(self.{name}) || (duration(self.{name}) >= duration('{low}') && "
                 f"duration(self.{name}) <= duration('{high}'))", f"{name}: from {low} to {high}", f".{name}")
                for name, (low, high) in ranges.items()]


def decimal_rule(name: str, low: float, high: float, unit: str) -> dict[str, Any]:
    """The CEL rule that holds one decimal-string field (its camelCase name) within [low, high], as the
    operator's `check_decimal_range` does."""
    return rule(f"!has(self.{name}) || (double(self.{name}) >= {low!r} && double(self.{name}) <= {high!r})",
                f"{name}: from {low:.12g} to {high:.12g}{unit}", f".{name}")


def check_decimal_range(value: str | None, low: float, high: float, why: str) -> str | None:
    """`value` (a decimal string) if it lies within [low, high]; the ValueError a field validator raises
    otherwise, ending in `why`."""
    if value is None:
        return None
    if not low <= float(value) <= high:
        raise ValueError(f"{value} is outside the allowed range {low:.12g}..{high:.12g}: {why}")
    return value


def check_duration_range(value: str | None, bounds: tuple[str, str]) -> str | None:
    """`value` if it lies within `bounds` (durations); the ValueError a field validator raises otherwise."""
    if value is None:
        return None
    low, high = bounds
    if not parse_duration(low) <= parse_duration(value) <= parse_duration(high):
        raise ValueError(f"{value} is outside the allowed range {low}..{high}")
    return value


def _refuse(why: str | None) -> None:
    if why is not None:
        raise ValueError(why)


class _Checked:
    """Annotated metadata whose `check` runs after pydantic has validated the type."""

    def check(self, value: Any) -> Any:
        raise NotImplementedError

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler) -> CoreSchema:
        return core_schema.no_info_after_validator_function(self.check, handler(source))


@dataclass(frozen=True)
class Formatted(_Checked):
    """A string field of this format: its CRD schema carries the format's patterns, and the operator's
    validator refuses what they refuse, naming the first control character or the rule broken."""

    format: Format

    def check(self, value: str) -> str:
        _refuse(self.format.refusal(value))
        return value

    def __get_pydantic_json_schema__(self, schema: CoreSchema, handler: GetJsonSchemaHandler) -> dict[str, Any]:
        return {**handler(schema), **self.format.schema()}


# The most entries a string map of the spec holds (a node selector, a container's requests): more than any
# pod carries, and a bound on what the CRD's CEL rule on the keys costs the API server.
MAP_ENTRIES_MAX = 64


@dataclass(frozen=True)
class FormattedMap(_Checked):
    """A map of strings whose keys and values have formats: the values are checked by the CRD's
    `additionalProperties`, the keys by a CEL rule (a structural schema has no `propertyNames`)."""

    key: Format
    value: Format

    def check(self, value: dict[str, str]) -> dict[str, str]:
        if len(value) > MAP_ENTRIES_MAX:
            raise ValueError(f"has {len(value)} entries; at most {MAP_ENTRIES_MAX}")
        for key, text in value.items():
            _refuse(self.key.refusal(key, f"key {shown(key)}")
                    or self.value.refusal(text, f"the value {shown(text)} of {shown(key)}"))
        return value

    def __get_pydantic_json_schema__(self, schema: CoreSchema, handler: GetJsonSchemaHandler) -> dict[str, Any]:
        out = handler(schema)
        out["additionalProperties"] = {"type": "string", **self.value.schema()}
        out["maxProperties"] = MAP_ENTRIES_MAX
        out["x-kubernetes-validations"] = [rule(
            f"self.all(k, {self.key.cel('k')})", f"every key must be {self.key.what}: {self.key.rule}")]
        return out


ObjectName = Annotated[str, Formatted(OBJECT_NAME)]
DataKey = Annotated[str, Formatted(DATA_KEY)]
LabelValue = Annotated[str, Formatted(LABEL_VALUE)]
TaintKey = Annotated[str, Formatted(TAINT_KEY)]
Image = Annotated[str, Formatted(IMAGE)]
CatalogName = Annotated[str, Formatted(CATALOG_NAME)]
Description = Annotated[str, Formatted(DESCRIPTION)]
LabelMap = Annotated[dict[str, str], FormattedMap(LABEL_KEY, LABEL_VALUE)]
ResourceMap = Annotated[dict[str, str], FormattedMap(RESOURCE_NAME, QUANTITY)]


def _takes_integer(annotation: Any) -> bool:
    """Whether a field's type holds an integer (`int`, `int | None`, `tuple[int, ...]`)."""
    return annotation is int or any(_takes_integer(arg) for arg in get_args(annotation))


def _takes(annotation: Any, kind: type) -> bool:
    """Whether a field's type holds a `kind` anywhere (`float | None`, `tuple[int, ...]`, `Annotated[str, ...]`)."""
    return annotation is kind or any(_takes(arg, kind) for arg in get_args(annotation))


class ApiModel(BaseModel):
    """camelCase on the wire, snake_case in Python; unknown fields are an error, not a silent drop."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True)

    @field_validator("*", mode="before")
    @classmethod
    def _no_boolean_for_an_integer(cls, value: Any, info: ValidationInfo) -> Any:
        """pydantic reads `true` as 1 where an integer goes (`poolGpus: true` planned a pool of one GPU,
        `tensorParallelSizes: [true]` TP 1); the API server refuses a boolean there, and so does this."""
        field = cls.model_fields.get(info.field_name or "")
        items = value if isinstance(value, list | tuple) else (value,)
        if field is not None and any(isinstance(v, bool) for v in items) and _takes_integer(field.annotation):
            shown_bool = str(next(v for v in items if isinstance(v, bool))).lower()
            raise ValueError(f"expected an integer, got the boolean {shown_bool} (YAML reads true, false, yes, no, "
                             "on and off as booleans)")
        if (field is not None and any(isinstance(v, str) for v in items) and not _takes(field.annotation, str)
                and (_takes(field.annotation, int) or _takes(field.annotation, float))):
            # pydantic's lax mode reads `minStreamTokensPerSecond: "25"` as 25; the API server refuses a string
            # where the CRD wants a number, so `render` and `plan -f` planned a resource kubectl cannot apply.
            text = next(v for v in items if isinstance(v, str))
            raise ValueError(f"expected a number, got the string {text[:40]!r} (write it without quotes)")
        return value

    def wire(self) -> dict[str, Any]:
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")


class KeyRef(ApiModel):
    """A key in a Secret or ConfigMap of the resource's namespace."""

    name: ObjectName = Field(description="Name of the object in the resource's namespace (a DNS subdomain).")
    key: DataKey = Field(description=(
        "Key inside the object: letters, digits, '-', '_' and '.', not starting with '..'."))
