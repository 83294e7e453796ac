"""The InferenceDeployment spec as pydantic models: the single source of the CRD schema and of the
operator's own validation.

No floats (Kubernetes API conventions): percents are integers, times are milliseconds or duration
strings, prices are decimal strings. Fields a ServingPolicy may supply default to None here and get
their effective default only after the policy merge (`infertune.api.policy`), because a CRD default
would make every resource silently override its policy. `spec.tuning` is in api/tuning.py, `spec.metrics`
in api/metrics_source.py, what every model shares in api/schema.py, and the owned engine flags in api/flags.py.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from infertune.api.flags import OWNED_ARGS, flag_name, owned_flag, owned_flag_regex
from infertune.api.formats import ARGUMENT, ENV_NAME, ENV_VALUE, shown
from infertune.api.metrics_source import Metrics
from infertune.api.schema import (
    ALLOWED_TP_SIZES,
    CONCURRENCY_MAX,
    CONTEXT_TOKENS_MAX,
    DURATION_FORMAT,
    POOL_GPUS_MAX,
    PRICE_PER_GPU_HOUR_MAX,
    REPLICAS_MAX,
    REQUESTS_PER_SECOND_MAX,
    STARTUP_SECONDS_MAX,
    STREAM_TOKENS_PER_SECOND_MAX,
    TOLERATION_SECONDS_MAX,
    TOLERATIONS_MAX,
    TTFT_LIMIT_RANGE,
    ApiModel,
    CatalogName,
    DataKey,
    Decimal,
    Duration,
    Formatted,
    Image,
    LabelMap,
    LabelValue,
    ObjectName,
    ResourceMap,
    TaintKey,
    check_decimal_range,
    check_duration_range,
    decimal_rule,
    duration_rules,
    rule,
)
from infertune.api.tuning import Tuning
from infertune.errors import SpecError

GROUP = "infertune.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "InferenceDeployment"
PLURAL = "inferencedeployments"

EngineKind = Literal["vllm", "sglang"]
WorkloadPreset = Literal["coding-agent", "chat", "batch"]


class ConfigMapModelRef(ApiModel):
    """A ConfigMap of the resource's namespace holding the model's Hugging Face config.json. It is re-read
    every cycle, so an edit is planned with on the next one; until it exists the resource waits
    (Ready=False, ConfigMapNotFound)."""

    name: ObjectName = Field(description="ConfigMap holding a Hugging Face config.json (a DNS subdomain).")
    key: DataKey = Field(default="config.json", description=(
        "Key holding the JSON: letters, digits, '-', '_' and '.', not starting with '..'."))


class Architecture(ApiModel):
    """An inline architecture for a model outside the catalog; integer fields only."""

    layers: int = Field(ge=1, description="Transformer layers (num_hidden_layers).")
    hidden_size: int = Field(ge=1, description="Model width (hidden_size).")
    attention_heads: int = Field(ge=1, description=(
        "Query heads per layer (num_attention_heads); every tensor-parallel size must divide it."))
    attention: Literal["GQA", "MLA"] = Field(default="GQA", description=(
        "GQA: grouped-query attention (MHA and MQA included), which needs kvHeads and headDim. MLA: multi-head "
        "latent attention (DeepSeek's), which needs kvLoraRank. Default GQA."))
    kv_heads: int | None = Field(default=None, ge=1, description=(
        "GQA only, and required there: KV heads per layer (num_key_value_heads). Each tensor-parallel size must "
        "divide it or be a multiple of it."))
    head_dim: int | None = Field(default=None, ge=1, description="GQA only, and required there: the size of a head.")
    kv_lora_rank: int | None = Field(default=None, ge=1, description=(
        "MLA only, and required there: the rank of the compressed KV (kv_lora_rank)."))
    rope_head_dim: int | None = Field(default=None, ge=0, description=(
        "MLA only: the decoupled RoPE key dimension (qk_rope_head_dim). Default 0."))
    ffn_width: int = Field(ge=1, description="FFN width (per expert for MoE).")
    total_params: int = Field(ge=1, description=(
        "Parameters in all, every expert counted: what the weights take of GPU memory."))
    active_params: int = Field(ge=1, description=(
        "Parameters each token uses (totalParams for a dense model); at most totalParams."))
    weight_bits: int = Field(default=16, ge=1, le=32, description="Bits per weight (16 BF16, 8 FP8, 4 FP4).")
    kv_cache_bits: int = Field(default=16, ge=1, le=32, description=(
        "Bits per KV-cache element (16 BF16, 8 FP8). Default 16."))
    routed_experts: int | None = Field(default=None, ge=1, description=(
        "MoE only: routed experts per MoE layer. Setting it makes the model MoE, which then needs "
        "expertsPerToken and expertParams."))
    experts_per_token: int | None = Field(default=None, ge=1, description=(
        "MoE only: routed experts each token activates (top-k)."))
    moe_layers: int | None = Field(default=None, ge=1, description=(
        "MoE only: the layers that have experts. Default: every layer."))
    expert_params: int | None = Field(default=None, ge=1, description=(
        "MoE only: parameters of one expert in one layer (3 x hiddenSize x ffnWidth for a gated FFN)."))
    shared_experts: int = Field(default=0, ge=0, description=(
        "MoE only: shared experts every token uses besides the routed ones. Default 0."))

    @model_validator(mode="after")
    def _consistent(self) -> Architecture:
        if self.attention == "GQA" and (self.kv_heads is None or self.head_dim is None):
            raise ValueError("spec.model.architecture: GQA needs kvHeads and headDim")
        if self.attention == "MLA" and self.kv_lora_rank is None:
            raise ValueError("spec.model.architecture: MLA needs kvLoraRank")
        if self.active_params > self.total_params:
            raise ValueError("spec.model.architecture.activeParams: exceeds totalParams")
        return self


# What one decode pass can take, in ms, whoever measured it (a load test here, the samples of `fit` and
# `plan --samples` in commands/_inputs.py): a forward pass is dozens of kernels, each launch a few µs, so
# a figure under 10 µs is a unit slip (and near zero turns every rate derived from it into infinity);
# none takes a minute.
PASS_MS_RANGE = (0.01, 60_000.0)
LOAD_TESTS_MAX = 8
LOAD_TEST_NOISE = 0.10


class LoadTestPoint(ApiModel):
    """One concurrency of a load test: how long a decode step took with that many streams running."""

    model_config = ConfigDict(json_schema_extra={"x-kubernetes-validations": [
        decimal_rule("perPassMs", *PASS_MS_RANGE, " ms")]})

    batch: int = Field(ge=1, le=CONCURRENCY_MAX, description=(
        "Streams decoding together: the load test's concurrency, with every stream busy."))
    per_pass_ms: Decimal = Field(description=(
        "Milliseconds one decode step took at that batch, e.g. '31.6': the mean time per output token (TPOT) "
        "a benchmark such as `vllm bench serve` reports at that concurrency. From 0.01 to 60000."))

    @field_validator("per_pass_ms")
    @classmethod
    def _plausible(cls, value: str) -> str:
        check_decimal_range(value, *PASS_MS_RANGE, "no decode step takes that long (ms)")
        return value


class LoadTest(ApiModel):
    """A load test the team ran on this model and GPU at one tensor-parallel size. The planner fits its
    per-pass model to it from the first cycle, instead of the napkin, and carries it to the other TPs with
    the band a calibration across TPs has (docs/planning.md). Once the fleet has measured that TP itself,
    its own samples replace the test."""

    model_config = ConfigDict(json_schema_extra={"x-kubernetes-validations": [
        rule("self.tensorParallelSize in [" + ", ".join(str(t) for t in ALLOWED_TP_SIZES) + "]",
             "tensorParallelSize: one of " + ", ".join(str(t) for t in ALLOWED_TP_SIZES), ".tensorParallelSize"),
        rule("self.points.all(p, self.points.filter(q, q.batch == p.batch).size() == 1)",
             "points: each batch once, with its mean", ".points"),
        rule("self.points.all(p, self.points.all(q, q.batch <= p.batch || "
             f"double(q.perPassMs) >= {1.0 - LOAD_TEST_NOISE} * double(p.perPassMs)))",
             "points: perPassMs must not fall as the batch grows (a decode step takes longer with more streams)",
             ".points")]})

    tensor_parallel_size: int = Field(ge=1, le=max(ALLOWED_TP_SIZES), description=(
        "The TP the test ran at (1, 2, 4, 8, 16, 32 or 64)."))
    context_tokens: int | None = Field(default=None, ge=1, le=CONTEXT_TOKENS_MAX, description=(
        "Mean tokens of context each stream held during the test (its prompt and the answer so far). "
        "Default: the workload's."))
    points: list[LoadTestPoint] = Field(min_length=2, max_length=64, description=(
        "The measured batches, at least two different ones (a line needs two)."))

    @field_validator("tensor_parallel_size")
    @classmethod
    def _allowed_tp(cls, value: int) -> int:
        if value not in ALLOWED_TP_SIZES:
            raise ValueError(f"tensorParallelSize {value} is not one of {', '.join(map(str, ALLOWED_TP_SIZES))}")
        return value

    @model_validator(mode="after")
    def _batches(self) -> LoadTest:
        batches = [p.batch for p in self.points]
        if len(set(batches)) != len(batches):
            twice = sorted({b for b in batches if batches.count(b) > 1})
            raise ValueError(f"points: batch {twice[0]} is given twice; give each batch once, with its mean")
        # More streams are more work a step: a time that falls with the batch is a mistake (a throughput, or
        # the columns swapped), not a measurement. A mean's noise is allowed LOAD_TEST_NOISE below the slowest
        # smaller batch.
        ordered = sorted(self.points, key=lambda p: p.batch)
        slowest = ordered[0]
        for point in ordered[1:]:
            if float(point.per_pass_ms) < (1.0 - LOAD_TEST_NOISE) * float(slowest.per_pass_ms):
                raise ValueError(f"points: perPassMs falls from {slowest.per_pass_ms} ms at batch {slowest.batch} to "
                                 f"{point.per_pass_ms} ms at batch {point.batch}; a decode step takes longer with "
                                 "more streams (is it a throughput, or are the columns swapped?)")
            slowest = max(slowest, point, key=lambda p: float(p.per_pass_ms))
        if not float(ordered[-1].per_pass_ms) > float(ordered[0].per_pass_ms):
            raise ValueError(f"points: perPassMs does not rise from batch {ordered[0].batch} to batch "
                             f"{ordered[-1].batch}; a decode step takes longer with more streams")
        return self


class ModelSource(ApiModel):
    """Exactly one of profile, architecture or configMapRef says what the model is."""

    model_config = ConfigDict(json_schema_extra={"x-kubernetes-validations": [
        rule("[has(self.profile), has(self.architecture), has(self.configMapRef)].filter(x, x).size() == 1",
             "exactly one of profile, architecture or configMapRef must be set"),
        rule("!has(self.loadTests) || self.loadTests.all(a, "
             "self.loadTests.filter(b, b.tensorParallelSize == a.tensorParallelSize).size() == 1)",
             "loadTests: one load test per tensorParallelSize", ".loadTests")]})

    weights: Annotated[str, Formatted(ARGUMENT)] = Field(min_length=1, description=(
        "What the engine loads: a Hugging Face id or a path, passed as its argument (so without a NUL)."))
    profile: CatalogName | None = Field(default=None, description=(
        "A catalog profile, e.g. kimi-k2.6 (no control character)."))
    architecture: Architecture | None = None
    config_map_ref: ConfigMapModelRef | None = None
    load_tests: list[LoadTest] = Field(default_factory=list, max_length=LOAD_TESTS_MAX, description=(
        "Load tests already run on this model and GPU, one per TP: the per-pass times the planner starts "
        "from, where it would otherwise start from a first-principles estimate (2-10x off on real stacks)."))

    @model_validator(mode="after")
    def _exactly_one(self) -> ModelSource:
        given = [n for n in ("profile", "architecture", "config_map_ref") if getattr(self, n) is not None]
        if len(given) != 1:
            raise ValueError("spec.model: exactly one of profile, architecture or configMapRef must be set")
        tps = [t.tensor_parallel_size for t in self.load_tests]
        if len(set(tps)) != len(tps):
            raise ValueError("spec.model.loadTests: one load test per tensorParallelSize")
        return self


class EnvVar(ApiModel):
    """An environment variable of the engine container, with a literal value."""

    # The name as Kubernetes takes it; a NUL in either is refused by the rule on spec.engine.env.
    model_config = ConfigDict(json_schema_extra={"x-kubernetes-validations": [rule(
        ENV_NAME.cel("self.name"), f"name: {ENV_NAME.rule}", ".name")]})

    name: str = Field(min_length=1, json_schema_extra={"maxLength": ENV_NAME.max_length}, description=(
        f"Name of the variable: printable ASCII characters other than '=', at most {ENV_NAME.max_length} of them."))
    value: str = Field(default="", json_schema_extra={"maxLength": ENV_VALUE.max_length}, description=(
        f"Its value, without a NUL character, at most {ENV_VALUE.max_length} characters. Default empty."))

    @field_validator("name", "value")
    @classmethod
    def _formats(cls, text: str, info: ValidationInfo) -> str:
        return Formatted(ENV_NAME if info.field_name == "name" else ENV_VALUE).check(text)


class Resources(ApiModel):
    """Extra CPU/memory for the engine container; the operator sets nvidia.com/gpu itself."""

    requests: ResourceMap = Field(default_factory=dict, description=(
        "Resource name to quantity, e.g. cpu: '16', memory: 256Gi. An nvidia.com/gpu entry is replaced by the "
        "GPUs of each pod. Names are qualified names (as label keys are), quantities non-negative."))
    limits: ResourceMap = Field(default_factory=dict, description=(
        "Resource name to quantity. An nvidia.com/gpu entry is replaced by the GPUs of each pod."))


# The image kind vllm runs when the resource names none; a vLLM image would crash-loop under SGLang's command.
VLLM_IMAGE = "vllm/vllm-openai:v0.11.0"
_SGLANG_NEEDS_AN_IMAGE = f"kind sglang needs an image: the default, {VLLM_IMAGE}, runs vLLM"


def _owned_flag_rule(kind: str) -> str:
    return (f"self.kind != '{kind}' || !has(self.extraArgs) || "
            f"!self.extraArgs.exists(a, a.matches('{owned_flag_regex(kind)}'))")


class Engine(ApiModel):
    """The serving engine and its container. The operator sets the flags it tunes (TP, max-num-seqs, GPU
    memory, port) itself."""

    model_config = ConfigDict(json_schema_extra={"x-kubernetes-validations": [
        rule(_owned_flag_rule("vllm"), "extraArgs must not set flags the operator owns: "
             + ", ".join(OWNED_ARGS["vllm"]), ".extraArgs"),
        rule(_owned_flag_rule("sglang"), "extraArgs must not set flags the operator owns: "
             + ", ".join(OWNED_ARGS["sglang"]), ".extraArgs"),
        rule("self.kind != 'sglang' || has(self.image)", _SGLANG_NEEDS_AN_IMAGE, ".image"),
        # No argument or environment variable can carry a NUL (formats.ARGUMENT, ENV_NAME, ENV_VALUE).
        rule("!has(self.extraArgs) || self.extraArgs.all(a, !a.contains('\\x00'))",
             "extraArgs: no argument may hold a NUL character", ".extraArgs"),
        rule("!has(self.env) || self.env.all(e, !e.name.contains('\\x00') && "
             "(!has(e.value) || !e.value.contains('\\x00')))",
             "env: no name or value may hold a NUL character", ".env"),
    ]})

    kind: EngineKind = Field(default="vllm", description=(
        "The engine the image runs, vllm or sglang: the operator renders that engine's command and flags. "
        "Default vllm."))
    image: Image | None = Field(default=None, description=(
        f"The engine container's image, a reference the container runtime parses ([registry[:port]/]repository"
        f"[:tag][@digest]). Default {VLLM_IMAGE} for kind vllm; kind sglang needs one set, since there is no "
        "default SGLang image the operator could vouch for."))
    extra_args: list[Annotated[str, Field(max_length=1024)]] = Field(
        default_factory=list, max_length=128, description=(
            "Passed through after the operator's flags; none may hold a NUL character."))
    env: list[EnvVar] = Field(default_factory=list, max_length=128, description=(
        "Environment variables of the engine container."))
    resources: Resources = Field(default_factory=Resources)
    port: int = Field(default=8000, ge=1, le=65535, description=(
        "The port the engine serves on: its API, /health for the probes and /metrics. The Service and the Pods "
        "metrics source use it. Default 8000."))
    startup_seconds: int = Field(default=600, ge=1, le=STARTUP_SECONDS_MAX, description=(
        "Expected model load time, seconds: from a pod's start to serving. It is how long new capacity takes "
        "to arrive, so it sets the demand forecast's horizon, the shortest scale-down stabilisation window and "
        "the least time between re-layouts; the startup probe allows it plus 60 s. Default 600."))
    gpu_memory_utilization_percent: int = Field(default=90, ge=10, le=99, description=(
        "Share of each GPU's memory the engine may take for weights and KV cache, percent 10-99 (vLLM "
        "--gpu-memory-utilization, SGLang --mem-fraction-static). Default 90. The planner sizes the KV cache, and "
        "judges the KV line, on the same share."))

    @property
    def container_image(self) -> str:
        """The image the engine pods run."""
        return self.image or VLLM_IMAGE

    @model_validator(mode="after")
    def _an_image_for_sglang(self) -> Engine:
        if self.kind == "sglang" and self.image is None:
            raise ValueError(f"spec.engine.image: {_SGLANG_NEEDS_AN_IMAGE}")
        return self

    @model_validator(mode="after")
    def _no_owned_flags(self) -> Engine:
        owned = OWNED_ARGS[self.kind]
        for index, arg in enumerate(self.extra_args):
            flag = owned_flag(self.kind, arg)
            if flag is not None:
                spelled = "" if flag_name(arg) == flag else f" (as {arg.split('=', 1)[0][:64]!r})"
                raise ValueError(f"spec.engine.extraArgs[{index}]: {flag}{spelled} is owned by the operator; "
                                 f"remove it (owned: {', '.join(owned)})")
            why = ARGUMENT.refusal(arg)  # the CRD's rule on extraArgs
            if why is not None:
                raise ValueError(f"spec.engine.extraArgs[{index}]: {why}")
        return self


# What Kubernetes' Pod validation asks of a toleration besides its fields' formats (ValidateTolerations,
# k8s.io/kubernetes pkg/apis/core/validation): a Deployment whose pods break one is refused on every apply.
# Each is a CEL rule of the CRD and, with the same message, a check of the model.
_TOLERATION_RULES = (
    rule("(has(self.key) && self.key != '') || (has(self.operator) && self.operator == 'Exists')",
         "operator must be Exists when key is empty (that toleration matches every taint)", ".operator"),
    rule("!has(self.operator) || self.operator != 'Exists' || !has(self.value) || self.value == ''",
         "value must be empty when operator is Exists (Exists matches any value)", ".value"),
    rule("!has(self.tolerationSeconds) || (has(self.effect) && self.effect == 'NoExecute')",
         "tolerationSeconds needs effect NoExecute (it is how long a pod stays once a NoExecute taint appears)",
         ".effect"),
)


class Toleration(ApiModel):
    """A toleration of the engine pods, as in a Pod spec."""

    model_config = ConfigDict(json_schema_extra={"x-kubernetes-validations": list(_TOLERATION_RULES)})

    key: TaintKey | None = Field(default=None, description=(
        "The taint key it matches, a label key. Unset or empty: every taint, which needs operator Exists."))
    operator: Literal["Equal", "Exists", ""] | None = Field(default=None, description=(
        "Equal matches the taint's value, Exists any value (and takes no value). Unset or empty: Equal."))
    value: LabelValue | None = Field(default=None, description=(
        "The taint value operator Equal matches, a label value; empty with Exists."))
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute", ""] | None = Field(default=None, description=(
        "The taint effect it matches. Unset or empty: every effect."))
    toleration_seconds: int | None = Field(default=None, ge=0, le=TOLERATION_SECONDS_MAX, description=(
        "Only with effect NoExecute: seconds the pod stays on a node once the taint appears, 0 (evicted at "
        "once) to 30 days. Unset: for good."))

    @model_validator(mode="after")
    def _as_kubernetes_takes_it(self) -> Toleration:
        broken = (not self.key and self.operator != "Exists",
                  self.operator == "Exists" and bool(self.value),
                  self.toleration_seconds is not None and self.effect != "NoExecute")
        for check, wrong in zip(_TOLERATION_RULES, broken, strict=True):
            if wrong:
                raise ValueError(check["message"])
        return self


class Hardware(ApiModel):
    """The GPUs the engine runs on, where its pods may be scheduled, and how many GPUs it may use."""

    model_config = ConfigDict(json_schema_extra={"x-kubernetes-validations": [
        decimal_rule("pricePerGpuHour", 0.0, PRICE_PER_GPU_HOUR_MAX, " USD")]})

    gpu: CatalogName = Field(default="b200", description="GPU catalog name (b200, h200, h100, gb200, b300).")
    node_selector: LabelMap = Field(default_factory=dict, description=(
        "Node labels the engine pods require (their nodeSelector), e.g. to land on nodes with this GPU: label "
        "keys and values."))
    tolerations: list[Toleration] = Field(default_factory=list, max_length=TOLERATIONS_MAX, description=(
        f"Tolerations of the engine pods, e.g. for tainted GPU nodes; at most {TOLERATIONS_MAX}."))
    gpus_per_node: int | None = Field(default=None, ge=1, le=72, description=(
        "GPUs on one node. Default: the catalog's for the GPU (8 on an HGX board, 4 on a GB200 tray). A "
        "replica whose TP is larger spans nodes, as a LeaderWorkerSet instead of a Deployment."))
    pool_gpus: int | None = Field(default=None, ge=1, le=POOL_GPUS_MAX, description=(
        "GPUs this deployment may use in all, counting the old and the new pods while a re-layout rolls. "
        f"At most {POOL_GPUS_MAX}: {REPLICAS_MAX} replicas at TP {max(ALLOWED_TP_SIZES)}, twice over. "
        "Unset: no limit but spec.tuning.replicas.max."))
    price_per_gpu_hour: Decimal | None = Field(default=None, description=(
        "USD, e.g. '6' or '5.50'. Default: the catalog's price for the GPU. It scales the costs reported; no "
        "choice depends on it (every GPU of the pool costs the same), and at '0' costs are reported in GPU-hours. "
        f"At most {PRICE_PER_GPU_HOUR_MAX:,.0f}."))

    @field_validator("price_per_gpu_hour")
    @classmethod
    def _plausible_price(cls, value: str | None) -> str | None:
        return check_decimal_range(value, 0.0, PRICE_PER_GPU_HOUR_MAX,
                                   "no GPU rents for that much an hour (USD; is it in cents, or per month?)")


_TOKEN_FIELDS = ("freshTokens", "cachedTokens", "outputTokens")


class WorkloadHints(ApiModel):
    """The traffic shape assumed until metrics say otherwise."""

    # A request's prompt and answer are its context, which no model holds past CONTEXT_TOKENS_MAX.
    model_config = ConfigDict(json_schema_extra={"x-kubernetes-validations": [rule(
        " + ".join(f"(has(self.{f}) ? self.{f} : 0)" for f in _TOKEN_FIELDS) + f" <= {CONTEXT_TOKENS_MAX}",
        f"freshTokens + cachedTokens + outputTokens: at most {CONTEXT_TOKENS_MAX}, the longest context a model "
        "holds"), decimal_rule("expectedRequestsPerSecond", 0.0, REQUESTS_PER_SECOND_MAX, " requests/s")]})

    preset: WorkloadPreset | None = Field(default=None, description=(
        "The request shape to start from: coding-agent (means of ~13K fresh, ~71K cached and ~1K output "
        "tokens), chat (600, 1,400, 400) or batch (4,000, 0, 800). The token fields below replace its means; "
        "it still gives the spread of contexts and the median prompt the TTFT estimate reads. Default chat."))
    fresh_tokens: int | None = Field(default=None, ge=0, le=CONTEXT_TOKENS_MAX, description=(
        "Mean prompt tokens a request brings that the prefix cache does not hold (they are prefilled). "
        "Default: the preset's."))
    cached_tokens: int | None = Field(default=None, ge=0, le=CONTEXT_TOKENS_MAX, description=(
        "Mean prompt tokens a request finds in the prefix cache, such as a session's earlier turns. Default: "
        "the preset's."))
    output_tokens: int | None = Field(default=None, ge=1, le=CONTEXT_TOKENS_MAX, description=(
        "Mean tokens generated per request. Default: the preset's."))
    expected_requests_per_second: Decimal | None = Field(default=None, description=(
        "Requests/s to size replicas for until metrics give the rate, a decimal string, e.g. '2.5'. Unset: "
        "the first layout runs spec.tuning.replicas.min replicas (at least one). "
        f"At most {REQUESTS_PER_SECOND_MAX:,.0f}."))

    @field_validator("expected_requests_per_second")
    @classmethod
    def _plausible_rate(cls, value: str | None) -> str | None:
        return check_decimal_range(value, 0.0, REQUESTS_PER_SECOND_MAX,
                                   "past any deployment's traffic (requests/s)")

    @model_validator(mode="after")
    def _one_context(self) -> WorkloadHints:
        total = sum(t or 0 for t in (self.fresh_tokens, self.cached_tokens, self.output_tokens))
        if total > CONTEXT_TOKENS_MAX:
            raise ValueError(f"freshTokens + cachedTokens + outputTokens is {total}, outside the allowed range "
                             f"0..{CONTEXT_TOKENS_MAX}: no model holds a longer context")
        return self


class Ttft(ApiModel):
    """The time-to-first-token target."""

    model_config = ConfigDict(json_schema_extra={"x-kubernetes-validations": [*duration_rules(
        {"limit": TTFT_LIMIT_RANGE})]})

    percentile: int | None = Field(default=None, ge=50, le=99, description=(
        "The percentile of requests whose time to first token, queueing included, must be within the limit, "
        "50-99. Default 95. The observed TTFT is read at the nearest of p50, p95 and p99."))
    limit: Duration | None = Field(default=None, description=(
        "The longest time to first token at that percentile, queueing included, e.g. '3s' or '800ms', "
        f"{TTFT_LIMIT_RANGE[0]}..{TTFT_LIMIT_RANGE[1]}. Unset: no TTFT target. " + DURATION_FORMAT))

    @field_validator("limit")
    @classmethod
    def _limit_in_range(cls, value: str | None) -> str | None:
        return check_duration_range(value, TTFT_LIMIT_RANGE)


class Slo(ApiModel):
    """What every request must get: per-stream speed and TTFT are separate targets, and a layout must meet
    both. Unset: no SLO (SLOMet is True, reason NoSLO)."""

    min_stream_tokens_per_second: int | None = Field(default=None, ge=0, le=STREAM_TOKENS_PER_SECOND_MAX,
                                                     description=(
        "The least decode speed of each stream, tokens/s after the first token (judged at the slow end of "
        f"the performance model's estimate), at most {STREAM_TOKENS_PER_SECOND_MAX}. Unset or 0: no floor."))
    ttft: Ttft | None = None


class PolicyRef(ApiModel):
    """A cluster-scoped ServingPolicy whose slo, workload and tuning fields apply where this resource leaves
    them unset, field by field (a list, such as tensorParallelSizes, is replaced whole). Until the policy
    exists the resource waits (Ready=False, PolicyNotFound); a deleted policy keeps applying as last seen
    (status.policy)."""

    name: ObjectName = Field(description="Name of the ServingPolicy (a DNS subdomain).")


class InferenceDeploymentSpec(ApiModel):
    """The model to serve and its engine, the hardware, the traffic and SLO to plan for, and how the operator
    tunes TP, max-num-seqs and replicas."""

    model: ModelSource
    engine: Engine = Field(default_factory=Engine)
    hardware: Hardware = Field(default_factory=Hardware)
    workload: WorkloadHints | None = None
    slo: Slo | None = None
    policy_ref: PolicyRef | None = None
    tuning: Tuning = Field(default_factory=Tuning)
    metrics: Metrics = Field(default_factory=Metrics)
    replicas: int | None = Field(default=None, ge=0, le=REPLICAS_MAX, description=(
        "Pins the replica count (what `kubectl scale` sets); TP and concurrency are still tuned. Unset: the "
        "operator sizes replicas."))


def parse_spec(raw: Any) -> InferenceDeploymentSpec:
    """Validates a resource's spec; a SpecError names the first bad field as `spec.<path>`."""
    from pydantic import ValidationError

    if raw is not None and not isinstance(raw, dict):
        # The CRD's spec is an object; a list or a string read as `raw or {}` named a missing field instead.
        raise SpecError(f"spec: must be an object, got {type(raw).__name__}")
    try:
        return InferenceDeploymentSpec.model_validate(raw or {})
    except ValidationError as exc:
        raise SpecError(describe_error(exc, "spec", InferenceDeploymentSpec)) from None


