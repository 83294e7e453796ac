"""The InferenceDeployment spec as pydantic models: the single source of the CRD schema and of the
operator's own validation.

No floats (Kubernetes API conventions): percents are integers, times are milliseconds or duration
strings, prices are decimal strings. Fields a ServingPolicy may supply default to None here and get
their effective default only after the policy merge (`infertune.api.policy`), because a CRD default
would make every resource silently override its policy.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic.alias_generators import to_camel

from infertune.api.quantities import DECIMAL_PATTERN, DURATION_PATTERN
from infertune.errors import SpecError

GROUP = "infertune.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "InferenceDeployment"
PLURAL = "inferencedeployments"

ALLOWED_TP_SIZES: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64)
# Flags the operator sets itself; a user arg naming one of them is a spec error, not a silent override.
OWNED_ARGS: dict[str, tuple[str, ...]] = {
    "vllm": ("--tensor-parallel-size", "-tp", "--max-num-seqs", "--gpu-memory-utilization", "--port"),
    "sglang": ("--tp-size", "--tp", "--max-running-requests", "--mem-fraction-static", "--port"),
}

Duration = Annotated[str, Field(pattern=DURATION_PATTERN)]
Decimal = Annotated[str, Field(pattern=DECIMAL_PATTERN)]
Percent = Annotated[int, Field(ge=0, le=100)]


class TuningMode(StrEnum):
    """Auto applies decisions; Recommend only writes them to status; Off holds the workload as it is."""

    AUTO = "Auto"
    RECOMMEND = "Recommend"
    OFF = "Off"


EngineKind = Literal["vllm", "sglang"]
WorkloadPreset = Literal["coding-agent", "chat", "batch"]


def rule(expression: str, message: str, field_path: str | None = None) -> dict[str, Any]:
    """One CEL `x-kubernetes-validations` entry, attached to the schema by crdgen."""
    entry: dict[str, Any] = {"rule": expression, "message": message}
    if field_path:
        entry["fieldPath"] = field_path
    return entry


class ApiModel(BaseModel):
    """camelCase on the wire, snake_case in Python; unknown fields are an error, not a silent drop."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True)

    def wire(self) -> dict[str, Any]:
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")


class KeyRef(ApiModel):
    """A key in a Secret or ConfigMap of the resource's namespace."""

    name: str = Field(min_length=1, description="Name of the object in the resource's namespace.")
    key: str = Field(min_length=1, description="Key inside the object.")


class ConfigMapModelRef(ApiModel):
    name: str = Field(min_length=1, description="ConfigMap holding a Hugging Face config.json.")
    key: str = Field(default="config.json", description="Key holding the JSON.")


class Architecture(ApiModel):
    """An inline architecture for a model outside the catalog; integer fields only."""

    layers: int = Field(ge=1)
    hidden_size: int = Field(ge=1)
    attention_heads: int = Field(ge=1)
    attention: Literal["GQA", "MLA"] = "GQA"
    kv_heads: int | None = Field(default=None, ge=1, description="GQA only.")
    head_dim: int | None = Field(default=None, ge=1, description="GQA only.")
    kv_lora_rank: int | None = Field(default=None, ge=1, description="MLA only.")
    rope_head_dim: int | None = Field(default=None, ge=0, description="MLA only.")
    ffn_width: int = Field(ge=1, description="FFN width (per expert for MoE).")
    total_params: int = Field(ge=1)
    active_params: int = Field(ge=1)
    weight_bits: int = Field(default=16, ge=1, le=32, description="Bits per weight (16 BF16, 8 FP8, 4 FP4).")
    kv_cache_bits: int = Field(default=16, ge=1, le=32)
    routed_experts: int | None = Field(default=None, ge=1)
    experts_per_token: int | None = Field(default=None, ge=1)
    moe_layers: int | None = Field(default=None, ge=1)
    expert_params: int | None = Field(default=None, ge=1)
    shared_experts: int = Field(default=0, ge=0)

    @model_validator(mode="after")
    def _consistent(self) -> Architecture:
        if self.attention == "GQA" and (self.kv_heads is None or self.head_dim is None):
            raise ValueError("spec.model.architecture: GQA needs kvHeads and headDim")
        if self.attention == "MLA" and self.kv_lora_rank is None:
            raise ValueError("spec.model.architecture: MLA needs kvLoraRank")
        if self.active_params > self.total_params:
            raise ValueError("spec.model.architecture.activeParams: exceeds totalParams")
        return self


