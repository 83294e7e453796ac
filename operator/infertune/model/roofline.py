"""The B200 load test's napkin chain: MoE occupancy, bytes per pass, memory and compute roofline, TP overhead.

    per_pass_bytes(B) = routed experts hit + shared weights + KV reads
    memory_time(B)    = bytes / (TP x bandwidth x sync_efficiency(TP) x MBU x shard_efficiency(TP))
    per_pass_time(B)  = overhead(TP) + overlap x max(memory_time, compute_time)

The napkin is a sanity check and a prior; the fitted line in fit.py is the predictor.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TypeVar

import numpy as np
import numpy.typing as npt

from infertune.model.catalog import GpuSpec, ModelProfile
from infertune.model.kv import kv_bytes_per_token_total

# Batch sizes may be one float or an array of them: the planner evaluates a whole grid at once.
Batch = TypeVar("Batch", float, npt.NDArray[np.float64])


@dataclass(frozen=True)
class NapkinAssumptions:
    """The fudge factors the napkin carries. The defaults are the predictive prior; `b200_load_test()`
    is the B200 load test's own hand calculation (docs/sources.md#kimi-b200: 50% MBU, 0.5 overlap, no
    thin-shard penalty)."""

    mbu: float = 0.60
    mfu_decode: float = 0.50
    # The B200 load test: 6.4% MFU during prefill (78K tok/s on 8x B200).
    mfu_prefill: float = 0.064
    overlap: float = 1.0
    # Kernel launches and scheduling, paid once a pass whatever the TP.
    launch_overhead_s: float = 1.0e-3
    # One ring step of a collective; two collectives a layer (attention all-reduce, MoE
    # dispatch/combine). 4.92 us puts Kimi's 61 layers at TP8 on the B200 load test's 5.2 ms intercept.
    collective_step_s: float = 4.918e-6
    collectives_per_layer: int = 2
    # A ring step that leaves the NVLink domain crosses the network: several times slower.
    internode_step_factor: float = 6.0
    # Sync losses on HBM bandwidth: 1/(1 + sigma (TP-1)). 0.04 gives the B200 load test's
    # "50 TB/s effective (raw 64 minus sync overhead)" at TP8.
    sync_loss_per_rank: float = 0.04
    # Thin GEMM slices stream HBM less efficiently: efficiency = w / (w + half), w the per-rank
    # slice of the FFN width. 768 columns carries the B200 load test's TP8 measurement (36.8 ms at B=16)
    # to its TP4 figure (~46 tok/s at c=8). 0 disables the penalty.
    shard_width_half: float = 768.0

    @staticmethod
    def b200_load_test() -> NapkinAssumptions:
        return NapkinAssumptions(mbu=0.50, overlap=0.5, shard_width_half=0.0)

    def with_(self, **changes: float) -> NapkinAssumptions:
        return replace(self, **changes)  # type: ignore[arg-type]


@dataclass(frozen=True)
class PassBytes:
    routed_experts: float
    shared_weights: float
    kv_reads: float
    unique_experts_per_layer: float

    @property
    def total(self) -> float:
        return self.routed_experts + self.shared_weights + self.kv_reads


# Tokens one stream may gain per pass with speculative decoding: vLLM's n-gram and EAGLE drafts
# propose up to a handful; this is well above any configuration seen.
DRAFT_TOKENS_PER_PASS = 16


def pass_floor_seconds(model: ModelProfile, gpu: GpuSpec, tp: int) -> float:
    """The shortest a decode pass can physically be at TP `tp`: every active weight read once at the
    full HBM bandwidth of the group, nothing else."""
    active_bytes = model.active_params * model.weight_bytes_per_param
    return active_bytes / (max(tp, 1) * gpu.hbm_bandwidth)


def token_floor_seconds(model: ModelProfile, gpu: GpuSpec, tp: int) -> float:
    """The shortest time per output token any measurement at TP `tp` may report: the pass floor shared by
    the most tokens speculative decoding gains in one pass. A load test or sample faster than this is a
    unit slip (seconds written as ms, or a pass of another model), not a fast engine."""
    return pass_floor_seconds(model, gpu, tp) / DRAFT_TOKENS_PER_PASS


def faster_than_floor(fastest_s: float, model: ModelProfile, gpu: GpuSpec, tp: int) -> str | None:
    """Why a measured pass of `fastest_s` cannot be this model's at TP `tp` (`token_floor_seconds`), or None;
    a plan on it would rate a replica many times too fast. The words every reader of a measurement refuses in."""
    floor = token_floor_seconds(model, gpu, tp)
    if fastest_s >= floor:
        return None
    return (f"a pass of {fastest_s * 1e3:.3g} ms is faster than {model.name} can decode at TP{tp} on {gpu.name} "
            f"(at least {floor * 1e3:.3g} ms: its active weights read once a pass, shared by the most tokens "
            "speculative decoding gains); check the unit (ms) and the model")


def unique_experts(routed: int, per_token: int, batch: Batch) -> Batch:
    """Distinct experts a batch touches in one layer: E x (1 - (1 - k/E)^B), the occupancy problem."""
    if routed <= 0:
        return batch * 0.0
    result: Batch = routed * (1.0 - (1.0 - per_token / routed) ** batch)
    return result


def pass_total_bytes(model: ModelProfile, batch: Batch, context_tokens: float) -> Batch:
    """Bytes one decode pass reads across all ranks, B streams each with `context_tokens` of KV."""
    kv = batch * (context_tokens * kv_bytes_per_token_total(model, context_tokens))
    if model.moe is None:
        return kv + model.shared_weight_bytes
    experts = unique_experts(model.moe.routed_experts, model.moe.experts_per_token, batch)
    return experts * (model.moe.moe_layers * model.expert_bytes) + kv + model.shared_weight_bytes


def pass_bytes(model: ModelProfile, batch: float, context_tokens: float) -> PassBytes:
    """The breakdown of `pass_total_bytes` for one batch size, as the B200 load test tabulates it."""
    experts = 0.0
    routed = 0.0
    if model.moe is not None:
        experts = unique_experts(model.moe.routed_experts, model.moe.experts_per_token, batch)
        routed = experts * model.moe.moe_layers * model.expert_bytes
    kv = batch * context_tokens * kv_bytes_per_token_total(model, context_tokens)
    return PassBytes(float(routed), model.shared_weight_bytes, float(kv), float(experts))


def sync_efficiency(tp: int, a: NapkinAssumptions) -> float:
    return 1.0 / (1.0 + a.sync_loss_per_rank * (tp - 1))


def shard_efficiency(model: ModelProfile, tp: int, a: NapkinAssumptions) -> float:
    if a.shard_width_half <= 0:
        return 1.0
    width = model.ffn_width / tp
    return width / (width + a.shard_width_half)


def effective_bandwidth(model: ModelProfile, gpu: GpuSpec, tp: int, a: NapkinAssumptions) -> float:
    """Aggregate HBM bytes/s a TP group actually streams."""
    return tp * gpu.hbm_bandwidth * sync_efficiency(tp, a) * a.mbu * shard_efficiency(model, tp, a)


def overhead_seconds(model: ModelProfile, gpu: GpuSpec, tp: int, a: NapkinAssumptions) -> float:
    """Fixed per-pass cost: launches plus the latency of every collective, growing with TP."""
    if tp <= 1:
        return a.launch_overhead_s
    in_node = min(tp, gpu.gpus_per_node) - 1
    across = max(tp - gpu.gpus_per_node, 0)
    steps = in_node + across * a.internode_step_factor
    return a.launch_overhead_s + a.collective_step_s * a.collectives_per_layer * model.layers * steps


def attention_flops_per_token(model: ModelProfile, context_tokens: float) -> float:
    """Q.K and A.V over the whole context, multiply-adds counted as two FLOPs."""
    width = model.kv_lora_rank + model.rope_head_dim if model.attention == "mla" else model.head_dim
    return 4.0 * model.layers * model.attention_heads * width * context_tokens


def compute_seconds(
    model: ModelProfile, gpu: GpuSpec, tp: int, batch: Batch, context_tokens: float, a: NapkinAssumptions
) -> Batch:
    per_token = 2.0 * model.active_params + attention_flops_per_token(model, context_tokens)
    return batch * (per_token / (tp * gpu.peak_flops(model.compute_dtype) * a.mfu_decode))


def memory_seconds(
    model: ModelProfile, gpu: GpuSpec, tp: int, batch: Batch, context_tokens: float, a: NapkinAssumptions
) -> Batch:
    return pass_total_bytes(model, batch, context_tokens) / effective_bandwidth(model, gpu, tp, a)


def napkin_per_pass(
    model: ModelProfile, gpu: GpuSpec, tp: int, batch: Batch, context_tokens: float,
    a: NapkinAssumptions = NapkinAssumptions(),
) -> Batch:
    """Seconds for one decode pass by first principles."""
    work = np.maximum(
        memory_seconds(model, gpu, tp, batch, context_tokens, a),
        compute_seconds(model, gpu, tp, batch, context_tokens, a),
    )
    result = overhead_seconds(model, gpu, tp, a) + a.overlap * work
    return float(result) if isinstance(batch, float | int) else result


def prefill_tokens_per_second(model: ModelProfile, gpu: GpuSpec, tp: int, a: NapkinAssumptions) -> float:
    """Prefill is compute-bound: TP x peak x MFU over 2 FLOPs per active parameter per token."""
    return tp * gpu.peak_flops(model.compute_dtype) * a.mfu_prefill / (2.0 * model.active_params)
