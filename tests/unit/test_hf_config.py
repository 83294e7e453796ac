"""Profiles built from Hugging Face config.json files written from public architecture facts."""

from __future__ import annotations

import json

import pytest

from infertune.model import ConfigError, kv_bytes_per_token, load_model, profile_from_hf_config

LLAMA_8B = {"architectures": ["LlamaForCausalLM"], "hidden_size": 4096, "intermediate_size": 14336,
            "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
            "vocab_size": 128256, "torch_dtype": "bfloat16", "tie_word_embeddings": False}
MIXTRAL = {"hidden_size": 4096, "intermediate_size": 14336, "num_attention_heads": 32, "num_hidden_layers": 32,
           "num_key_value_heads": 8, "num_local_experts": 8, "num_experts_per_tok": 2, "vocab_size": 32000,
           "torch_dtype": "bfloat16"}
KIMI_K2 = {"hidden_size": 7168, "intermediate_size": 18432, "moe_intermediate_size": 2048,
           "num_attention_heads": 64, "num_hidden_layers": 61, "num_key_value_heads": 64, "kv_lora_rank": 512,
           "q_lora_rank": 1536, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128,
           "n_routed_experts": 384, "n_shared_experts": 1, "num_experts_per_tok": 8, "first_k_dense_replace": 1,
           "vocab_size": 163840, "quantization_config": {"quant_method": "fp8"}}
GPT_OSS = {"hidden_size": 2880, "intermediate_size": 2880, "num_attention_heads": 64, "num_hidden_layers": 36,
           "num_key_value_heads": 8, "head_dim": 64, "num_local_experts": 128, "num_experts_per_tok": 4,
           "vocab_size": 201088, "sliding_window": 128,
           "layer_types": ["sliding_attention", "full_attention"] * 18,
           "quantization_config": {"quant_method": "mxfp4"}}


def test_llama_gqa_matches_the_catalog():
    p = profile_from_hf_config(LLAMA_8B, "llama")
    assert p.attention == "gqa" and p.moe is None
    assert p.total_params == pytest.approx(8.03e9, rel=0.02)
    assert kv_bytes_per_token(p) == kv_bytes_per_token(load_model("llama-3.1-8b"))


def test_mixtral_moe_counts_total_and_active():
    p = profile_from_hf_config(MIXTRAL, "mixtral")
    assert p.moe is not None and p.moe.routed_experts == 8 and p.moe.experts_per_token == 2
    assert p.total_params == pytest.approx(46.7e9, rel=0.02)
    assert p.active_params == pytest.approx(12.9e9, rel=0.03)


def test_kimi_k2_is_mla_plus_moe():
    p = profile_from_hf_config(KIMI_K2, "kimi")
    assert p.attention == "mla" and p.kv_lora_rank == 512 and p.rope_head_dim == 64
    assert p.moe is not None and p.moe.moe_layers == 60
    assert p.total_params == pytest.approx(1.04e12, rel=0.03)
    assert p.active_params == pytest.approx(32e9, rel=0.08)
    assert p.weight_bytes_per_param == 1.0


def test_gpt_oss_has_sliding_window_layers():
    p = profile_from_hf_config(GPT_OSS, "gpt-oss")
    assert p.sliding_window == 128 and p.sliding_layers == 18
    assert p.total_params == pytest.approx(116.8e9, rel=0.03)
    assert p.expert_bytes_per_param == pytest.approx(0.53)


@pytest.mark.parametrize("field", ["num_hidden_layers", "hidden_size", "num_attention_heads", "vocab_size"])
def test_a_missing_field_is_named(field):
    cfg = {k: v for k, v in LLAMA_8B.items() if k != field}
    with pytest.raises(ConfigError, match=field):
        profile_from_hf_config(cfg, "broken")


def test_a_bad_value_is_named():
    with pytest.raises(ConfigError, match="num_key_value_heads"):
        profile_from_hf_config({**LLAMA_8B, "num_key_value_heads": "eight"}, "broken")
    with pytest.raises(ConfigError, match="torch_dtype"):
        profile_from_hf_config({**LLAMA_8B, "torch_dtype": "float7"}, "broken")


@pytest.mark.parametrize("layer_types", [["sliding_attention"] * 37, ["sliding_attention"] * 35, "sliding_attention"])
def test_layer_types_that_do_not_list_every_layer_are_refused(layer_types):
    # 37 sliding layers of 36 once left -1 full layers, a KV pool below zero and every layout refused.
    with pytest.raises(ConfigError, match="layer_types must list one type per layer"):
        profile_from_hf_config({**GPT_OSS, "layer_types": layer_types}, "broken")


def test_config_json_round_trips_through_a_file(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(KIMI_K2))
    p = profile_from_hf_config(json.loads(path.read_text()), "kimi")
    assert p.moe is not None
