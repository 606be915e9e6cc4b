# SPDX-License-Identifier: Apache-2.0
"""Model introspection: nested text_config, hybrid markers (data-driven), DFlash drafters, weight bytes."""
import json
import os

import pytest

import models
from ansible_collections.ct200.deploy.plugins.module_utils import sglang_model as model


def test_kimi_follows_text_config(mdir):
    info = model.inspect_model(mdir["kimi"])
    assert (info.model_type, info.text_model_type) == ("kimi_k25", "kimi_k2")
    assert info.architectures == ["KimiK25ForConditionalGeneration"]
    assert (info.num_layers, info.num_attention_heads, info.vocab_size) == (61, 64, 163840)
    assert info.mla and info.is_kimi and not info.trust_remote_code  # fixture has no auto_map
    assert not info.hybrid and info.hybrid_markers == []
    assert info.quantization == {"quant_method": "compressed-tensors", "bits": 4, "weight_type": "int",
                                 "format": "pack-quantized"}
    assert (info.weight_bytes, info.weight_bytes_source) == (models.KIMI_WEIGHT_BYTES, "index")
    assert info.dflash is None


def test_auto_map_means_remote_code(tmp_path):
    path = models.write_model(str(tmp_path / "m"), {"model_type": "x", "auto_map": {"AutoConfig": "c.C"}})
    assert model.inspect_model(path).trust_remote_code


def test_kimi_drafter(mdir):
    info = model.inspect_model(mdir["kimi_draft"], "draft")
    assert info.dflash == {"block_size": 16, "target_layer_ids": [1, 15, 30, 45, 59], "num_target_layers": None,
                           "mask_token_id": 163606}


def test_block_size_inside_dflash_config(tmp_path):
    path = models.write_model(str(tmp_path / "d"),
                              {"architectures": ["Qwen3ForCausalLM"], "dflash_config": {"block_size": 8}})
    assert model.inspect_model(path, "draft").dflash["block_size"] == 8


def test_qwen36_is_hybrid_for_several_reasons(mdir):
    info = model.inspect_model(mdir["qwen"])
    assert info.hybrid
    assert info.hybrid_markers[:3] == ["model_type qwen3_5", "model_type qwen3_5_text",
                                       "layer_types contains linear_attention"]
    assert "full_attention_interval is set" in info.hybrid_markers
    assert (info.num_layers, info.num_attention_heads) == (64, 24)


@pytest.mark.parametrize("config, hybrid", [
    ({"model_type": "qwen3_next", "architectures": ["Qwen3NextForCausalLM"]}, True),
    ({"model_type": "custom", "layer_types": ["full_attention", "linear_attention"]}, True),
    ({"model_type": "nemotron_h", "hybrid_override_pattern": "M-M-M*-"}, True),
    ({"model_type": "custom", "text_config": {"layers_block_type": ["mamba", "attention"]}}, True),
    ({"model_type": "jamba", "attn_layer_period": 8}, True),
    ({"model_type": "falcon_h1", "mamba_d_state": 128}, True),
    ({"model_type": "kimi_linear", "linear_attn_config": {"kda_layers": [1, 2]}}, True),
    # pure attention, including sliding-window hybrids (no recurrent state)
    ({"model_type": "llama", "architectures": ["LlamaForCausalLM"]}, False),
    ({"model_type": "gpt_oss", "layer_types": ["sliding_attention", "full_attention"]}, False),
    ({"model_type": "gemma3", "text_config": {"layer_types": ["sliding_attention"] * 5 + ["full_attention"]}}, False),
    ({"model_type": "deepseek_v3", "kv_lora_rank": 512}, False),
])
def test_hybrid_detection_table(tmp_path, config, hybrid):
    path = models.write_model(str(tmp_path / "m"), config)
    info = model.inspect_model(path)
    assert info.hybrid is hybrid, info.hybrid_markers


def test_weight_bytes_fall_back_to_shard_sizes(tmp_path):
    path = models.write_model(str(tmp_path / "m"), {"model_type": "llama"}, shard_sizes=[1000, 2345])
    assert model.weight_bytes(path) == (3345, "files")


def test_weight_bytes_unknown(tmp_path):
    path = models.write_model(str(tmp_path / "m"), {"model_type": "llama"})
    assert model.weight_bytes(path) == (None, None)


def test_relative_path_is_refused():
    with pytest.raises(model.ModelConfigError) as info:
        model.inspect_model("moonshotai/Kimi-K2.6")
    assert "is not an absolute local path" in str(info.value) and "not a Hub repo id" in str(info.value)


def test_missing_directory(tmp_path):
    with pytest.raises(model.ModelConfigError) as info:
        model.inspect_model(str(tmp_path / "nope"), "draft")
    assert str(info.value).startswith("draft: directory %s does not exist" % (tmp_path / "nope"))


def test_missing_and_broken_config(tmp_path):
    os.makedirs(str(tmp_path / "empty"))
    with pytest.raises(model.ModelConfigError) as info:
        model.inspect_model(str(tmp_path / "empty"))
    assert "config.json not found" in str(info.value)
    (tmp_path / "empty" / "config.json").write_text("{broken")
    with pytest.raises(model.ModelConfigError) as info:
        model.inspect_model(str(tmp_path / "empty"))
    assert "cannot read" in str(info.value) and "re-download" in str(info.value)
    (tmp_path / "empty" / "config.json").write_text(json.dumps([1, 2]))
    with pytest.raises(model.ModelConfigError):
        model.inspect_model(str(tmp_path / "empty"))


def test_summary_is_json_safe(mdir):
    json.dumps(model.inspect_model(mdir["qwen"]).summary())


def test_first_value_takes_the_innermost_set_key():
    """One lookup for sglang_model and sglang_fit: innermost config first, None skipped, 0 and False kept."""
    outer, inner = {"hidden_size": 7168, "n_layer": 3}, {"hidden_size": None, "num_layers": 0}
    assert model.first_value([outer, inner], "hidden_size") == 7168
    assert model.first_value([outer, inner], "num_layers", "n_layer") == 0
    assert model.first_value([outer, inner], "vocab_size") is None
