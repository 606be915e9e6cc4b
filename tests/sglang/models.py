# SPDX-License-Identifier: Apache-2.0
"""Small model-directory fixtures: real-shaped config.json files, no weights.

Weight sizes are claimed by model.safetensors.index.json metadata.total_size
(what the module reads), so a 595 GB Kimi-K2.6 fits in a few KB.
"""
import copy
import json
import os

from localhub.repos import kimi_config

KIMI_WEIGHT_BYTES = 595_303_280_640  # ~595.3 GB, the Kimi-K2.6 INT4 checkpoint
KIMI_DRAFT_WEIGHT_BYTES = 3_021_000_000
QWEN36_WEIGHT_BYTES = 53_800_000_000


def _kimi_config():
    """The same Kimi-K2.6 config.json the local Hub serves, minus auto_map: the real repo ships
    custom code files these fixtures do not, and without auto_map SGLang's resolver reads the
    config with its own KimiK25Config instead of importing configuration_kimi_k25.py."""
    cfg = kimi_config()
    del cfg["auto_map"]
    return cfg


KIMI_CONFIG = _kimi_config()
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
