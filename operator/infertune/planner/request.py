"""From a resource to the planner's question: the effective spec (policy merged), the resolved model
and GPU profiles, and a PlanRequest. Pure; the ConfigMap's text is fetched by the caller.

It lives in the planner (not in api/) because it builds the planner's types, and the layers only
import downward; the controller, the commands and the lab all resolve a resource through it.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace

from infertune.api.policy import ServingPolicySpec, apply_policy
from infertune.api.quantities import parse_decimal, parse_duration
from infertune.api.spec import Architecture, InferenceDeploymentSpec
from infertune.errors import SpecError
from infertune.model import (
    CapacityAssumptions,
    CatalogError,
    FitError,
    GpuSpec,
    ModelProfile,
    MoeSpec,
    PerformanceModel,
    SampleSet,
    Workload,
    gpu_names,
    load_gpu,
    load_model,
    profile_from_hf_config,
    workload_preset,
)
from infertune.model.catalog import validate_profile
from infertune.model.forecast import BURST_QUANTILE
from infertune.model.roofline import faster_than_floor
from infertune.planner.plan import Plan, plan
from infertune.planner.types import Guardrails, Layout, PlanRequest, SloTarget
from infertune.textfile import JsonPastLimits, load_json

DEFAULT_TP_SIZES = (1, 2, 4, 8)
DEFAULT_KV_HEADROOM_PERCENT = 10
DEFAULT_BURST_HEADROOM_PERCENT = 15
DEFAULT_BURST_PERCENTILE = round(BURST_QUANTILE * 100)


@dataclass(frozen=True)
class Resolved:
    """Everything a cycle needs from the spec, decided once per spec change."""

    spec: InferenceDeploymentSpec  # effective: policy merged
    model: ModelProfile
    gpu: GpuSpec
    request: PlanRequest


def _from_architecture(name: str, a: Architecture) -> ModelProfile:
    moe = None
    if a.routed_experts:
        if not (a.experts_per_token and a.expert_params):
            raise SpecError("spec.model.architecture: MoE needs expertsPerToken and expertParams")
        moe = MoeSpec(a.routed_experts, a.experts_per_token, a.moe_layers or a.layers, float(a.expert_params),
                      a.shared_experts)
    profile = ModelProfile(
        name=name, layers=a.layers, hidden_size=a.hidden_size, attention_heads=a.attention_heads,
        attention="mla" if a.attention == "MLA" else "gqa", ffn_width=a.ffn_width,
        total_params=float(a.total_params), active_params=float(a.active_params),
        weight_bytes_per_param=a.weight_bits / 8, kv_bytes_per_element=a.kv_cache_bits / 8,
        kv_heads=a.kv_heads or 0, head_dim=a.head_dim or 0, kv_lora_rank=a.kv_lora_rank or 0,
        rope_head_dim=a.rope_head_dim or 0, moe=moe,
    )
    try:
        validate_profile(profile)
    except CatalogError as exc:
        raise SpecError(f"spec.model.architecture: {exc}") from None
    return profile


def resolve_model(spec: InferenceDeploymentSpec, config_json: str | None = None) -> ModelProfile:
    source = spec.model
    if source.profile is not None:
        try:
            return load_model(source.profile)
        except CatalogError as exc:
            raise SpecError(f"spec.model.profile: {exc}") from None
    if source.architecture is not None:
        return _from_architecture(source.weights, source.architecture)
    ref = source.config_map_ref
    assert ref is not None  # the model validator guarantees exactly one source
    where = f"spec.model.configMapRef (ConfigMap {ref.name}, key {ref.key})"
    if config_json is None:
        raise SpecError(f"{where}: not found")
    try:
        raw = load_json(config_json)
    except json.JSONDecodeError as exc:
        raise SpecError(f"{where}: malformed config.json: {exc.msg} at line {exc.lineno}") from None
    except JsonPastLimits as exc:
        # Python's own limits (4,300 digits, the recursion limit): a ConfigMap is user input, and a reconcile
        # that raised here would retry it for ever instead of saying what is wrong.
        if exc.too_deep:
            raise SpecError(f"{where}: config.json is nested too deeply to be a model's config") from None
        raise SpecError(f"{where}: config.json holds an integer of more than 4,300 digits") from None
    try:
        return profile_from_hf_config(raw, source.weights)
    except CatalogError as exc:
        raise SpecError(f"{where}: {exc}") from None


def resolve_gpu(spec: InferenceDeploymentSpec) -> GpuSpec:
    try:
        gpu = load_gpu(spec.hardware.gpu)
    except CatalogError:
        raise SpecError(f"spec.hardware.gpu: unknown GPU {spec.hardware.gpu!r}; known: "
                        + ", ".join(gpu_names())) from None
    if spec.hardware.gpus_per_node is not None:
        gpu = replace(gpu, gpus_per_node=spec.hardware.gpus_per_node)
    return gpu


def _workload(spec: InferenceDeploymentSpec) -> Workload:
    hints = spec.workload
    base = workload_preset(hints.preset if hints and hints.preset else "chat")
    if hints is None:
        return base
    given = (("fresh_tokens", hints.fresh_tokens), ("cached_tokens", hints.cached_tokens),
             ("output_tokens", hints.output_tokens))
    changes = {k: float(v) for k, v in given if v is not None}
    workload = replace(base, **changes)
    if hints.fresh_tokens is not None:
        # A declared mean keeps the preset's median-to-mean ratio for the TTFT chain (which reads the
        # median prompt, as the B200 load test does), as the observed shape does (plan.effective_workload).
        workload = replace(workload, ttft_fresh_tokens=base.ttft_fresh_for(workload.fresh_tokens))
    return workload


def _seconds(value: str | None, field: str, default: float) -> float:
    return default if value is None else parse_duration(value, field)


def _guardrails(spec: InferenceDeploymentSpec) -> Guardrails:
    t, base = spec.tuning, Guardrails()
    c = t.cooldowns
    return Guardrails(
        scale_up_cooldown_s=_seconds(c.scale_up if c else None, "spec.tuning.cooldowns.scaleUp",
                                     base.scale_up_cooldown_s),
        scale_down_cooldown_s=_seconds(c.scale_down if c else None, "spec.tuning.cooldowns.scaleDown",
                                       base.scale_down_cooldown_s),
        relayout_cooldown_s=_seconds(c.relayout if c else None, "spec.tuning.cooldowns.relayout",
                                     base.relayout_cooldown_s),
        scale_down_stabilization_s=_seconds(c.scale_down_stabilization if c else None,
                                            "spec.tuning.cooldowns.scaleDownStabilization",
                                            base.scale_down_stabilization_s),
        max_step_replicas=t.max_replica_step or base.max_step_replicas,
        scale_up_share=base.scale_up_share if t.max_replica_step is None else 0.0,
        hysteresis=base.hysteresis if t.hysteresis_percent is None else t.hysteresis_percent / 100,
        model_load_seconds=float(spec.engine.startup_seconds),
        stale_after_s=_seconds(t.stale_after, "spec.tuning.staleAfter", base.stale_after_s),
    )


def _slo(spec: InferenceDeploymentSpec) -> SloTarget:
    slo = spec.slo
    if slo is None:
        return SloTarget()
    ttft, floor = slo.ttft, slo.min_stream_tokens_per_second
    limit = parse_duration(ttft.limit, "spec.slo.ttft.limit") if ttft and ttft.limit else None
    if limit is not None and limit <= 0:
        raise SpecError(f"spec.slo.ttft.limit: {limit:g} s can never be met; give a limit above 0")
    return SloTarget(
        min_stream_tps=float(floor) if floor else None,  # a floor of 0 tok/s is no floor
        max_ttft_seconds=limit,
        ttft_percentile=ttft.percentile if ttft and ttft.percentile else 95,
    )


def tp_refusal(model: ModelProfile, tp: int) -> str | None:
    """Why vLLM (and SGLang) would refuse to start `model` at TP `tp`, or None: each rank must hold
    the same number of attention heads, and of KV heads, which are split when there are more of them
    than ranks and replicated (each by the same count) when there are fewer."""
    heads = model.attention_heads
    if tp < 1 or heads % tp:
        return f"TP{tp} does not divide the {heads} attention heads of {model.name} (the engine refuses it)"
    kv = model.kv_heads if model.attention == "gqa" else 0
    if kv and (kv % tp if tp <= kv else tp % kv):
        return (f"TP{tp} neither divides nor is a multiple of the {kv} KV heads of {model.name} (the engine "
                "refuses it)")
    return None


def _tp_sizes(spec: InferenceDeploymentSpec, model: ModelProfile) -> tuple[int, ...]:
    """The TP sizes to plan over: the spec's (each must suit the model), else the defaults that suit it."""
    given = spec.tuning.tensor_parallel_sizes
    if given:
        for index, tp in enumerate(given):
            why = tp_refusal(model, tp)
            if why is not None:
                raise SpecError(f"spec.tuning.tensorParallelSizes[{index}]: {why}")
        return tuple(sorted(set(given)))
    sizes = tuple(tp for tp in DEFAULT_TP_SIZES if tp_refusal(model, tp) is None)
    if not sizes:
        raise SpecError(f"spec.tuning.tensorParallelSizes: none of {', '.join(map(str, DEFAULT_TP_SIZES))} suits "
                        f"{model.name} ({model.attention_heads} attention heads); list the sizes that do")
    return sizes