class ModelSource(ApiModel):
    """Exactly one of profile, architecture or configMapRef says what the model is."""

    model_config = ConfigDict(json_schema_extra={"x-kubernetes-validations": [rule(
        "[has(self.profile), has(self.architecture), has(self.configMapRef)].filter(x, x).size() == 1",
        "exactly one of profile, architecture or configMapRef must be set")]})

    weights: str = Field(min_length=1, description="What the engine loads: a Hugging Face id or a path.")
    profile: str | None = Field(default=None, description="A catalog profile, e.g. kimi-k2.6.")
    architecture: Architecture | None = None
    config_map_ref: ConfigMapModelRef | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> ModelSource:
        given = [n for n in ("profile", "architecture", "config_map_ref") if getattr(self, n) is not None]
        if len(given) != 1:
            raise ValueError("spec.model: exactly one of profile, architecture or configMapRef must be set")
        return self


class EnvVar(ApiModel):
    name: str = Field(min_length=1)
    value: str = ""


class Resources(ApiModel):
    """Extra CPU/memory for the engine container; the operator sets nvidia.com/gpu itself."""

    requests: dict[str, str] = Field(default_factory=dict)
    limits: dict[str, str] = Field(default_factory=dict)


def _owned_flag_rule(kind: str) -> str:
    flags = " || ".join(f"a == '{f}' || a.startsWith('{f}=')" for f in OWNED_ARGS[kind])
    return f"self.kind != '{kind}' || !has(self.extraArgs) || !self.extraArgs.exists(a, {flags})"


class Engine(ApiModel):
    model_config = ConfigDict(json_schema_extra={"x-kubernetes-validations": [
        rule(_owned_flag_rule("vllm"), "extraArgs must not set flags the operator owns: "
             + ", ".join(OWNED_ARGS["vllm"]), ".extraArgs"),
        rule(_owned_flag_rule("sglang"), "extraArgs must not set flags the operator owns: "
             + ", ".join(OWNED_ARGS["sglang"]), ".extraArgs"),
    ]})

    kind: EngineKind = "vllm"
    image: str = Field(default="vllm/vllm-openai:v0.11.0", min_length=1)
    extra_args: list[Annotated[str, Field(max_length=1024)]] = Field(
        default_factory=list, max_length=128, description="Passed through after the operator's flags.")
    env: list[EnvVar] = Field(default_factory=list, max_length=128)
    resources: Resources = Field(default_factory=Resources)
    port: int = Field(default=8000, ge=1, le=65535)
    startup_seconds: int = Field(default=600, ge=1, description="Expected model load time.")
    gpu_memory_utilization_percent: int = Field(default=90, ge=10, le=99)

    @model_validator(mode="after")
    def _no_owned_flags(self) -> Engine:
        owned = OWNED_ARGS[self.kind]
        for index, arg in enumerate(self.extra_args):
            if arg.split("=", 1)[0] in owned:
                raise ValueError(f"spec.engine.extraArgs[{index}]: {arg.split('=', 1)[0]} is owned by the "
                                 f"operator; remove it (owned: {', '.join(owned)})")
        return self


class Toleration(ApiModel):
    key: str | None = None
    operator: Literal["Equal", "Exists"] | None = None
    value: str | None = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None
    toleration_seconds: int | None = None


class Hardware(ApiModel):
    gpu: str = Field(default="b200", description="GPU catalog name (b200, h200, h100, gb200, b300).")
    node_selector: dict[str, str] = Field(default_factory=dict)
    tolerations: list[Toleration] = Field(default_factory=list)
    gpus_per_node: int | None = Field(default=None, ge=1, le=72, description="Default: the GPU's HGX node.")
    pool_gpus: int | None = Field(default=None, ge=1, description="GPUs this deployment may use in all.")
    price_per_gpu_hour: Decimal | None = Field(default=None, description="USD, e.g. '6' or '5.50'.")


class WorkloadHints(ApiModel):
    """The traffic shape assumed until metrics say otherwise."""

    preset: WorkloadPreset | None = None
    fresh_tokens: int | None = Field(default=None, ge=0)
    cached_tokens: int | None = Field(default=None, ge=0)
    output_tokens: int | None = Field(default=None, ge=1)
    expected_requests_per_second: Decimal | None = None


class Ttft(ApiModel):
    percentile: int | None = Field(default=None, ge=50, le=99)
    limit: Duration | None = Field(default=None, description="e.g. '3s' or '800ms'.")


class Slo(ApiModel):
    min_stream_tokens_per_second: int | None = Field(default=None, ge=0)
    ttft: Ttft | None = None


class PolicyRef(ApiModel):
    name: str = Field(min_length=1)


def _range_rule(what: str) -> dict[str, Any]:
    return rule("!has(self.min) || !has(self.max) || self.min <= self.max", f"{what}: min must be <= max")