# pydantic's errors for a number outside a field's ge/le (or too large to parse at all).
_RANGE_ERRORS = {"greater_than", "greater_than_equal", "less_than", "less_than_equal", "int_parsing_size"}


def _model_in(annotation: Any) -> type[BaseModel] | None:
    """The model a field holds, through Optional and list; None for a scalar."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in get_args(annotation):
        found = _model_in(arg)
        if found is not None:
            return found
    return None


def _range_of(model: type[BaseModel] | None, loc: tuple[Any, ...]) -> tuple[Any, Any] | None:
    """The (least, most) a field's ge/le allow, found by walking `loc` from `model`; None if there is none."""
    field = None
    for part in loc:
        if isinstance(part, int):
            continue  # an index into a list: the model of its items is already the current one
        if model is None:
            return None
        field = next((f for name, f in model.model_fields.items() if part in (name, f.alias)), None)
        if field is None:
            return None
        model = _model_in(field.annotation)
    if field is None:
        return None
    constraints = list(field.metadata)
    for arg in get_args(field.annotation):  # an Annotated type inside Optional, such as Percent | None
        for info in getattr(arg, "__metadata__", ()):
            constraints += getattr(info, "metadata", ())
    low = next((m.ge for m in constraints if getattr(m, "ge", None) is not None), None)
    high = next((m.le for m in constraints if getattr(m, "le", None) is not None), None)
    return None if low is None and high is None else (low, high)


def describe_error(exc: Any, root: str, model: type[BaseModel] | None = None) -> str:
    """One line naming the first failing field, whatever pydantic raised. With the `model` validated, a
    number outside its field's range is told with its value and the whole range."""
    first = exc.errors()[0]
    path = ".".join([root, *(str(p) if not isinstance(p, int) else f"[{p}]" for p in first["loc"])])
    path = path.replace(".[", "[")
    message = str(first.get("msg", "invalid")).removeprefix("Value error, ")
    if message.startswith(root + "."):
        return message
    bounds = _range_of(model, tuple(first["loc"])) if first.get("type") in _RANGE_ERRORS else None
    if bounds is not None:
        low, high = ("" if b is None else str(b) for b in bounds)
        return f"{path}: {shown(first.get('input'))} is outside the allowed range {low}..{high}"
    return f"{path}: {message}"
