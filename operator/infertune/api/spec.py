"""The InferenceDeployment spec as pydantic models: the single source of the CRD schema and of the
operator's own validation.

No floats (Kubernetes API conventions): percents are integers, times are milliseconds or duration
strings, prices are decimal strings. Fields a ServingPolicy may supply default to None here and get
their effective default only after the policy merge (`infertune.api.policy`), because a CRD default
would make every resource silently override its policy.
"""

from __future__ import annotations

import re
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic.alias_generators import to_camel

from infertune.api.quantities import DECIMAL_PATTERN, DURATION_PATTERN, parse_duration
from infertune.errors import SpecError

GROUP = "infertune.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "InferenceDeployment"
PLURAL = "inferencedeployments"

ALLOWED_TP_SIZES: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64)
# The most streams a replica may be given (max-num-seqs): vLLM's own default on GPUs of 70 GiB and more
# (docs/sources.md). It bounds what one resource's plan costs (docs/reliability.md).
CONCURRENCY_MAX = 1024
# Flags the operator sets itself, or that would undo what it sets (more GPUs per replica than TP; any
# flag at all from a config file); a user arg naming one of them is a spec error, not a silent override.
OWNED_ARGS: dict[str, tuple[str, ...]] = {
    "vllm": ("--tensor-parallel-size", "-tp", "--max-num-seqs", "--gpu-memory-utilization", "--port",
             "--pipeline-parallel-size", "-pp", "--data-parallel-size", "-dp", "--config"),
    "sglang": ("--tp-size", "--tp", "--max-running-requests", "--mem-fraction-static", "--port", "--host",
               "--nnodes", "--node-rank", "--dist-init-addr", "--pp-size", "--dp-size", "--dp", "--config"),
}


def flag_name(arg: str) -> str | None:
    """The option an engine's argparse reads from `arg`, as vLLM's parser normalises it: the part before
    `=`, with `_` read as `-` in a long option. None for a value, a positional, `-` or `--`."""
    if not arg.startswith("-") or arg in ("-", "--"):
        return None
    name = arg.split("=", 1)[0]
    return "--" + name[2:].replace("_", "-") if name.startswith("--") else name


def owned_flag(kind: str, arg: str) -> str | None:
    """The owned flag `arg` would set: the flag itself, in any spelling, or an abbreviation argparse
    expands to it (argparse takes any unique prefix of a long option, and `-t` for `-tp`)."""
    name = flag_name(arg)
    if name is None:
        return None
    for flag in OWNED_ARGS[kind]:
        if flag.startswith("--") == name.startswith("--") and flag.startswith(name) and name.strip("-"):
            return flag
    return None


def _owned_flag_regex(kind: str) -> str:
    """`owned_flag` as one RE2 pattern for the CRD's CEL rule: each owned flag or any prefix of it,
    `-` and `_` alike in long options, optionally followed by `=value`."""
    def prefixes(flag: str) -> str:
        dashes = "--" if flag.startswith("--") else "-"
        body = flag[len(dashes):]
        assert re.fullmatch(r"[a-z0-9][a-z0-9-]*", body), flag  # no regex metacharacter, no CEL escape
        pattern = ""
        for char in reversed(body[1:]):
            piece = "[-_]" if char == "-" and dashes == "--" else char
            pattern = f"(?:{piece}{pattern})?"
        return dashes + body[0] + pattern

    # (?s): a value may hold newlines; RE2 and Python agree on it.
    return "(?s)^(?:" + "|".join(prefixes(f) for f in OWNED_ARGS[kind]) + ")(?:=.*)?$"


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
    return (f"self.kind != '{kind}' || !has(self.extraArgs) || "
            f"!self.extraArgs.exists(a, a.matches('{_owned_flag_regex(kind)}'))")


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
            flag = owned_flag(self.kind, arg)
            if flag is not None:
                spelled = "" if flag_name(arg) == flag else f" (as {arg.split('=', 1)[0][:64]!r})"
                raise ValueError(f"spec.engine.extraArgs[{index}]: {flag}{spelled} is owned by the operator; "
                                 f"remove it (owned: {', '.join(owned)})")
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

    min: int | None = Field(default=None, ge=1, le=CONCURRENCY_MAX)
    max: int | None = Field(default=None, ge=1, le=CONCURRENCY_MAX)

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