def _load_test_fits(spec: InferenceDeploymentSpec, model: ModelProfile, gpu: GpuSpec,
                    workload: Workload) -> dict[int, SampleSet]:
    """spec.model.loadTests as the per-pass samples the planner starts from, each checked as the fit
    reads it: a test whose fit predicts no pass, or none that is finite, is refused rather than planned on."""
    fits: dict[int, SampleSet] = {}
    for index, test in enumerate(spec.model.load_tests):
        where = f"spec.model.loadTests[{index}]"
        why = tp_refusal(model, test.tensor_parallel_size)
        if why is not None:
            raise SpecError(f"{where}.tensorParallelSize: {why}")
        context = float(test.context_tokens or 0)  # 0: the workload's context, as for a live sample
        seconds = tuple(parse_decimal(p.per_pass_ms, f"{where}.points.perPassMs") / 1000 for p in test.points)
        too_fast = faster_than_floor(min(seconds), model, gpu, test.tensor_parallel_size)
        if too_fast is not None:
            raise SpecError(f"{where}.points.perPassMs: {too_fast}")
        samples = SampleSet(tuple(float(p.batch) for p in test.points), seconds,
                            tuple(context for _ in test.points), tuple(1.0 for _ in test.points))
        perf = PerformanceModel(model, gpu, workload, fits={test.tensor_parallel_size: samples})
        try:
            predicted = [perf.per_pass(test.tensor_parallel_size, b).seconds for b in samples.batches]
        except FitError as exc:
            raise SpecError(f"{where}: the per-pass fit refuses it: {exc}") from None
        if not all(math.isfinite(t) and t > 0 for t in predicted):
            raise SpecError(f"{where}: no per-pass model fits these points (it predicts a pass that is not "
                            "positive); check that perPassMs grows with the batch")
        fits[test.tensor_parallel_size] = samples
    return fits


