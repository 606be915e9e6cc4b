# -*- coding: utf-8 -*-
# Copyright: ct200-deploy developers
# SPDX-License-Identifier: Apache-2.0
"""Model introspection for sglang_service (PRIVATE to the collection).

Reads ``config.json`` (and the safetensors index) of a local target model and
of a DFlash drafter. Nothing here imports SGLang, torch or transformers: it
must run on a managed host with the system Python.

Hybrid detection is data-driven (HYBRID_* tables below): a target is
*hybrid* when any of its text configs carries a recurrent / linear-attention
marker. Sliding-window attention is NOT recurrent and does not count.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from ansible_collections.ct200.deploy.plugins.module_utils._io import listdir_sorted

# Keys under which multimodal / wrapper configs nest the language model.
TEXT_CONFIG_KEYS = ("text_config", "language_config", "llm_config", "thinker_config")

# layer_types / layers_block_type values that mean "this layer keeps a
# recurrent state" (Qwen3-Next/3.5/3.6 GDN, Mamba hybrids, Kimi-Linear, ...).
HYBRID_LAYER_VALUES = frozenset(
    {
        "linear_attention",
        "linear",
        "mamba",
        "mamba2",
        "ssm",
        "gdn",
        "gated_deltanet",
        "deltanet",
        "recurrent",
        "kda",
        "lightning_attention",
    }
)
# Keys whose mere presence (non-null) marks recurrent layers.
HYBRID_KEYS = (
    "full_attention_interval",  # Qwen3-Next / Qwen3.5 / Qwen3.6
    "linear_num_value_heads",
    "linear_num_key_heads",
    "linear_conv_kernel_dim",
    "linear_attn_config",  # Kimi-Linear
    "mamba_d_state",
    "mamba_n_heads",
    "mamba_expand",
    "ssm_state_size",
    "hybrid_override_pattern",  # Nemotron-H ("M-M*-...")
    "attn_layer_period",  # Jamba
)
# model_type values that are hybrid (recurrent) by construction.
HYBRID_MODEL_TYPES = frozenset(
    {
        "qwen3_next",
        "qwen3_5",
        "qwen3_5_text",
        "qwen3_5_moe",
        "qwen3_5_moe_text",
        "qwen3_6",
        "qwen3_6_moe",
        "nemotron_h",
        "nemotron_h_omni",
        "nemotron_h_puzzle",
        "jamba",
        "falcon_h1",
        "falcon_mamba",
        "granitemoehybrid",
        "bamba",
        "zamba",
        "zamba2",
        "mamba",
        "mamba2",
        "kimi_linear",
        "bailing_hybrid",
        "lfm2",
        "plamo2",
        "minimax",
    }
)
# Architectures substrings that mean a DFlash drafter.
DFLASH_ARCH_MARKERS = ("DFlash", "Dflash", "DSpark")
KIMI_MODEL_TYPES = frozenset({"kimi_k25", "kimi_k2", "kimi_k2_5", "kimi_k26"})


class ModelConfigError(Exception):
    """A model directory cannot be introspected (message names path and fix)."""


@dataclass
class ModelInfo:
    """What the validation needs to know about a local model directory."""

    path: str
    model_type: Optional[str]
    text_model_type: Optional[str]
    architectures: List[str]
    num_layers: Optional[int]
    num_attention_heads: Optional[int]
    num_key_value_heads: Optional[int]
    hidden_size: Optional[int]
    vocab_size: Optional[int]
    max_position_embeddings: Optional[int]
    hybrid: bool
    hybrid_markers: List[str]
    mla: bool
    quantization: Optional[Dict[str, Any]]
    weight_bytes: Optional[int]
    weight_bytes_source: Optional[str]
    trust_remote_code: bool
    is_kimi: bool
    dflash: Optional[Dict[str, Any]] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)

    def summary(self) -> Dict[str, Any]:
        """A JSON-safe view for module results (no raw config)."""
        return {
            "path": self.path,
            "model_type": self.model_type,
            "text_model_type": self.text_model_type,
            "architectures": list(self.architectures),
            "num_layers": self.num_layers,
            "num_attention_heads": self.num_attention_heads,
            "num_key_value_heads": self.num_key_value_heads,
            "hidden_size": self.hidden_size,
            "vocab_size": self.vocab_size,
            "max_position_embeddings": self.max_position_embeddings,
            "hybrid": self.hybrid,
            "hybrid_markers": list(self.hybrid_markers),
            "mla": self.mla,
            "quantization": self.quantization,
            "weight_bytes": self.weight_bytes,
            "weight_bytes_source": self.weight_bytes_source,
            "is_kimi": self.is_kimi,
            "dflash": self.dflash,
        }


def read_json(path: str, what: str) -> Dict[str, Any]:
    """Read a JSON object from ``path`` or raise ModelConfigError."""
    try:
        with open(path, "r", encoding="utf-8") as handle:
            data = json.load(handle)
    except FileNotFoundError:
        raise ModelConfigError(
            "%s: %s not found; point the option at the local model directory "
            "that contains config.json (download it first with ct200.deploy.hf_download)"
            % (what, path)
        )
    except (OSError, ValueError) as exc:
        raise ModelConfigError("%s: cannot read %s (%s); re-download the file" % (what, path, exc))
    if not isinstance(data, dict):
        raise ModelConfigError("%s: %s is not a JSON object; re-download the file" % (what, path))
    return data


def text_configs(config: Dict[str, Any]) -> List[Dict[str, Any]]:
    """The config followed by every nested language-model config, outermost first."""
    out = [config]
    seen = 0
    while seen < len(out) and len(out) < 8:
        current = out[seen]
        seen += 1
        for key in TEXT_CONFIG_KEYS:
            nested = current.get(key)
            if isinstance(nested, dict):
                out.append(nested)
    return out


def first_value(configs: List[Dict[str, Any]], *keys: str) -> Any:
    """First non-null value of any key, innermost (text) config first."""
    for cfg in reversed(configs):
        for key in keys:
            value = cfg.get(key)
            if value is not None:
                return value
    return None


def _as_int(value: Any) -> Optional[int]:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


def hybrid_markers(config: Dict[str, Any]) -> List[str]:
    """Reasons why a config is hybrid (empty list: pure attention)."""
    reasons: List[str] = []
    for cfg in text_configs(config):
        mt = cfg.get("model_type")
        if isinstance(mt, str) and mt.lower() in HYBRID_MODEL_TYPES:
            reasons.append("model_type %s" % mt)
        for arch in cfg.get("architectures") or []:
            if isinstance(arch, str) and any(
                token in arch.lower() for token in ("mamba", "jamba", "zamba", "nemotronh", "qwen3next", "hybrid")
            ):
                reasons.append("architecture %s" % arch)
        for key in ("layer_types", "layers_block_type", "block_types"):
            values = cfg.get(key)
            if isinstance(values, list):
                found = sorted({str(v) for v in values if str(v).lower() in HYBRID_LAYER_VALUES})
                if found:
                    reasons.append("%s contains %s" % (key, ", ".join(found)))
        for key in HYBRID_KEYS:
            if cfg.get(key) is not None:
                reasons.append("%s is set" % key)
    # keep order, drop duplicates
    unique: List[str] = []
    for reason in reasons:
        if reason not in unique:
            unique.append(reason)
    return unique


def quantization_of(configs: List[Dict[str, Any]]) -> Optional[Dict[str, Any]]:
    """quant_method and bits of the (innermost) quantization_config, if any."""
    qc = first_value(configs, "quantization_config", "compression_config")
    if not isinstance(qc, dict):
        return None
    out: Dict[str, Any] = {"quant_method": qc.get("quant_method") or qc.get("quant_algo")}
    bits = qc.get("bits") or qc.get("num_bits")
    groups = qc.get("config_groups")
    if bits is None and isinstance(groups, dict):
        for group in groups.values():
            weights = group.get("weights") if isinstance(group, dict) else None
            if isinstance(weights, dict) and weights.get("num_bits") is not None:
                bits = weights.get("num_bits")
                out["weight_type"] = weights.get("type")
                break
    if bits is not None:
        out["bits"] = bits
    if qc.get("format"):
        out["format"] = qc.get("format")
    return out


def weight_bytes(path: str):
    """(bytes, source) from model.safetensors.index.json, else *.safetensors sizes."""
    index = os.path.join(path, "model.safetensors.index.json")
    if os.path.isfile(index):
        data = read_json(index, "safetensors index")
        total = _as_int((data.get("metadata") or {}).get("total_size"))
        if total is not None and total > 0:
            return total, "index"
    total = 0
    found = False
    for name in listdir_sorted(path):
        if name.endswith(".safetensors"):
            try:
                total += os.path.getsize(os.path.join(path, name))
                found = True
            except OSError:
                continue
    if found:
        return total, "files"
    return None, None


def dflash_info(config: Dict[str, Any]) -> Optional[Dict[str, Any]]:
    """The DFlash part of a drafter config, or None when it is not a DFlash drafter."""
    archs = [a for a in config.get("architectures") or [] if isinstance(a, str)]
    dcfg = config.get("dflash_config")
    is_dflash = isinstance(dcfg, dict) or any(m in a for a in archs for m in DFLASH_ARCH_MARKERS)
    if not is_dflash:
        return None
    dcfg = dcfg if isinstance(dcfg, dict) else {}
    block = _as_int(dcfg.get("block_size"))
    if block is None:
        block = _as_int(config.get("block_size"))
    layer_ids = dcfg.get("target_layer_ids", config.get("target_layer_ids"))
    if isinstance(layer_ids, list):
        layer_ids = [i for i in (_as_int(v) for v in layer_ids) if i is not None]
    else:
        layer_ids = None
    return {
        "block_size": block,
        "target_layer_ids": layer_ids,
        "num_target_layers": _as_int(dcfg.get("num_target_layers", config.get("num_target_layers"))),
        "mask_token_id": _as_int(dcfg.get("mask_token_id")),
    }


def inspect_model(path: str, what: str = "target") -> ModelInfo:
    """Introspect the local model directory ``path``."""
    if not path or not os.path.isabs(path):
        raise ModelConfigError(
            "%s: %r is not an absolute local path; give the model directory "
            "(e.g. /models/moonshotai/Kimi-K2.6), not a Hub repo id" % (what, path)
        )
    if not os.path.isdir(path):
        raise ModelConfigError(
            "%s: directory %s does not exist; download the model there first "
            "(ct200.deploy.model_weights) or fix the path" % (what, path)
        )
    config = read_json(os.path.join(path, "config.json"), what)
    configs = text_configs(config)
    text = configs[-1]
    model_type = config.get("model_type")
    text_model_type = text.get("model_type") if text is not config else model_type
    archs = [a for a in config.get("architectures") or [] if isinstance(a, str)]
    markers = hybrid_markers(config)
    wbytes, wsource = weight_bytes(path)
    types = {str(c.get("model_type", "")).lower() for c in configs}
    return ModelInfo(
        path=path,
        model_type=model_type,
        text_model_type=text_model_type,
        architectures=archs,
        num_layers=_as_int(first_value(configs, "num_hidden_layers", "n_layer", "num_layers")),
        num_attention_heads=_as_int(first_value(configs, "num_attention_heads", "n_head")),
        num_key_value_heads=_as_int(first_value(configs, "num_key_value_heads")),
        hidden_size=_as_int(first_value(configs, "hidden_size", "d_model")),
        vocab_size=_as_int(first_value(configs, "vocab_size")),
        max_position_embeddings=_as_int(first_value(configs, "max_position_embeddings")),
        hybrid=bool(markers),
        hybrid_markers=markers,
        mla=first_value(configs, "kv_lora_rank") is not None,
        quantization=quantization_of(configs),
        weight_bytes=wbytes,
        weight_bytes_source=wsource,
        trust_remote_code=isinstance(config.get("auto_map"), dict),
        is_kimi=bool(types & KIMI_MODEL_TYPES),
        dflash=dflash_info(config),
        raw=config,
    )
