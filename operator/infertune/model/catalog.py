"""GPU and model catalogs: frozen profiles loaded from the TOML data files beside this module."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any, Literal

from infertune.errors import InfertuneError

AttentionKind = Literal["gqa", "mla"]
ComputeDtype = Literal["bf16", "fp8", "fp4"]


class CatalogError(InfertuneError):
    """An unknown name or a malformed profile; the message names the field."""


@dataclass(frozen=True)
class GpuSpec:
    name: str
    hbm_bytes: float
    hbm_bandwidth: float
    flops_bf16: float
    flops_fp8: float
    flops_fp4: float
    nvlink_bandwidth: float
    gpus_per_node: int
    price_per_gpu_hour: float
    display: str = ""

    def peak_flops(self, dtype: ComputeDtype) -> float:
        return {"bf16": self.flops_bf16, "fp8": self.flops_fp8, "fp4": self.flops_fp4}[dtype]


@dataclass(frozen=True)
class MoeSpec:
    routed_experts: int
    experts_per_token: int
    moe_layers: int
    expert_params: float
    shared_experts: int = 0


@dataclass(frozen=True)
class ModelProfile:
    name: str
    layers: int
    hidden_size: int
    attention_heads: int
    attention: AttentionKind
    ffn_width: int  # the GEMM width each rank slices under TP (per expert for MoE)
    total_params: float
    active_params: float
    weight_bytes_per_param: float
    kv_bytes_per_element: float
    compute_dtype: ComputeDtype = "bf16"
    kv_heads: int = 0
    head_dim: int = 0
    kv_lora_rank: int = 0
    rope_head_dim: int = 0
    moe: MoeSpec | None = None
    expert_bytes_per_param: float | None = None
    dense_weight_bytes: float | None = None  # non-routed bytes read per pass, when known
    sliding_window: int | None = None
    sliding_layers: int = 0
    hf_id: str = ""

    @property
    def expert_bytes(self) -> float:
        """Bytes of one routed expert in one layer."""
        if self.moe is None:
            return 0.0
        per_param = self.expert_bytes_per_param or self.weight_bytes_per_param
        return self.moe.expert_params * per_param

    @property
    def routed_weight_bytes(self) -> float:
        if self.moe is None:
            return 0.0
        return self.moe.routed_experts * self.moe.moe_layers * self.expert_bytes

    @property
    def shared_weight_bytes(self) -> float:
        """Weights every pass reads whatever the batch: attention, embeddings, dense and shared experts."""
        if self.dense_weight_bytes is not None:
            return self.dense_weight_bytes
        routed_params = 0.0 if self.moe is None else (
            self.moe.routed_experts * self.moe.moe_layers * self.moe.expert_params
        )
        return max(self.total_params - routed_params, 0.0) * self.weight_bytes_per_param


_DATA = resources.files("infertune.model") / "data"

_GPU_FIELDS = {f for f in GpuSpec.__dataclass_fields__ if f != "name"}
_MOE_FIELDS = {"routed_experts", "experts_per_token", "moe_layers", "expert_params", "shared_experts"}
_MODEL_FIELDS = {f for f in ModelProfile.__dataclass_fields__ if f not in ("name", "moe")} | _MOE_FIELDS


@cache
def _table(filename: str) -> dict[str, dict[str, Any]]:
    return tomllib.loads((_DATA / filename).read_text(encoding="utf-8"))


def gpu_names() -> list[str]:
    return sorted(_table("gpus.toml"))


def model_names() -> list[str]:
    return sorted(_table("models.toml"))


def _unknown(kind: str, name: str, known: list[str]) -> CatalogError:
    return CatalogError(f"unknown {kind} {name!r}; known: {', '.join(known)}")


def load_gpu(name: str) -> GpuSpec:
    key = name.strip().lower()
    table = _table("gpus.toml")
    if key not in table:
        raise _unknown("GPU", name, gpu_names())
    return gpu_from_mapping(key, table[key])


def gpu_from_mapping(name: str, raw: dict[str, Any]) -> GpuSpec:
    unknown = set(raw) - _GPU_FIELDS
    if unknown:
        raise CatalogError(f"gpu {name}: unknown field(s) {sorted(unknown)}")
    try:
        return GpuSpec(name=name, **raw)
    except TypeError as exc:
        raise CatalogError(f"gpu {name}: {exc}") from None


def load_model(name: str) -> ModelProfile:
    key = name.strip().lower()
    table = _table("models.toml")
    if key not in table:
        raise _unknown("model", name, model_names())
    return model_from_mapping(key, table[key])


def model_from_mapping(name: str, raw: dict[str, Any]) -> ModelProfile:
    """Builds a profile from the flat catalog form (MoE fields inline)."""
    unknown = set(raw) - _MODEL_FIELDS
    if unknown:
        raise CatalogError(f"model {name}: unknown field(s) {sorted(unknown)}")
    fields = dict(raw)
    moe_raw = {k: fields.pop(k) for k in list(fields) if k in _MOE_FIELDS}
    moe = None
    if moe_raw:
        missing = {"routed_experts", "experts_per_token", "moe_layers", "expert_params"} - set(moe_raw)
        if missing:
            raise CatalogError(f"model {name}: MoE profile is missing {sorted(missing)}")
        moe = MoeSpec(**moe_raw)
    try:
        profile = ModelProfile(name=name, moe=moe, **fields)
    except TypeError as exc:
        raise CatalogError(f"model {name}: {exc}") from None
    validate_profile(profile)
    return profile


def validate_profile(p: ModelProfile) -> None:
    """Rejects a profile that would make the model divide by zero or lie."""
    positive = {
        "layers": p.layers, "hidden_size": p.hidden_size, "attention_heads": p.attention_heads,
        "total_params": p.total_params, "active_params": p.active_params,
        "weight_bytes_per_param": p.weight_bytes_per_param, "kv_bytes_per_element": p.kv_bytes_per_element,
        "ffn_width": p.ffn_width,
    }
    if p.attention == "gqa":
        positive |= {"kv_heads": p.kv_heads, "head_dim": p.head_dim}
    elif p.attention == "mla":
        positive |= {"kv_lora_rank": p.kv_lora_rank}
    else:
        raise CatalogError(f"model {p.name}: attention must be 'gqa' or 'mla', got {p.attention!r}")
    for field_name, value in positive.items():
        if not value or value <= 0:
            raise CatalogError(f"model {p.name}: {field_name} must be positive, got {value!r}")
    if p.active_params > p.total_params:
        raise CatalogError(f"model {p.name}: active_params exceeds total_params")
    if p.compute_dtype not in ("bf16", "fp8", "fp4"):
        raise CatalogError(f"model {p.name}: compute_dtype must be bf16, fp8 or fp4")
    if p.moe is not None and not 0 < p.moe.experts_per_token <= p.moe.routed_experts:
        raise CatalogError(f"model {p.name}: experts_per_token must be in 1..routed_experts")
    if not 0 <= p.sliding_layers <= p.layers:
        # More sliding layers than layers leaves a negative count of full ones, and a KV pool below zero.
        raise CatalogError(f"model {p.name}: sliding_layers must be in 0..layers ({p.layers}), got {p.sliding_layers}")
