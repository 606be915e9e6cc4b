"""Small model-directory fixtures: real-shaped config.json files, no weights.

Weight sizes are claimed by model.safetensors.index.json metadata.total_size
(what the module reads), so a 595 GB Kimi-K2.6 fits in a few KB.
"""
import copy
import json
import os

KIMI_WEIGHT_BYTES = 595_303_280_640  # ~595.3 GB, the Kimi-K2.6 INT4 checkpoint
KIMI_DRAFT_WEIGHT_BYTES = 3_021_000_000
QWEN36_WEIGHT_BYTES = 53_800_000_000

KIMI_TEXT = {
    "architectures": ["DeepseekV3ForCausalLM"],
    "model_type": "kimi_k2",
    "vocab_size": 163840,
    "hidden_size": 7168,
    "intermediate_size": 18432,
    "moe_intermediate_size": 2048,
    "num_hidden_layers": 61,
    "num_attention_heads": 64,
    "num_key_value_heads": 64,
    "n_shared_experts": 1,
    "n_routed_experts": 384,
    "num_experts_per_tok": 8,
    "first_k_dense_replace": 1,
    "kv_lora_rank": 512,
    "q_lora_rank": 1536,
    "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "v_head_dim": 128,
    "max_position_embeddings": 262144,
    "rope_theta": 50000.0,
    "rope_scaling": {"type": "yarn", "factor": 64.0, "original_max_position_embeddings": 4096,
                     "beta_fast": 1.0, "beta_slow": 1.0, "mscale": 1.0, "mscale_all_dim": 1.0},
    "torch_dtype": "bfloat16",
    "quantization_config": {
        "quant_method": "compressed-tensors",
        "format": "pack-quantized",
        "config_groups": {"group_0": {"targets": ["Linear"], "weights": {
            "num_bits": 4, "type": "int", "symmetric": True, "group_size": 32, "strategy": "group",
            "dynamic": False, "actorder": None, "observer": "minmax"},
            "input_activations": None, "output_activations": None}},
        "ignore": ["lm_head", "re:.*self_attn.*", "re:.*shared_experts.*", "re:.*mlp\\.(gate|up|gate_up|down)_proj.*"],
        "kv_cache_scheme": None,
        "quantization_status": "compressed",
    },
}
# The real repo also has auto_map (custom code files); left out so SGLang's
# resolver reads the config with its own KimiK25Config instead of importing
# configuration_kimi_k25.py, which these fixtures do not ship.
KIMI_CONFIG = {
    "architectures": ["KimiK25ForConditionalGeneration"],
    "model_type": "kimi_k25",
    "media_placeholder_token_id": 163605,
    "pad_token_id": 163839,
    "torch_dtype": "bfloat16",
    "text_config": KIMI_TEXT,
    "vision_config": {"patch_size": 14, "num_attention_heads": 16, "num_hidden_layers": 27,
                      "hidden_size": 1152, "intermediate_size": 4304, "text_hidden_size": 7168},
}
KIMI_DRAFT_CONFIG = {
    "architectures": ["DFlashDraftModel"],
    "model_type": "qwen3",
    "block_size": 16,
    "dflash_config": {"mask_token_id": 163606, "target_layer_ids": [1, 15, 30, 45, 59]},
    "hidden_size": 7168,
    "intermediate_size": 18432,
    "num_hidden_layers": 5,
    "num_attention_heads": 64,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "vocab_size": 163840,
    "max_position_embeddings": 262144,
    "rms_norm_eps": 1e-06,
    "rope_theta": 50000.0,
    "torch_dtype": "bfloat16",
}
_QWEN_LAYERS = (["linear_attention"] * 3 + ["full_attention"]) * 16
QWEN36_CONFIG = {
    "architectures": ["Qwen3_5ForConditionalGeneration"],
    "model_type": "qwen3_5",
    "text_config": {
        "model_type": "qwen3_5_text",
        "hidden_size": 5120,
        "num_hidden_layers": 64,
        "num_attention_heads": 24,
        "num_key_value_heads": 4,
        "head_dim": 256,
        "layer_types": _QWEN_LAYERS,
        "full_attention_interval": 4,
        "linear_num_value_heads": 48,
        "linear_num_key_heads": 16,
        "linear_key_head_dim": 128,
        "linear_value_head_dim": 128,
        "linear_conv_kernel_dim": 4,
        "vocab_size": 248320,
        "max_position_embeddings": 262144,
        "torch_dtype": "bfloat16",
    },
    "vision_config": {"depth": 27, "hidden_size": 1152},
}
QWEN36_DRAFT_CONFIG = {
    "architectures": ["DFlashDraftModel"],
    "model_type": "qwen3",
    "block_size": 16,
    "dflash_config": {"mask_token_id": 248077, "target_layer_ids": [1, 16, 31, 46, 61]},
    "hidden_size": 5120,
    "num_hidden_layers": 5,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "vocab_size": 248320,
    "max_position_embeddings": 262144,
    "torch_dtype": "bfloat16",
}


def write_model(path, config, total_size=None, shard_sizes=None):
    """Create a model dir with config.json and (optionally) an index or shard files."""
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "config.json"), "w", encoding="utf-8") as handle:
        json.dump(config, handle, indent=1)
    if total_size is not None:
        index = {"metadata": {"total_size": total_size},
                 "weight_map": {"lm_head.weight": "model-00001-of-00001.safetensors"}}
        with open(os.path.join(path, "model.safetensors.index.json"), "w", encoding="utf-8") as handle:
            json.dump(index, handle)
    for i, size in enumerate(shard_sizes or []):
        with open(os.path.join(path, "model-%05d.safetensors" % i), "wb") as handle:
            handle.truncate(size)
    return str(path)


def kimi(root, name="Kimi-K2.6"):
    return write_model(os.path.join(str(root), name), copy.deepcopy(KIMI_CONFIG), KIMI_WEIGHT_BYTES)


def kimi_draft(root, name="Kimi-K2.6-DFlash", **overrides):
    cfg = copy.deepcopy(KIMI_DRAFT_CONFIG)
    cfg.update(overrides)
    return write_model(os.path.join(str(root), name), cfg, KIMI_DRAFT_WEIGHT_BYTES)


def qwen36(root, name="Qwen3.6-27B"):
    return write_model(os.path.join(str(root), name), copy.deepcopy(QWEN36_CONFIG), QWEN36_WEIGHT_BYTES)


def qwen36_draft(root, name="Qwen3.6-27B-DFlash"):
    return write_model(os.path.join(str(root), name), copy.deepcopy(QWEN36_DRAFT_CONFIG), 1_200_000_000)
