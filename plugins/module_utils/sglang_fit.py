# -*- coding: utf-8 -*-
# Copyright: ct200-deploy developers
# SPDX-License-Identifier: Apache-2.0
"""Memory fit of one SGLang instance: weights per GPU and the KV cache pool.

PRIVATE to the collection. Pure arithmetic on the model configs (no SGLang,
no torch), mirroring how SGLang 0.5.23 sizes its pool
(``mem_cache/kv_cache_configurator.py`` ``_profile_available_bytes``): the KV
budget is what is free after the weights are loaded minus the
``1 - mem_fraction_static`` slack, i.e. roughly

    pool = mem_fraction_static * (GPU memory - runtime reserve)
           - sharded weights / tp - weights replicated on every rank - drafter / tp

* **Replicated on every TP rank** (SGLang ``models/deepseek_v2.py`` and the
  multimodal wrappers): the MLA down-projections (``q_a_proj`` +
  ``kv_a_proj_with_mqa``, ReplicatedLinear), the MoE router gates and the
  vision tower + projector. Embeddings and lm_head are vocab-parallel (sharded).
* **KV bytes per token per GPU**: MLA keeps ``kv_lora_rank + qk_rope_head_dim``
  per layer on every rank (``calculate_mla_kv_cache_dim``); other models keep
  K and V of ``max(1, kv_heads // tp)`` heads for each full-attention layer.
  A DFlash drafter adds its own pool (``dflash_utils.dflash_draft_cell_size_per_token``).
* **Runtime reserve**: CUDA context, NCCL communicators and allocator slack that
  are resident before the pool is sized. 2.25 GiB reproduces the field figure
  for Kimi-K2.6 at tp 8 and 0.85 (116,153 tokens at bf16, sglang.md section 4)
  within 2 % on the conservative side.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Optional

GIB = 1024 ** 3
GB = 1000 ** 3
RUNTIME_RESERVE_GIB = 2.25
PARAM_BYTES = 2  # replicated parts are not quantized (Kimi's quantization 'ignore' list): bf16
KV_DTYPE_BYTES = {
    None: 2.0, "auto": 2.0, "bf16": 2.0, "bfloat16": 2.0, "float16": 2.0, "fp16": 2.0, "half": 2.0,
    "fp8": 1.0, "fp8_e4m3": 1.0, "fp8_e5m2": 1.0, "fp4_e2m1": 0.5,
}
FP8_KV = "fp8_e4m3"
FULL_ATTENTION_VALUES = frozenset({"full_attention", "attention", "full", "global", "sliding_attention"})


@dataclass
class FitInput:
    """What the arithmetic needs (all from the spec and the model introspection)."""

    gpu_memory_gib: float
    mem_fraction_static: float
    tp: int
    pp: int
    context_length: int
    kv_cache_dtype: Optional[str]
    target: Any  # sglang_model.ModelInfo
    draft: Any = None  # ModelInfo of the DFlash drafter, when speculative


def _cfg(model, *keys, default=None):
    """First non-null value of any key, innermost text config first (sglang_model.first_value)."""
    from ansible_collections.ct200.deploy.plugins.module_utils.sglang_model import first_value, text_configs
    value = first_value(text_configs(model.raw or {}), *keys)
    return default if value is None else value


def _int(value, default=0) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def mla_replicated_params(model) -> int:
    """q_a_proj + kv_a_proj_with_mqa of every layer (ReplicatedLinear in SGLang)."""
    if not model.mla:
        return 0
    hidden = _int(_cfg(model, "hidden_size"))
    width = (_int(_cfg(model, "q_lora_rank")) + _int(_cfg(model, "kv_lora_rank"))
             + _int(_cfg(model, "qk_rope_head_dim")))
    return hidden * width * _int(model.num_layers)


def router_params(model) -> int:
    """MoE router gates (n_experts x hidden per MoE layer)."""
    experts = _int(_cfg(model, "n_routed_experts", "num_experts", "num_local_experts"))
    if not experts:
        return 0
    moe_layers = max(_int(model.num_layers) - _int(_cfg(model, "first_k_dense_replace")), 0)
    return experts * _int(_cfg(model, "hidden_size")) * moe_layers


def vision_params(model) -> int:
    """Vision tower + projector: layers x (4 h^2 attention + 2 h i MLP) + patch-merger projector."""
    vision = (model.raw or {}).get("vision_config")
    if not isinstance(vision, dict):
        return 0
    hidden = _int(vision.get("vt_hidden_size") or vision.get("hidden_size") or vision.get("embed_dim"))
    layers = _int(vision.get("vt_num_hidden_layers") or vision.get("depth") or vision.get("num_hidden_layers"))
    inter = _int(vision.get("vt_intermediate_size") or vision.get("intermediate_size"), 4 * hidden)
    merge = vision.get("merge_kernel_size") or [2, 2]
    merged = hidden * (merge[0] * merge[1] if isinstance(merge, list) and len(merge) == 2 else 4)
    text_hidden = _int(vision.get("text_hidden_size") or _cfg(model, "hidden_size"))
    return layers * (4 * hidden * hidden + 2 * hidden * inter) + merged * merged + merged * text_hidden


def replicated_bytes(model) -> int:
    """Bytes every TP rank holds in full (estimated from the config)."""
    return PARAM_BYTES * (mla_replicated_params(model) + router_params(model) + vision_params(model))


def kv_dtype_bytes(kv_cache_dtype: Optional[str]) -> float:
    return KV_DTYPE_BYTES.get(kv_cache_dtype, 2.0)


def attention_layers(model) -> int:
    """Layers that keep a KV cache (hybrids: only the full-attention ones)."""
    layers = _int(model.num_layers)
    types = _cfg(model, "layer_types")
    if isinstance(types, list) and types:
        return sum(1 for t in types if str(t).lower() in FULL_ATTENTION_VALUES)
    interval = _int(_cfg(model, "full_attention_interval"))
    if interval > 0:
        return layers // interval
    return layers


def kv_bytes_per_token(model, tp: int, pp: int, dtype_bytes: float) -> float:
    """KV bytes one token costs on one GPU."""
    if model.mla:
        width = _int(_cfg(model, "kv_lora_rank")) + _int(_cfg(model, "qk_rope_head_dim"))
        return width * _int(model.num_layers) / max(pp, 1) * dtype_bytes
    heads = _int(model.num_attention_heads, 1) or 1
    kv_heads = _int(model.num_key_value_heads) or heads
    head_dim = _int(_cfg(model, "head_dim")) or (_int(model.hidden_size) // heads)
    per_rank = max(1, kv_heads // max(tp, 1))
    return per_rank * 2 * head_dim * attention_layers(model) / max(pp, 1) * dtype_bytes


def draft_kv_bytes_per_token(draft, tp: int) -> float:
    """The DFlash drafter's own KV pool per token (bf16)."""
    if draft is None:
        return 0.0
    return kv_bytes_per_token(draft, tp, 1, 2.0)


