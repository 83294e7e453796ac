"""KV cache arithmetic: bytes per token under TP, capacity of a replica, working set, the cliff."""

from __future__ import annotations

import math
from dataclasses import dataclass

from infertune.model.catalog import GpuSpec, ModelProfile
from infertune.model.workload import Workload


@dataclass(frozen=True)
class CapacityAssumptions:
    # vLLM's --gpu-memory-utilization default.
    gpu_memory_utilization: float = 0.90
    # Activations, CUDA graphs and the sampler's buffers per rank (vLLM profiles ~1-3 GB).
    activation_reserve_bytes: float = 2.0e9


def _kv_layers(model: ModelProfile, context_tokens: float) -> float:
    """Layers that hold the whole context; sliding-window layers hold at most the window."""
    if not model.sliding_layers or not model.sliding_window or context_tokens <= 0:
        return float(model.layers)
    full = model.layers - model.sliding_layers
    window_share = min(model.sliding_window / context_tokens, 1.0)
    return full + model.sliding_layers * window_share


def kv_bytes_per_token(model: ModelProfile, tp: int = 1, context_tokens: float = 0.0) -> float:
    """KV bytes one token costs on one rank.

    GQA heads split across ranks up to TP = kv_heads and are replicated beyond. MLA's latent is
    not split in vLLM: every rank holds all of it.
    """
    layers = _kv_layers(model, context_tokens)
    if model.attention == "mla":
        return layers * (model.kv_lora_rank + model.rope_head_dim) * model.kv_bytes_per_element
    heads_per_rank = model.kv_heads / min(tp, model.kv_heads)
    return 2 * layers * heads_per_rank * model.head_dim * model.kv_bytes_per_element


def kv_bytes_per_token_total(model: ModelProfile, context_tokens: float = 0.0) -> float:
    """Bytes one token's KV costs across the whole model, unsplit (what a pass reads)."""
    return kv_bytes_per_token(model, 1, context_tokens)


def weight_bytes(model: ModelProfile) -> float:
    return model.routed_weight_bytes + model.shared_weight_bytes


def kv_capacity_tokens(
    model: ModelProfile, gpu: GpuSpec, tp: int, assumptions: CapacityAssumptions = CapacityAssumptions(),
    context_tokens: float = 0.0,
) -> float:
    """Tokens of KV one replica holds: free HBM per rank after weights and reserve, over bytes per token.

    Zero when the weights do not fit; the planner turns that into a rejection with a reason.
    """
    free = gpu.hbm_bytes * assumptions.gpu_memory_utilization - weight_bytes(model) / tp
    free -= assumptions.activation_reserve_bytes
    if free <= 0:
        return 0.0
    return free / kv_bytes_per_token(model, tp, context_tokens)


def working_set_tokens(workload: Workload, concurrency: float) -> float:
    """Tokens that must stay resident: every in-flight stream's whole context, plus the prefixes
    returning sessions keep cached between turns."""
    return concurrency * (workload.context_tokens + workload.resident_prefix_tokens)


def cliff_concurrency(capacity_tokens: float, workload: Workload) -> float:
    """The concurrency at which the working set fills the KV pool."""
    per_stream = workload.context_tokens + workload.resident_prefix_tokens
    return capacity_tokens / per_stream if per_stream > 0 else math.inf


def safe_concurrency(capacity_tokens: float, workload: Workload, headroom: float) -> float:
    """The cliff concurrency less the headroom fraction: the line the planner never crosses."""
    return cliff_concurrency(capacity_tokens, workload) * (1.0 - headroom)