def build_request(spec: InferenceDeploymentSpec, model: ModelProfile, gpu: GpuSpec) -> PlanRequest:
    t = spec.tuning
    tp_sizes = _tp_sizes(spec, model)
    conc, reps = t.concurrency, t.replicas
    hw = spec.hardware
    demand = spec.workload.expected_requests_per_second if spec.workload else None
    headroom = DEFAULT_KV_HEADROOM_PERCENT if t.kv_headroom_percent is None else t.kv_headroom_percent
    burst = DEFAULT_BURST_HEADROOM_PERCENT if t.burst_headroom_percent is None else t.burst_headroom_percent
    percentile = DEFAULT_BURST_PERCENTILE if t.burst_percentile is None else t.burst_percentile
    workload = _workload(spec)
    return PlanRequest(
        model=model, gpu=gpu, workload=workload, slo=_slo(spec), tp_sizes=tp_sizes,
        fits=_load_test_fits(spec, model, gpu, workload),
        concurrency_min=(conc.min if conc and conc.min else 1),
        # A default bound never contradicts a bound the spec gives (min 300 alone: max 300, not 256).
        concurrency_max=(conc.max if conc and conc.max else max(256, conc.min or 1 if conc else 1)),
        # min 0 is read as 1: without a running replica there is no metric to learn the demand from, so
        # the last is never removed (and a plan for no traffic is one replica, not none).
        replicas_min=max(reps.min if reps and reps.min is not None else 1, 1),
        replicas_max=(reps.max if reps and reps.max else max(64, reps.min or 1 if reps else 1)),
        pool_gpus=hw.pool_gpus,
        kv_headroom=headroom / 100,
        demand_headroom=burst / 100,
        burst_quantile=percentile / 100,
        price_per_gpu_hour=None if hw.price_per_gpu_hour is None else parse_decimal(
            hw.price_per_gpu_hour, "spec.hardware.pricePerGpuHour"),
        demand_rps=None if demand is None else parse_decimal(
            demand, "spec.workload.expectedRequestsPerSecond"),
        guardrails=_guardrails(spec),
        # The KV the engine gets is what its flag leaves after the weights: plan on the flag the pods run.
        capacity=CapacityAssumptions(gpu_memory_utilization=spec.engine.gpu_memory_utilization_percent / 100),
    )


def resolve(spec: InferenceDeploymentSpec, policy: ServingPolicySpec | None = None,
            config_json: str | None = None) -> Resolved:
    """The effective spec and the planner's request; SpecError names the field that blocks it."""
    effective = apply_policy(spec, policy)
    model, gpu = resolve_model(effective, config_json), resolve_gpu(effective)
    return Resolved(effective, model, gpu, build_request(effective, model, gpu))


def pinned(layout: Layout, spec: InferenceDeploymentSpec) -> Layout:
    """`spec.replicas` (what `kubectl scale` sets) pins the count; TP and concurrency stay tuned."""
    return layout if spec.replicas is None else replace(layout, replicas=spec.replicas)


def starting_layout(resolved: Resolved, now: float) -> tuple[Layout, Plan]:
    """What to run before any metric exists: the plan on the workload hints, or, when nothing is
    feasible, the candidate that misses by the least (the status says so), so there is a workload."""
    first = plan(resolved.request, None, now)
    req = resolved.request
    if first.layout is not None:
        return pinned(first.layout, resolved.spec), first
    floor = req.replicas_min
    if first.choice is not None:
        return pinned(Layout(first.choice.tp, first.choice.max_num_seqs, floor), resolved.spec), first
    if first.closest is not None:
        return pinned(Layout(first.closest.tp, first.closest.max_num_seqs, floor), resolved.spec), first
    return pinned(Layout(max(req.tp_sizes), req.concurrency_min, floor), resolved.spec), first