@dataclass
class Fit:
    """Result of the arithmetic; ``as_dict`` is what the module returns as ``fit``."""

    gpu_memory_gib: float
    usable_gb: float
    weights_gb: float
    replicated_gb: float
    draft_gb: float
    kv_pool_gb: float
    kv_bytes_per_token: int
    draft_kv_bytes_per_token: int
    kv_cache_dtype: str
    pool_tokens: int
    context_length: int
    concurrent_requests: float

    @property
    def weights_total_gb(self) -> float:
        return self.weights_gb + self.replicated_gb + self.draft_gb

    def as_dict(self) -> Dict[str, Any]:
        return {
            "gpu_memory_gib": round(self.gpu_memory_gib, 2),
            "runtime_reserve_gib": RUNTIME_RESERVE_GIB,
            "usable_gb_per_gpu": round(self.usable_gb, 2),
            "weights_gb_per_gpu": round(self.weights_gb, 2),
            "replicated_gb_per_gpu": round(self.replicated_gb, 2),
            "draft_gb_per_gpu": round(self.draft_gb, 2),
            "kv_pool_gb_per_gpu": round(self.kv_pool_gb, 2),
            "kv_bytes_per_token": self.kv_bytes_per_token,
            "draft_kv_bytes_per_token": self.draft_kv_bytes_per_token,
            "kv_cache_dtype": self.kv_cache_dtype,
            "pool_tokens": self.pool_tokens,
            "context_length": self.context_length,
            "concurrent_full_requests": round(self.concurrent_requests, 2),
        }


def usable_bytes(gpu_memory_gib: float, fraction: float) -> float:
    return fraction * max(gpu_memory_gib - RUNTIME_RESERVE_GIB, 0.0) * GIB


def compute(inp: FitInput) -> Fit:
    """Weights per GPU, KV pool and the tokens it holds."""
    shards = max(inp.tp, 1) * max(inp.pp, 1)
    total = inp.target.weight_bytes or 0
    replicated = min(replicated_bytes(inp.target), total)
    weights = (total - replicated) / float(shards)
    replicated_per_gpu = replicated / float(max(inp.pp, 1))
    draft = (inp.draft.weight_bytes or 0) / float(max(inp.tp, 1)) if inp.draft is not None else 0.0
    usable = usable_bytes(inp.gpu_memory_gib, inp.mem_fraction_static)
    pool = usable - weights - replicated_per_gpu - draft
    kv = kv_bytes_per_token(inp.target, inp.tp, inp.pp, kv_dtype_bytes(inp.kv_cache_dtype))
    draft_kv = draft_kv_bytes_per_token(inp.draft, inp.tp)
    tokens = int(pool // (kv + draft_kv)) if pool > 0 and (kv + draft_kv) > 0 else 0
    return Fit(
        gpu_memory_gib=inp.gpu_memory_gib, usable_gb=usable / GB, weights_gb=weights / GB,
        replicated_gb=replicated_per_gpu / GB, draft_gb=draft / GB, kv_pool_gb=max(pool, 0.0) / GB,
        kv_bytes_per_token=int(kv), draft_kv_bytes_per_token=int(draft_kv),
        kv_cache_dtype=inp.kv_cache_dtype or "auto (bf16)", pool_tokens=tokens,
        context_length=inp.context_length,
        concurrent_requests=tokens / float(inp.context_length) if inp.context_length else 0.0,
    )


def fraction_for(inp: FitInput, tokens: int) -> float:
    """mem_fraction_static that would hold ``tokens`` tokens."""
    fit = compute(inp)
    need = (fit.weights_total_gb * GB + tokens * (fit.kv_bytes_per_token + fit.draft_kv_bytes_per_token))
    return need / (max(inp.gpu_memory_gib - RUNTIME_RESERVE_GIB, 0.01) * GIB)


def with_changes(inp: FitInput, **changes) -> FitInput:
    values = dict(inp.__dict__)
    values.update(changes)
    return FitInput(**values)