# The burst knobs' descriptions, shared with the ServingPolicy's (api/policy.py) so the two CRDs say the same.
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
    burst_headroom_percent: int | None = Field(default=None, ge=0, le=300, description=BURST_HEADROOM_DESCRIPTION)
    burst_percentile: int | None = Field(default=None, ge=50, le=99, description=BURST_PERCENTILE_DESCRIPTION)
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


# A base URL a tenant may name: http(s), a host, an optional path; no userinfo, query or fragment, so
# nothing written here can become part of a query (observe/http.py parses it again before any use).
PROMETHEUS_URL_PATTERN = r"^https?://[^/?#@\s]+(/[^?#\s]*)?$"
PROMETHEUS_URL_MAX_LENGTH = 2048
SOURCE_TIMEOUT_MIN, SOURCE_TIMEOUT_MAX = "100ms", "30s"


class PrometheusSource(ApiModel):
    model_config = ConfigDict(json_schema_extra={"x-kubernetes-validations": [
        rule(f"duration(self.timeout) >= duration('{SOURCE_TIMEOUT_MIN}') && "
             f"duration(self.timeout) <= duration('{SOURCE_TIMEOUT_MAX}')",
             f"timeout must be between {SOURCE_TIMEOUT_MIN} and {SOURCE_TIMEOUT_MAX}", ".timeout"),
        rule("!has(self.bearerTokenSecretRef) || !has(self.url) || self.url.startsWith('https://') || "
             "self.allowTokenOverHttp",
             "bearerTokenSecretRef with a plain http url sends the token in the clear: use https, or set "
             "allowTokenOverHttp", ".url"),
    ]})

    url: str | None = Field(
        default=None, max_length=PROMETHEUS_URL_MAX_LENGTH, json_schema_extra={"pattern": PROMETHEUS_URL_PATTERN},
        description="Default: the operator's --prometheus-url. http(s)://host[:port][/path], no user, query or "
                    "fragment; the platform may restrict it to an allow-list.")
    bearer_token_secret_ref: KeyRef | None = None
    ca_config_map_ref: KeyRef | None = None
    ca_secret_ref: KeyRef | None = None
    timeout: Annotated[str, Field(pattern=DURATION_PATTERN, max_length=32)] = Field(
        default="5s", description="Deadline of each request (a poll may take twice it), 100ms..30s.")
    allow_token_over_http: bool = Field(default=False, description=(
        "Send the bearer token to a plain http url: only on a network you trust."))

    @field_validator("url")
    @classmethod
    def _base_url(cls, url: str | None) -> str | None:
        # The CRD's pattern, with a message that says which rule the URL breaks.
        if url is not None and not re.fullmatch(PROMETHEUS_URL_PATTERN, url):
            raise ValueError("must be http(s)://host[:port][/path] with no user, query ('?') or fragment ('#')")
        return url

    @model_validator(mode="after")
    def _bounded(self) -> PrometheusSource:
        seconds = parse_duration(self.timeout, "spec.metrics.prometheus.timeout")
        if not parse_duration(SOURCE_TIMEOUT_MIN) <= seconds <= parse_duration(SOURCE_TIMEOUT_MAX):
            raise ValueError(f"spec.metrics.prometheus.timeout: {self.timeout} is outside "
                             f"{SOURCE_TIMEOUT_MIN}..{SOURCE_TIMEOUT_MAX}")
        if (self.bearer_token_secret_ref is not None and self.url is not None and not self.url.startswith("https://")
                and not self.allow_token_over_http):
            raise ValueError("spec.metrics.prometheus.url: a bearer token would be sent over plain http; use "
                             "https, or set allowTokenOverHttp: true")
        return self


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