class ConcurrencyRange(ApiModel):
    model_config = ConfigDict(json_schema_extra={"x-kubernetes-validations": [_range_rule("concurrency")]})

    min: int | None = Field(default=None, ge=1, le=4096)
    max: int | None = Field(default=None, ge=1, le=4096)

    @model_validator(mode="after")
    def _ordered(self) -> ConcurrencyRange:
        if self.min is not None and self.max is not None and self.min > self.max:
            raise ValueError(f"spec.tuning.concurrency: min {self.min} > max {self.max}")
        return self


class ReplicaRange(ApiModel):
    model_config = ConfigDict(json_schema_extra={"x-kubernetes-validations": [_range_rule("replicas")]})

    min: int | None = Field(default=None, ge=0, le=1024)
    max: int | None = Field(default=None, ge=1, le=1024)

    @model_validator(mode="after")
    def _ordered(self) -> ReplicaRange:
        if self.min is not None and self.max is not None and self.min > self.max:
            raise ValueError(f"spec.tuning.replicas: min {self.min} > max {self.max}")
        return self


class Cooldowns(ApiModel):
    scale_up: Duration | None = None
    scale_down: Duration | None = None
    relayout: Duration | None = None
    scale_down_stabilization: Duration | None = None


class Tuning(ApiModel):
    model_config = ConfigDict(json_schema_extra={"x-kubernetes-validations": [rule(
        "!has(self.tensorParallelSizes) || self.tensorParallelSizes.all(t, t in "
        + "[" + ", ".join(str(t) for t in ALLOWED_TP_SIZES) + "])",
        "tensorParallelSizes: each must be one of " + ", ".join(str(t) for t in ALLOWED_TP_SIZES),
        ".tensorParallelSizes")]})

    mode: TuningMode = TuningMode.AUTO
    tensor_parallel_sizes: list[int] | None = Field(default=None, min_length=1, max_length=7)
    concurrency: ConcurrencyRange | None = None
    replicas: ReplicaRange | None = None
    kv_headroom_percent: int | None = Field(default=None, ge=0, le=90)
    burst_headroom_percent: int | None = Field(default=None, ge=0, le=300, description=(
        "Capacity kept spare above the measured demand when replicas are sized, for bursts faster than a "
        "model load; the GPUs it holds are reported in status.recommendation.burstHeadroomGpus. Default 15."))
    hysteresis_percent: Percent | None = None
    max_replica_step: int | None = Field(default=None, ge=1)
    interval: Duration = "30s"
    stale_after: Duration | None = None
    cooldowns: Cooldowns | None = None

    @model_validator(mode="after")
    def _allowed_tp(self) -> Tuning:
        for index, tp in enumerate(self.tensor_parallel_sizes or ()):
            if tp not in ALLOWED_TP_SIZES:
                raise ValueError(f"spec.tuning.tensorParallelSizes[{index}]: {tp} is not one of "
                                 + ", ".join(str(t) for t in ALLOWED_TP_SIZES))
        return self


class PrometheusSource(ApiModel):
    url: str | None = Field(default=None, description="Default: the operator's --prometheus-url.")
    bearer_token_secret_ref: KeyRef | None = None
    ca_config_map_ref: KeyRef | None = None
    ca_secret_ref: KeyRef | None = None
    timeout: Duration = "5s"


class Metrics(ApiModel):
    source: Literal["Prometheus", "Pods"] = "Prometheus"
    prometheus: PrometheusSource | None = None


class InferenceDeploymentSpec(ApiModel):
    model: ModelSource
    engine: Engine = Field(default_factory=Engine)
    hardware: Hardware = Field(default_factory=Hardware)
    workload: WorkloadHints | None = None
    slo: Slo | None = None
    policy_ref: PolicyRef | None = None
    tuning: Tuning = Field(default_factory=Tuning)
    metrics: Metrics = Field(default_factory=Metrics)
    replicas: int | None = Field(default=None, ge=0, le=1024, description=(
        "Pins the replica count (what `kubectl scale` sets); TP and concurrency are still tuned."))


def parse_spec(raw: Any) -> InferenceDeploymentSpec:
    """Validates a resource's spec; a SpecError names the first bad field as `spec.<path>`."""
    from pydantic import ValidationError

    try:
        return InferenceDeploymentSpec.model_validate(raw or {})
    except ValidationError as exc:
        raise SpecError(describe_error(exc, "spec")) from None


def describe_error(exc: Any, root: str) -> str:
    """One line naming the first failing field, whatever pydantic raised."""
    first = exc.errors()[0]
    path = ".".join([root, *(str(p) if not isinstance(p, int) else f"[{p}]" for p in first["loc"])])
    path = path.replace(".[", "[")
    message = str(first.get("msg", "invalid")).removeprefix("Value error, ")
    if message.startswith(root + "."):
        return message
    return f"{path}: {message}"
