"""The catalogs load, carry their sources, and reject unknown names with the list of known ones."""

from __future__ import annotations

from importlib import resources

import pytest

from infertune.model import CatalogError, gpu_names, kv_bytes_per_token, load_gpu, load_model, model_names

REQUIRED_MODELS = {"llama-3.1-8b", "llama-3.3-70b", "qwen3-32b", "mixtral-8x7b", "deepseek-v3", "deepseek-r1",
                   "kimi-k2", "kimi-k2.6", "gpt-oss-120b"}


def test_every_required_profile_and_gpu_is_there():
    assert set(model_names()) >= REQUIRED_MODELS
    assert {"b200", "gb200", "b300", "h200", "h100"} <= set(gpu_names())
    for name in model_names():
        assert load_model(name).total_params > 0
    assert load_gpu("B200").hbm_bandwidth == 8.0e12


def test_every_figure_in_the_catalogs_names_its_source():
    for filename in ("gpus.toml", "models.toml"):
        text = (resources.files("infertune.model") / "data" / filename).read_text()
        for line in text.splitlines():
            if "=" in line and not line.lstrip().startswith(("#", "[", "display", "hf_id", "attention =")):
                assert "#" in line or line.split("=")[0].strip() in {"compute_dtype"}, f"{filename}: {line!r}"


def test_unknown_names_are_clear_errors():
    with pytest.raises(CatalogError, match=r"unknown GPU 'a100'.*b200"):
        load_gpu("a100")
    with pytest.raises(CatalogError, match=r"unknown model 'gpt-5'"):
        load_model("gpt-5")


def test_gqa_kv_splits_across_ranks_up_to_the_kv_heads():
    llama = load_model("llama-3.3-70b")  # 8 KV heads
    assert kv_bytes_per_token(llama, 1) == 2 * 80 * 8 * 128 * 2
    assert kv_bytes_per_token(llama, 8) == kv_bytes_per_token(llama, 1) / 8
    assert kv_bytes_per_token(llama, 16) == kv_bytes_per_token(llama, 8)  # replicated past TP = kv_heads


def test_sliding_window_layers_hold_only_the_window():
    gpt = load_model("gpt-oss-120b")
    short, long = kv_bytes_per_token(gpt, 1, 128), kv_bytes_per_token(gpt, 1, 100_000)
    assert long < short
    assert long == pytest.approx(2 * (18 + 18 * 128 / 100_000) * 8 * 64 * 2)
