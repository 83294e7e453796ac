"""A ModelProfile from a Hugging Face `config.json`: Llama/Qwen (GQA), Mixtral (MoE),
DeepSeek-V3/Kimi-K2 (MLA + MoE) and gpt-oss (sliding-window layers).

Parameter counts are derived from the architecture, because config.json does not carry them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from infertune.model.catalog import CatalogError, ComputeDtype, ModelProfile, MoeSpec, validate_profile


class ConfigError(CatalogError):
    """config.json lacks a field the model needs, or carries a nonsensical value."""


_DTYPE_BYTES = {"bfloat16": 2.0, "float16": 2.0, "float32": 4.0, "fp8": 1.0, "float8_e4m3fn": 1.0}
# No count in a config.json (layers, widths, heads, experts, vocabulary) comes near this; a bigger one,
# or NaN or infinity, is not a model (and would overflow the arithmetic).
_COUNT_MAX = 10**9


def _int(cfg: Mapping[str, Any], *keys: str, default: int | None = None) -> int:
    for key in keys:
        if key in cfg and cfg[key] is not None:
            value = cfg[key]
            if (isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value)
                    or not 0 <= value <= _COUNT_MAX):
                raise ConfigError(f"config.json field {key!r} must be a number from 0 to {_COUNT_MAX:,}, "
                                  f"got {repr(value)[:40]}")
            return int(value)
    if default is not None:
        return default
    raise ConfigError(f"config.json is missing the field {' or '.join(repr(k) for k in keys)}")


def _weight_bytes(cfg: Mapping[str, Any]) -> tuple[float, float | None, ComputeDtype]:
    """Bytes per parameter for dense weights and experts, and the dtype compute runs in."""
    quant = cfg.get("quantization_config") or {}
    method = str(quant.get("quant_method", "")).lower() if isinstance(quant, Mapping) else ""
    if method == "fp8":
        return 1.0, None, "fp8"
    if method == "mxfp4":
        return 2.0, 0.53, "fp8"  # MXFP4 experts: 4 bits + an 8-bit scale per 32 values
    if method in ("compressed-tensors", "awq", "gptq") and isinstance(quant, Mapping):
        return 2.0, 0.51, "fp4"
    dtype = str(cfg.get("torch_dtype") or cfg.get("dtype") or "bfloat16")
    if dtype not in _DTYPE_BYTES:
        raise ConfigError(f"config.json field 'torch_dtype' has an unknown dtype {dtype!r}")
    return _DTYPE_BYTES[dtype], None, "bf16"


def profile_from_hf_config(cfg: Mapping[str, Any], name: str, kv_bytes_per_element: float = 2.0) -> ModelProfile:
    """Builds a profile; raises ConfigError naming the missing or bad field."""
    if not isinstance(cfg, Mapping):
        raise ConfigError("config.json must hold a JSON object")
    nested = cfg.get("text_config")
    if isinstance(nested, Mapping):  # multimodal wrappers keep the LM under text_config
        cfg = {**cfg, **nested}
    layers = _int(cfg, "num_hidden_layers", "n_layer", "num_layers")
    hidden = _int(cfg, "hidden_size", "d_model", "n_embd")
    heads = _int(cfg, "num_attention_heads", "n_head")
    vocab = _int(cfg, "vocab_size")
    if min(layers, hidden, heads, vocab) <= 0:
        raise ConfigError("config.json: num_hidden_layers, hidden_size, num_attention_heads and vocab_size "
                          "must be positive")
    dense_bpp, expert_bpp, compute = _weight_bytes(cfg)

    mla = "kv_lora_rank" in cfg and cfg.get("kv_lora_rank")
    if mla:
        kv_lora = _int(cfg, "kv_lora_rank")
        rope = _int(cfg, "qk_rope_head_dim")
        nope = _int(cfg, "qk_nope_head_dim")
        v_dim = _int(cfg, "v_head_dim")
        q_lora = _int(cfg, "q_lora_rank", default=0)
        q_proj = hidden * q_lora + q_lora * heads * (nope + rope) if q_lora else hidden * heads * (nope + rope)
        attn_params = q_proj + hidden * (kv_lora + rope) + kv_lora * heads * (nope + v_dim) + heads * v_dim * hidden
        kv_heads, head_dim = 0, 0
    else:
        kv_heads = _int(cfg, "num_key_value_heads", default=heads)
        head_dim = _int(cfg, "head_dim", default=hidden // heads)
        attn_params = hidden * heads * head_dim * 2 + hidden * kv_heads * head_dim * 2
        kv_lora, rope = 0, 0

    routed = _int(cfg, "n_routed_experts", "num_local_experts", "num_experts", default=0)
    moe: MoeSpec | None = None
    if routed:
        per_token = _int(cfg, "num_experts_per_tok", "experts_per_token", "num_experts_per_token")
        width = _int(cfg, "moe_intermediate_size", "intermediate_size")
        shared = _int(cfg, "n_shared_experts", default=0)
        first_dense = _int(cfg, "first_k_dense_replace", default=0)
        expert_params = 3.0 * hidden * width
        moe = MoeSpec(routed, per_token, layers - first_dense, expert_params, shared)
        dense_ffn = _int(cfg, "intermediate_size", default=width)
        ffn_params = (moe.moe_layers * (routed + shared) * expert_params
                      + first_dense * 3.0 * hidden * dense_ffn)
        active_ffn = moe.moe_layers * (per_token + shared) * expert_params + first_dense * 3.0 * hidden * dense_ffn
    else:
        width = _int(cfg, "intermediate_size", "ffn_dim", "n_inner")
        ffn_params = layers * 3.0 * hidden * width
        active_ffn = ffn_params
    embeddings = vocab * hidden * (1 if cfg.get("tie_word_embeddings") else 2)
    total = layers * attn_params + ffn_params + embeddings
    active = layers * attn_params + active_ffn + embeddings

    window = _int(cfg, "sliding_window", default=0)
    layer_types = cfg.get("layer_types")
    sliding_layers = 0
    if layer_types is not None and (not isinstance(layer_types, list) or len(layer_types) != layers):
        # transformers refuses such a config too: which layers slide is unknown, and so is the KV they hold.
        count = len(layer_types) if isinstance(layer_types, list) else type(layer_types).__name__
        raise ConfigError(f"layer_types must list one type per layer ({layers}, num_hidden_layers), got {count}")
    if window and isinstance(layer_types, list):
        sliding_layers = sum(1 for t in layer_types if "sliding" in str(t))
    elif window and cfg.get("use_sliding_window"):
        sliding_layers = layers

    profile = ModelProfile(
        name=name, layers=layers, hidden_size=hidden, attention_heads=heads,
        attention="mla" if mla else "gqa", ffn_width=width, total_params=float(total),
        active_params=float(active), weight_bytes_per_param=dense_bpp, kv_bytes_per_element=kv_bytes_per_element,
        compute_dtype=compute, kv_heads=kv_heads, head_dim=head_dim, kv_lora_rank=kv_lora, rope_head_dim=rope,
        moe=moe, expert_bytes_per_param=expert_bpp,
        sliding_window=window if window and sliding_layers else None, sliding_layers=sliding_layers,
        hf_id=str(cfg.get("_name_or_path", "")),
    )
    try:
        validate_profile(profile)
    except CatalogError as exc:
        raise ConfigError(str(exc)) from None
    return profile
