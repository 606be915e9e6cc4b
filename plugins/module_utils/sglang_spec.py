# -*- coding: utf-8 -*-
# Copyright: ct200-deploy developers
# Apache-2.0
"""Typed deployment spec, validation and rendering for sglang_service.

PRIVATE to the collection. ``ARGUMENT_SPEC`` is the module's argument_spec and
the single source of truth for option names, types and defaults; the role's
``meta/argument_specs.yml`` mirrors it (tests/sglang checks that).

Flow: ``Spec.from_params`` -> ``validate`` (every refusal names the numbers and
the fix; all problems are reported at once) -> ``render_argv``. Nothing is
rendered from a spec that failed validation.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence

from ansible_collections.ct200.deploy.plugins.module_utils.sglang_flags import (
    Dialect,
    unknown_options,
)
from ansible_collections.ct200.deploy.plugins.module_utils.sglang_model import ModelInfo

DEFAULT_PYTHON = "/opt/sglang/venv/bin/python"
GIB = 1024 ** 3
GB = 1000 ** 3
DFLASH_DEFAULT_BLOCK = 16  # SGLang's default when the drafter config has none
MAMBA_TRACK_INTERVAL = 256  # SGLang default mamba_track_interval (extra_buffer)
NVIDIA_SMI_QUERY = ["nvidia-smi", "--query-gpu=index,memory.total,name", "--format=csv,noheader,nounits"]

SPECULATIVE_OPTIONS: Dict[str, Any] = {
    "algorithm": {"type": "str", "choices": ["none", "dflash", "ddtree"], "default": "none"},
    "block_size": {"type": "int"},
    "ddtree_budget": {"type": "int"},
    "allow_hybrid_tree": {"type": "bool", "default": False},
    "ddtree_dialect": {"type": "str", "choices": ["auto", "pr29907", "fork"], "default": "auto"},
    "draft_attention_backend": {"type": "str"},
    "draft_window_size": {"type": "int"},
}

OTHER_INSTANCE_OPTIONS: Dict[str, Any] = {
    "name": {"type": "str", "required": True},
    "port": {"type": "int"},
    "nccl_port": {"type": "int"},
    "gpus": {"type": "list", "elements": "int", "default": []},
}

ARGUMENT_SPEC: Dict[str, Any] = {
    "name": {"type": "str", "required": True},
    "state": {"type": "str", "choices": ["present", "started", "stopped", "absent"], "default": "started"},
    "target": {"type": "path"},
    "draft": {"type": "path"},
    "speculative": {"type": "dict", "options": SPECULATIVE_OPTIONS, "default": {}},
    "tp": {"type": "int", "default": 1},
    "pp": {"type": "int", "default": 1},
    "gpus": {"type": "list", "elements": "int"},
    "gpu_memory_gib": {"type": "float"},
    "mem_fraction_static": {"type": "float", "default": 0.85},
    "port": {"type": "int", "default": 30000},
    "host": {"type": "str", "default": "127.0.0.1"},
    "nccl_port": {"type": "int"},
    "served_model_name": {"type": "str"},
    "context_length": {"type": "int"},
    "attention_backend": {"type": "str"},
    "tool_call_parser": {"type": "str"},
    "reasoning_parser": {"type": "str"},
    "chunked_prefill_size": {"type": "int"},
    "max_running_requests": {"type": "int"},
    "cuda_graph_max_bs": {"type": "int"},
    "kv_cache_dtype": {"type": "str"},
    "mamba_strategy": {"type": "str"},
    "enable_metrics": {"type": "bool", "default": False},
    "trust_remote_code": {"type": "bool"},
    "extra_args": {"type": "list", "elements": "str", "default": []},
    "environment": {"type": "dict", "default": {}},
    "python": {"type": "path", "default": DEFAULT_PYTHON},
    "launcher": {"type": "list", "elements": "str"},
    "sglang_version": {"type": "str"},
    "unit_dir": {"type": "path", "default": "/etc/systemd/system"},
    "env_dir": {"type": "path", "default": "/etc/sglang"},
    "cache_dir": {"type": "path", "default": "/var/cache/ct200-sglang"},
    "service_user": {"type": "str", "default": "sglang"},
    "service_group": {"type": "str"},
    "numa_node": {"type": "int"},
    "limit_nofile": {"type": "str", "default": "1048576"},
    "limit_memlock": {"type": "str", "default": "infinity"},
    "start_timeout": {"type": "int", "default": 2400},
    "stop_timeout": {"type": "int", "default": 180},
    "restart_sec": {"type": "int", "default": 30},
    "start_limit_burst": {"type": "int", "default": 3},
    "start_limit_interval": {"type": "int", "default": 600},
    "health_path": {"type": "str", "default": "/health_generate"},
    "wait_timeout": {"type": "int"},
    "check_server_info": {"type": "bool", "default": True},
    "enabled": {"type": "bool"},
    "read_write_paths": {"type": "list", "elements": "path", "default": []},
    "other_instances": {"type": "list", "elements": "dict", "options": OTHER_INSTANCE_OPTIONS, "default": []},
    "verify_unit": {"type": "bool", "default": True},
}

# argv options the spec renders itself; extra_args may not set them.
MANAGED_FLAGS = {
    "--model-path": "target",
    "--model": "target",
    "--served-model-name": "served_model_name",
    "--tp-size": "tp",
    "--tp": "tp",
    "--tensor-parallel-size": "tp",
    "--pp-size": "pp",
    "--pipeline-parallel-size": "pp",
    "--host": "host",
    "--port": "port",
    "--nccl-port": "nccl_port",
    "--mem-fraction-static": "mem_fraction_static",
    "--context-length": "context_length",
    "--attention-backend": "attention_backend",
    "--tool-call-parser": "tool_call_parser",
    "--reasoning-parser": "reasoning_parser",
    "--chunked-prefill-size": "chunked_prefill_size",
    "--max-running-requests": "max_running_requests",
    "--cuda-graph-max-bs": "cuda_graph_max_bs",
    "--cuda-graph-max-bs-decode": "cuda_graph_max_bs",
    "--kv-cache-dtype": "kv_cache_dtype",
    "--mamba-scheduler-strategy": "mamba_strategy",
    "--mamba-radix-cache-strategy": "mamba_strategy",
    "--trust-remote-code": "trust_remote_code",
    "--enable-metrics": "enable_metrics",
    "--speculative-algorithm": "speculative.algorithm",
    "--speculative-draft-model-path": "draft",
    "--speculative-draft-model": "draft",
    "--speculative-num-draft-tokens": "speculative.block_size / speculative.ddtree_budget",
    "--speculative-dflash-block-size": "speculative.block_size",
    "--speculative-draft-attention-backend": "speculative.draft_attention_backend",
    "--speculative-draft-window-size": "speculative.draft_window_size",
    "--speculative-dflash-draft-window-size": "speculative.draft_window_size",
    "--speculative-ddtree-budget": "speculative.ddtree_budget",
    "--speculative-dflash-enable-ddtree": "speculative.algorithm ddtree",
}

# Environment the service must not get: it runs offline from local paths.
SECRET_ENV_NAMES = {"HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HUGGINGFACE_HUB_TOKEN", "HF_API_TOKEN", "HF_TOKEN_PATH"}
SECRET_ENV_RE = re.compile(r"(TOKEN|SECRET|PASSWORD|PASSWD|API_KEY)", re.I)
TOKEN_VALUE_RE = re.compile(r"hf_[A-Za-z0-9]{20,}")
FIXED_ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
# Environment the module writes itself (from other options).
MANAGED_ENV = {
    "CUDA_VISIBLE_DEVICES": "gpus",
    "CUDA_DEVICE_ORDER": "gpus",
    "HOME": "the unit (StateDirectory)",
    "XDG_CACHE_HOME": "the unit (CacheDirectory)",
    "CT200_SGLANG_PORT": "port",
    "CT200_SGLANG_NCCL_PORT": "nccl_port",
    "CT200_SGLANG_NUMA_NODE": "numa_node",
}
LIMIT_RE = re.compile(r"^(infinity|[0-9]+[KMGT]?)(:(infinity|[0-9]+[KMGT]?))?$")
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")
ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# GPUs on which some attention backends pass SGLang's gate but fail at run time.
SM120_NAME_MARKERS = ("RTX PRO 6000", "RTX 5090", "RTX 5080", "RTX PRO 5000", "RTX PRO 4500", "RTX PRO 4000")
SM120_BAD_MLA_BACKENDS = {
    "trtllm_mla": "fails with 'Unsupported architecture' on SM120 (sgl-project/sglang#24633, #17880)",
    "cutedsl_mla": "is SM100-only",
    "fa3": "is Hopper-only",
    "flashmla": "is unavailable on SM120 (sgl-project/sglang#24047)",
}
HYBRID_TREE_REASON = (
    "a budget above block_size-1 turns on DDTree's full tree, which on a hybrid target "
    "(recurrent/linear-attention layers: %s) keeps per-branch recurrent state that leaks between "
    "tree paths (field runs: budgets 32 and 64 corrupted output on a GDN hybrid, budget 15 worked)"
)


class SpecError(Exception):
    """One or more refusals; ``problems`` holds one message per problem."""

    def __init__(self, problems: Sequence[str]):
        self.problems = list(problems)
        super().__init__(self.message)

    @property
    def message(self) -> str:
        if len(self.problems) == 1:
            return "sglang_service refused the spec: " + self.problems[0]
        return "sglang_service refused the spec (%d problems): %s" % (
            len(self.problems),
            " | ".join("(%d) %s" % (i + 1, p) for i, p in enumerate(self.problems)),
        )


@dataclass
class Speculative:
    algorithm: str = "none"
    block_size: Optional[int] = None
    ddtree_budget: Optional[int] = None
    allow_hybrid_tree: bool = False
    ddtree_dialect: str = "auto"
    draft_attention_backend: Optional[str] = None
    draft_window_size: Optional[int] = None


@dataclass
class Spec:
    """The deployment spec (module options, typed)."""

    name: str
    state: str = "started"
    target: Optional[str] = None
    draft: Optional[str] = None
    speculative: Speculative = field(default_factory=Speculative)
    tp: int = 1
    pp: int = 1
    gpus: Optional[List[int]] = None
    gpu_memory_gib: Optional[float] = None
    mem_fraction_static: float = 0.85
    port: int = 30000
    host: str = "127.0.0.1"
    nccl_port: Optional[int] = None
    served_model_name: Optional[str] = None
    context_length: Optional[int] = None
    attention_backend: Optional[str] = None
    tool_call_parser: Optional[str] = None
    reasoning_parser: Optional[str] = None
    chunked_prefill_size: Optional[int] = None
    max_running_requests: Optional[int] = None
    cuda_graph_max_bs: Optional[int] = None
    kv_cache_dtype: Optional[str] = None
    mamba_strategy: Optional[str] = None
    enable_metrics: bool = False
    trust_remote_code: Optional[bool] = None
    extra_args: List[str] = field(default_factory=list)
    environment: Dict[str, Any] = field(default_factory=dict)
    python: str = DEFAULT_PYTHON
    launcher: Optional[List[str]] = None
    sglang_version: Optional[str] = None
    unit_dir: str = "/etc/systemd/system"
    env_dir: str = "/etc/sglang"
    cache_dir: str = "/var/cache/ct200-sglang"
    service_user: str = "sglang"
    service_group: Optional[str] = None
    numa_node: Optional[int] = None
    limit_nofile: str = "1048576"
    limit_memlock: str = "infinity"
    start_timeout: int = 2400
    stop_timeout: int = 180
    restart_sec: int = 30
    start_limit_burst: int = 3
    start_limit_interval: int = 600
    health_path: str = "/health_generate"
    wait_timeout: Optional[int] = None
    check_server_info: bool = True
    enabled: Optional[bool] = None
    read_write_paths: List[str] = field(default_factory=list)
    other_instances: List[Dict[str, Any]] = field(default_factory=list)
    verify_unit: bool = True

    @classmethod
    def from_params(cls, params: Dict[str, Any]) -> "Spec":
        """Build from module params (unknown keys such as _ansible_* are ignored)."""
        known = {k: v for k, v in params.items() if k in ARGUMENT_SPEC}
        spec_params = dict(known.pop("speculative", None) or {})
        spec = Speculative(**{k: v for k, v in spec_params.items() if k in SPECULATIVE_OPTIONS and v is not None})
        values = {k: v for k, v in known.items() if v is not None}
        return cls(speculative=spec, **values)

    @property
    def unit_name(self) -> str:
        return "sglang@%s.service" % self.name

    @property
    def algorithm(self) -> str:
        return (self.speculative.algorithm or "none").lower()


@dataclass
class Resolved:
    """Values decided during validation and used for rendering."""

    gpus: List[int]
    block_size: Optional[int] = None
    ddtree_budget: Optional[int] = None
    ddtree_dialect: Optional[str] = None
    trust_remote_code: bool = False
    tool_call_parser: Optional[str] = None
    reasoning_parser: Optional[str] = None
    mamba_strategy: Optional[str] = None
    gpu_memory_gib: Optional[float] = None
    warnings: List[str] = field(default_factory=list)


# ---------------------------------------------------------------------------
# GPU detection (nvidia-smi)
def parse_nvidia_smi(text: str) -> List[Dict[str, Any]]:
    """Parse ``nvidia-smi --query-gpu=index,memory.total,name --format=csv,noheader,nounits``."""
    gpus = []
    for line in (text or "").splitlines():
        line = line.strip()
        if not line:
            continue
        parts = [p.strip() for p in line.split(",", 2)]
        if len(parts) != 3:
            raise ValueError("unexpected nvidia-smi line %r (want 'index, memory MiB, name')" % line)
        try:
            index = int(parts[0])
            memory_mib = float(parts[1])
        except ValueError:
            raise ValueError("unexpected nvidia-smi line %r (index or memory.total not a number)" % line)
        gpus.append({"index": index, "memory_mib": memory_mib, "name": parts[2]})
    return gpus


def _fmt_gb(value_bytes: float) -> str:
    return "%.1f GB" % (value_bytes / GB)


def _fmt_num(value: float) -> str:
    text = ("%.2f" % value).rstrip("0").rstrip(".")
    return text


def _divisors(n: int, limit: int) -> List[int]:
    return [d for d in range(1, limit + 1) if n % d == 0]


# ---------------------------------------------------------------------------
# Validation
def validate(
    spec: Spec,
    dialect: Dialect,
    target: Optional[ModelInfo],
    draft: Optional[ModelInfo],
    detected_gpus: Optional[List[Dict[str, Any]]] = None,
    peers: Optional[List[Dict[str, Any]]] = None,
) -> Resolved:
    """Check the spec; return resolved values or raise SpecError with every problem."""
    problems: List[str] = []
    warnings: List[str] = []
    algo = spec.algorithm
    detected_gpus = detected_gpus or []
    peers = peers or []

    # -- identity and plain ranges ------------------------------------------
    if not NAME_RE.match(spec.name or ""):
        problems.append(
            "name %r is not a valid instance name; use 1-63 characters from A-Z a-z 0-9 _ . - "
            "starting with a letter or digit" % spec.name
        )
    if target is None:
        problems.append("target is required: give the local directory of the target model")
    for label, port in (("port", spec.port), ("nccl_port", spec.nccl_port)):
        if port is not None and not 1 <= port <= 65535:
            problems.append("%s %s is out of range; use 1-65535" % (label, port))
    if spec.nccl_port is not None and spec.nccl_port == spec.port:
        problems.append("nccl_port %s equals port; give NCCL its own port" % spec.port)
    if not 0.0 < spec.mem_fraction_static < 1.0:
        problems.append(
            "mem_fraction_static %s is outside (0, 1); use e.g. 0.85 (the Kimi-K2.6 ceiling)"
            % _fmt_num(spec.mem_fraction_static)
        )
    if spec.tp < 1 or spec.pp < 1:
        problems.append("tp %s / pp %s must be >= 1" % (spec.tp, spec.pp))
    if not spec.health_path.startswith("/") or any(c in spec.health_path for c in " \"'\\%$\n"):
        problems.append("health_path %r must be a plain absolute URL path such as /health_generate" % spec.health_path)
    if spec.start_timeout < 30:
        problems.append("start_timeout %s s is too short for a model load; use >= 30 (2400 for Kimi-K2.6)"
                        % spec.start_timeout)

    # -- GPUs -----------------------------------------------------------------
    per_instance = max(spec.tp, 1) * max(spec.pp, 1)
    if spec.gpus:
        gpus = list(spec.gpus)
    elif detected_gpus:
        gpus = [g["index"] for g in detected_gpus][:per_instance]
    else:
        gpus = list(range(per_instance))
    if len(set(gpus)) != len(gpus):
        problems.append("gpus %s lists a GPU twice; list each GPU id once" % gpus)
    if any(g < 0 for g in gpus):
        problems.append("gpus %s has a negative id; use nvidia-smi indexes (0, 1, ...)" % gpus)
    if detected_gpus:
        known = {g["index"] for g in detected_gpus}
        missing = [g for g in gpus if g not in known]
        if missing:
            problems.append(
                "gpus %s are not on this host (nvidia-smi shows %s); fix the gpus list"
                % (missing, sorted(known))
            )
    if gpus and len(gpus) % per_instance != 0:
        problems.append(
            "tp %d x pp %d = %d GPUs per replica does not divide the %d GPUs in gpus %s; "
            "use a tp that divides %d or list %d GPUs" % (
                spec.tp, spec.pp, per_instance, len(gpus), gpus, len(gpus), per_instance)
        )
    elif gpus and len(gpus) > per_instance:
        problems.append(
            "tp %d x pp %d uses only %d of the %d GPUs in gpus %s; list exactly %d GPUs for this "
            "instance (run another instance on the rest) or use tp %d"
            % (spec.tp, spec.pp, per_instance, len(gpus), gpus, per_instance, len(gpus) // max(spec.pp, 1))
        )
    elif gpus and len(gpus) < per_instance and (spec.gpus or detected_gpus):
        problems.append(
            "tp %d x pp %d needs %d GPUs but only %d are given/detected (%s); lower tp or add GPUs"
            % (spec.tp, spec.pp, per_instance, len(gpus), gpus)
        )

    gpu_mem = spec.gpu_memory_gib
    gpu_names = sorted({g["name"] for g in detected_gpus if g["index"] in gpus})
    if gpu_mem is None and detected_gpus:
        selected = [g for g in detected_gpus if g["index"] in gpus] or detected_gpus
        gpu_mem = min(g["memory_mib"] for g in selected) / 1024.0
    if gpu_mem is not None and gpu_mem <= 0:
        problems.append("gpu_memory_gib %s must be > 0" % _fmt_num(gpu_mem))
        gpu_mem = None

    # -- target model -------------------------------------------------------
    if target is not None:
        heads = target.num_attention_heads
        if heads and spec.tp >= 1 and heads % spec.tp != 0:
            problems.append(
                "tp %d does not divide the target's %d attention heads; use a tp from %s"
                % (spec.tp, heads, _divisors(heads, max(8, len(detected_gpus) or 8)))
            )
        if (spec.context_length is not None and target.max_position_embeddings
                and spec.context_length > target.max_position_embeddings):
            problems.append(
                "context_length %d exceeds the target's max_position_embeddings %d; use <= %d"
                % (spec.context_length, target.max_position_embeddings, target.max_position_embeddings)
            )
        if spec.context_length is not None and spec.context_length < 1:
            problems.append("context_length %d must be >= 1" % spec.context_length)
        _check_memory(spec, target, draft, gpu_mem, len(detected_gpus) or len(gpus), problems, warnings)
        if gpu_names and target.mla and spec.attention_backend in SM120_BAD_MLA_BACKENDS and any(
                m in n for n in gpu_names for m in SM120_NAME_MARKERS):
            problems.append(
                "attention_backend %s %s, and this host has %s; use attention_backend triton (or omit it: "
                "SGLang picks triton for MLA on SM120)"
                % (spec.attention_backend, SM120_BAD_MLA_BACKENDS[spec.attention_backend], ", ".join(gpu_names))
            )
        if gpu_names and (target.quantization or {}).get("quant_method") in ("modelopt_fp4", "nvfp4") and any(
                m in n for n in gpu_names for m in SM120_NAME_MARKERS):
            problems.append(
                "the target is NVFP4-quantized and this host has %s (SM120): NVFP4 gives NaN there "
                "(sgl-project/sglang#18954); use the INT4 or BF16 checkpoint" % ", ".join(gpu_names)
            )

    # -- parsers, trust_remote_code ---------------------------------------------
    tool_parser = spec.tool_call_parser
    reasoning_parser = spec.reasoning_parser
    if target is not None and target.is_kimi:
        tool_parser = tool_parser or "kimi_k2"
        reasoning_parser = reasoning_parser or "kimi_k2"
        for label, value in (("tool_call_parser", tool_parser), ("reasoning_parser", reasoning_parser)):
            if value != "kimi_k2":
                warnings.append("%s %s on a Kimi target; SGLang's Kimi-K2.x docs require kimi_k2" % (label, value))
    trust = spec.trust_remote_code
    if trust is None:
        trust = bool(target is not None and (target.trust_remote_code or target.is_kimi))

    # -- speculative ----------------------------------------------------------------
    block_size = None
    budget = None
    ddtree_dialect = None
    version = dialect.version
    if algo == "none":
        if spec.draft:
            problems.append(
                "draft %s is given but speculative.algorithm is none; set speculative.algorithm "
                "dflash (or ddtree) or remove draft" % spec.draft
            )
        for key in ("block_size", "ddtree_budget"):
            if getattr(spec.speculative, key) is not None:
                problems.append("speculative.%s is set but speculative.algorithm is none; remove it or "
                                "choose an algorithm" % key)
    else:
        if algo == "dflash" and not dialect.has_dflash:
            problems.append(
                "SGLang %s has no DFLASH speculative algorithm (it knows %s); DFLASH first shipped in "
                "0.5.11: upgrade SGLang" % (version, ", ".join(sorted(dialect.algorithms)) or "none")
            )
        if algo == "ddtree":
            found = dialect.ddtree
            wanted = spec.speculative.ddtree_dialect
            if found is None:
                problems.append(
                    "SGLang %s has no DDTree: its parser knows neither --speculative-ddtree-budget "
                    "(PR sgl-project/sglang#29907) nor --speculative-dflash-enable-ddtree (fork "
                    "DB-Guo/sglang-ddtree-dev); DDTree is in no SGLang release: install such a build "
                    "(or set speculative.ddtree_dialect when rendering with sglang_version), "
                    "or use algorithm dflash" % version
                )
            elif wanted != "auto" and wanted != found:
                problems.append(
                    "speculative.ddtree_dialect %s does not match the installed build, whose parser "
                    "speaks %s; set ddtree_dialect auto or %s" % (wanted, found, found)
                )
            else:
                ddtree_dialect = found
                if found == "pr29907" and "DDTREE" not in dialect.algorithms and dialect.choices.get(
                        "speculative_algorithm"):
                    problems.append("SGLang %s has --speculative-ddtree-budget but DDTREE is not among its "
                                    "--speculative-algorithm choices %s; the build is inconsistent"
                                    % (version, dialect.choices.get("speculative_algorithm")))
        if spec.pp > 1:
            problems.append(
                "pp %d with speculative %s: SGLang's DFLASH (and DDTree, built on it) supports only "
                "pp_size 1; use pp 1 and spread the model with tp instead" % (spec.pp, algo)
            )
        if not spec.draft:
            problems.append("speculative.algorithm %s needs draft: the local directory of the DFlash drafter" % algo)
        elif draft is not None:
            block_size = _check_draft(spec, target, draft, problems, warnings)
        if block_size is None and spec.speculative.block_size is not None:
            block_size = spec.speculative.block_size
        if spec.speculative.block_size is not None and spec.speculative.block_size < 2:
            problems.append("speculative.block_size %d must be >= 2" % spec.speculative.block_size)
        window = spec.speculative.draft_window_size
        if window is not None and block_size and window < block_size:
            problems.append(
                "speculative.draft_window_size %d is smaller than the block size %d; SGLang requires "
                "window >= block size: use >= %d" % (window, block_size, block_size)
            )
        if algo == "ddtree" and not block_size:
            pass  # the drafter problem is already reported
        elif algo == "ddtree":
            budget = spec.speculative.ddtree_budget
            if budget is None:
                budget = block_size - 1
            if budget < 1:
                problems.append("speculative.ddtree_budget %d must be >= 1 (default: block_size-1 = %d)"
                                % (budget, block_size - 1))
            elif (budget > block_size - 1 and target is not None and target.hybrid
                  and not spec.speculative.allow_hybrid_tree):
                problems.append(
                    "speculative.ddtree_budget %d > block_size-1 = %d on hybrid target %s: %s; use "
                    "ddtree_budget <= %d (spine mode, a linear chain) or set "
                    "speculative.allow_hybrid_tree: true to accept the risk"
                    % (budget, block_size - 1, target.path,
                       HYBRID_TREE_REASON % "; ".join(target.hybrid_markers[:3]), block_size - 1)
                )
            elif budget > block_size - 1 and target is not None and target.hybrid:
                warnings.append(
                    "ddtree_budget %d > block_size-1 on a hybrid target accepted by allow_hybrid_tree; "
                    "watch the output for corruption" % budget
                )
        elif spec.speculative.ddtree_budget is not None:
            problems.append("speculative.ddtree_budget is only for algorithm ddtree; remove it for %s" % algo)
        if algo != "ddtree" and spec.speculative.allow_hybrid_tree:
            warnings.append("speculative.allow_hybrid_tree has no effect without algorithm ddtree")

    # -- mamba strategy (hybrid + speculative) -------------------------------------
    mamba = spec.mamba_strategy
    if target is not None and target.hybrid and algo != "none" and mamba is None:
        mamba = "extra_buffer"  # z-lab recipe; 0.5.11 no_buffer + radix cache raises
    if mamba is not None:
        flag = dialect.flag("mamba_strategy")
        if flag is None:
            problems.append("SGLang %s has no mamba strategy flag; remove mamba_strategy" % version)
        if (mamba == "no_buffer" and algo != "none" and flag == "--mamba-scheduler-strategy"
                and "--disable-radix-cache" not in spec.extra_args):
            problems.append(
                "mamba_strategy no_buffer with speculative decoding and the radix cache raises on SGLang "
                "%s; use mamba_strategy extra_buffer or add --disable-radix-cache to extra_args" % version
            )
        tokens = budget + 1 if (algo == "ddtree" and budget and ddtree_dialect == "fork") else block_size
        if mamba.startswith("extra_buffer") and tokens and tokens > MAMBA_TRACK_INTERVAL:
            problems.append(
                "mamba_strategy %s needs mamba_track_interval %d >= draft tokens %d; lower the block "
                "size/budget" % (mamba, MAMBA_TRACK_INTERVAL, tokens)
            )

    # -- choices the parser enforces ------------------------------------------------
    for dest, value in (
        ("tool_call_parser", tool_parser),
        ("reasoning_parser", reasoning_parser),
        ("attention_backend", spec.attention_backend),
        ("speculative_draft_attention_backend", spec.speculative.draft_attention_backend),
        ("kv_cache_dtype", spec.kv_cache_dtype),
        ("mamba_radix_cache_strategy", mamba if dialect.flag("mamba_strategy") == "--mamba-radix-cache-strategy"
         else None),
        ("mamba_scheduler_strategy", mamba if dialect.flag("mamba_strategy") == "--mamba-scheduler-strategy"
         else None),
    ):
        choices = dialect.choices.get(dest)
        if value is not None and choices and str(value) not in choices:
            problems.append(
                "%s %r is not accepted by SGLang %s; choose one of: %s" % (dest, value, version, ", ".join(choices))
            )

    # -- extra_args, environment ----------------------------------------------------
    for arg in spec.extra_args:
        if not isinstance(arg, str) or any(c in arg for c in "\n\r\x00"):
            problems.append("extra_args item %r contains a newline or NUL; pass one argument per item" % (arg,))
            continue
        option = arg.split("=", 1)[0]
        if option in MANAGED_FLAGS:
            problems.append(
                "extra_args sets %s, which the spec renders from option %s; set that option instead"
                % (option, MANAGED_FLAGS[option])
            )
        if TOKEN_VALUE_RE.search(arg):
            problems.append("extra_args contains what looks like a Hugging Face token; the service runs "
                            "offline from local paths and needs none: remove it")
    unknown = unknown_options(dialect, spec.extra_args)
    if unknown:
        problems.append(
            "extra_args %s: unknown to SGLang %s's parser (typo, or a flag renamed between versions, "
            "e.g. 0.5.11 --cuda-graph-max-bs -> 0.5.23 --cuda-graph-max-bs-decode); fix the flag names"
            % (", ".join(unknown), version)
        )
    for key, value in (spec.environment or {}).items():
        text = "" if value is None else str(value)
        if not ENV_NAME_RE.match(str(key)):
            problems.append("environment name %r is not a valid variable name" % (key,))
        elif key in SECRET_ENV_NAMES or SECRET_ENV_RE.search(str(key)):
            problems.append(
                "environment %s looks like a secret; the SGLang service runs with HF_HUB_OFFLINE=1 from "
                "local paths and needs no token: remove it" % key
            )
        elif key in FIXED_ENV:
            problems.append("environment %s is fixed to %s by the module (offline service); remove it"
                            % (key, FIXED_ENV[key]))
        elif key in MANAGED_ENV:
            problems.append("environment %s is written by the module from %s; set that instead"
                            % (key, MANAGED_ENV[key]))
        if any(c in text for c in "\n\r\x00"):
            problems.append("environment %s has a newline or NUL in its value; use a single line" % key)
        if TOKEN_VALUE_RE.search(text):
            problems.append("environment %s holds what looks like a Hugging Face token; remove it "
                            "(the service needs none)" % key)

    # -- other instances on this host -------------------------------------------------
    my_ports = {p for p in (spec.port, spec.nccl_port) if p is not None}
    for peer in peers:
        if peer.get("name") == spec.name:
            continue
        where = peer.get("source") or "other_instances"
        clash = sorted(my_ports & {p for p in (peer.get("port"), peer.get("nccl_port")) if p is not None})
        if clash:
            problems.append(
                "port %s is already used by instance %r (%s); give each instance its own port and nccl_port"
                % (", ".join(str(p) for p in clash), peer.get("name"), where)
            )
        shared = sorted(set(gpus) & set(peer.get("gpus") or []))
        if shared:
            problems.append(
                "GPUs %s are already assigned to instance %r (%s); give each instance a disjoint gpus list"
                % (", ".join(str(g) for g in shared), peer.get("name"), where)
            )

    for label in ("limit_nofile", "limit_memlock"):
        value = str(getattr(spec, label))
        if not LIMIT_RE.match(value):
            problems.append("%s %r is not a systemd resource limit; use a number, infinity or soft:hard "
                            "(e.g. 1048576, or 20000 where root lacks CAP_SYS_RESOURCE)" % (label, value))
    for label in ("target", "draft", "python", "served_model_name", "host"):
        value = getattr(spec, label)
        if value is not None and any(ord(c) < 32 for c in str(value)):
            problems.append("%s contains a control character (newline, tab...); systemd command lines "
                            "cannot carry it: fix the value" % label)
    if ";" in spec.extra_args:
        problems.append("extra_args has a lone ';', which systemd reads as a command separator; remove it")
    if spec.numa_node is not None and spec.numa_node < 0:
        problems.append("numa_node %d must be >= 0" % spec.numa_node)
    for path in spec.read_write_paths:
        if not path.startswith("/") or any(c in path for c in " \"'\\\n"):
            problems.append("read_write_paths entry %r must be an absolute path without spaces or quotes" % path)

    if problems:
        raise SpecError(problems)
    return Resolved(
        gpus=gpus,
        block_size=block_size,
        ddtree_budget=budget,
        ddtree_dialect=ddtree_dialect,
        trust_remote_code=trust,
        tool_call_parser=tool_parser,
        reasoning_parser=reasoning_parser,
        mamba_strategy=mamba,
        gpu_memory_gib=gpu_mem,
        warnings=warnings,
    )


def redact_params(params: Dict[str, Any]) -> None:
    """Replace token-looking values in environment/extra_args (in place) before results are returned."""
    env = params.get("environment")
    if isinstance(env, dict):
        for key in list(env):
            text = "" if env[key] is None else str(env[key])
            if TOKEN_VALUE_RE.search(text) or key in SECRET_ENV_NAMES or SECRET_ENV_RE.search(str(key)):
                env[key] = "<redacted>"
    args = params.get("extra_args")
    if isinstance(args, list):
        params["extra_args"] = [TOKEN_VALUE_RE.sub("<redacted>", str(a)) for a in args]


def _check_memory(spec, target, draft, gpu_mem, gpu_count, problems, warnings):
    if target.weight_bytes is None:
        warnings.append("weight size of %s unknown (no model.safetensors.index.json, no *.safetensors); "
                        "memory per GPU not checked" % target.path)
        return
    if gpu_mem is None:
        problems.append(
            "gpu_memory_gib is not set and nvidia-smi found no GPU; set gpu_memory_gib to the memory "
            "of one GPU in GiB (e.g. 96 for an RTX PRO 6000) so the weights-per-GPU check can run"
        )
        return
    shards = max(spec.tp, 1) * max(spec.pp, 1)
    draft_bytes = 0
    if draft is not None and draft.weight_bytes and draft.dflash is not None and spec.algorithm != "none":
        draft_bytes = draft.weight_bytes
    total = target.weight_bytes + draft_bytes
    per_gpu = total / float(shards)
    usable = gpu_mem * GIB * spec.mem_fraction_static
    if per_gpu <= usable:
        return
    if draft_bytes:
        weights = "weights %s (target %s + draft %s)" % (
            _fmt_gb(total), _fmt_gb(target.weight_bytes), _fmt_gb(draft_bytes))
    else:
        weights = "weights %s" % _fmt_gb(total)
    split = "tp %d" % spec.tp if spec.pp == 1 else "tp %d x pp %d" % (spec.tp, spec.pp)
    heads = target.num_attention_heads or 0
    limit = max(gpu_count, 8)
    fix = None
    for tp in range(spec.tp + 1, limit + 1):
        if heads and heads % tp:
            continue
        if total / float(tp * max(spec.pp, 1)) <= usable:
            fix = "use tp %d (%s per GPU)" % (tp, _fmt_gb(total / float(tp * max(spec.pp, 1))))
            break
    if fix is None:
        fix = ("it does not fit even on %d GPUs: use more/larger GPUs or a smaller (quantized) checkpoint"
               % limit)
    problems.append(
        "%s / %s = %s per GPU > %s usable per GPU (%s GiB x mem_fraction_static %s = %s GiB); %s"
        % (weights, split, _fmt_gb(per_gpu), _fmt_gb(usable), _fmt_num(gpu_mem),
           _fmt_num(spec.mem_fraction_static), _fmt_num(gpu_mem * spec.mem_fraction_static), fix)
    )


def _check_draft(spec, target, draft, problems, warnings) -> Optional[int]:
    """Drafter checks; return the block size the drafter was trained for."""
    if draft.dflash is None:
        problems.append(
            "draft %s is not a DFlash drafter: its config.json has no dflash_config and its "
            "architectures %s are not DFlash; point draft at a DFlash checkpoint (e.g. z-lab/*-DFlash)"
            % (draft.path, draft.architectures)
        )
        return None
    block = draft.dflash.get("block_size")
    wanted = spec.speculative.block_size
    if block is not None and wanted is not None and block != wanted:
        problems.append(
            "speculative.block_size %d does not match the drafter's block size %d (%s/config.json); "
            "a DFlash drafter is trained for one block size: remove block_size or set %d"
            % (wanted, block, draft.path, block)
        )
    if block is None and wanted is None:
        block = DFLASH_DEFAULT_BLOCK
        warnings.append("the drafter config has no block_size; SGLang's default %d is used" % block)
    if target is not None:
        if target.vocab_size and draft.vocab_size and target.vocab_size != draft.vocab_size:
            problems.append(
                "draft %s has vocab_size %d but the target has %d; the drafter was trained for another "
                "model: use the DFlash drafter made for %s" % (draft.path, draft.vocab_size, target.vocab_size,
                                                               target.path)
            )
        layers = target.num_layers
        ids = draft.dflash.get("target_layer_ids") or []
        if layers and ids and max(ids) >= layers:
            problems.append(
                "draft %s reads target layers %s but the target has only %d layers; the drafter does not "
                "match this target" % (draft.path, ids, layers)
            )
        ntl = draft.dflash.get("num_target_layers")
        if layers and ntl and ntl != layers:
            problems.append(
                "draft %s was built for a %d-layer target but %s has %d layers; use the matching drafter"
                % (draft.path, ntl, target.path, layers)
            )
    return block if block is not None else wanted


# ---------------------------------------------------------------------------
# Rendering
def _add(argv: List[str], flag: Optional[str], value: Any = None) -> None:
    if flag is None:
        return
    if value is None:
        argv.append(flag)
        return
    text = str(value)
    # A value starting with '-' would be read as an option by argparse.
    if text.startswith("-"):
        argv.append("%s=%s" % (flag, text))
    else:
        argv.extend([flag, text])


def render_argv(spec: Spec, dialect: Dialect, resolved: Resolved) -> List[str]:
    """The SGLang command line (list) for a validated spec."""
    launcher = list(spec.launcher) if spec.launcher else ["-m", "sglang.launch_server"]
    argv: List[str] = [spec.python] + launcher
    flag = dialect.flag
    _add(argv, flag("model_path"), spec.target)
    if spec.served_model_name:
        _add(argv, flag("served_model_name"), spec.served_model_name)
    _add(argv, flag("tp"), spec.tp)
    if spec.pp != 1:
        _add(argv, flag("pp"), spec.pp)
    if resolved.trust_remote_code:
        _add(argv, flag("trust_remote_code"))
    algo = spec.algorithm
    if algo == "dflash" or (algo == "ddtree" and resolved.ddtree_dialect == "fork"):
        _add(argv, flag("speculative_algorithm"), "DFLASH")
    elif algo == "ddtree":
        _add(argv, flag("speculative_algorithm"), "DDTREE")
    if algo != "none":
        _add(argv, flag("draft_model_path"), spec.draft)
        if algo == "ddtree" and resolved.ddtree_dialect == "fork":
            _add(argv, flag("ddtree_enable"))
            _add(argv, flag("num_draft_tokens"), resolved.ddtree_budget)
        else:
            _add(argv, flag("num_draft_tokens"), resolved.block_size)
        if algo == "ddtree" and resolved.ddtree_dialect == "pr29907":
            _add(argv, flag("ddtree_budget"), resolved.ddtree_budget)
        if spec.speculative.draft_window_size is not None:
            _add(argv, flag("draft_window_size"), spec.speculative.draft_window_size)
    if spec.attention_backend:
        _add(argv, flag("attention_backend"), spec.attention_backend)
    if algo != "none" and spec.speculative.draft_attention_backend:
        _add(argv, flag("draft_attention_backend"), spec.speculative.draft_attention_backend)
    if resolved.mamba_strategy:
        _add(argv, flag("mamba_strategy"), resolved.mamba_strategy)
    if resolved.tool_call_parser:
        _add(argv, flag("tool_call_parser"), resolved.tool_call_parser)
    if resolved.reasoning_parser:
        _add(argv, flag("reasoning_parser"), resolved.reasoning_parser)
    _add(argv, flag("mem_fraction_static"), _fmt_num(spec.mem_fraction_static))
    if spec.context_length is not None:
        _add(argv, flag("context_length"), spec.context_length)
    if spec.kv_cache_dtype:
        _add(argv, flag("kv_cache_dtype"), spec.kv_cache_dtype)
    if spec.chunked_prefill_size is not None:
        _add(argv, flag("chunked_prefill_size"), spec.chunked_prefill_size)
    if spec.max_running_requests is not None:
        _add(argv, flag("max_running_requests"), spec.max_running_requests)
    if spec.cuda_graph_max_bs is not None:
        _add(argv, flag("cuda_graph_max_bs"), spec.cuda_graph_max_bs)
    if spec.enable_metrics:
        _add(argv, flag("enable_metrics"))
    _add(argv, flag("host"), spec.host)
    _add(argv, flag("port"), spec.port)
    if spec.nccl_port is not None:
        _add(argv, flag("nccl_port"), spec.nccl_port)
    argv.extend(spec.extra_args)
    return argv


def expected_server_info(spec: Spec, resolved: Resolved) -> Dict[str, Any]:
    """Fields /server_info must report for this spec."""
    algo = spec.algorithm
    expected: Dict[str, Any] = {"tp_size": spec.tp}
    if algo == "none":
        expected["speculative_algorithm"] = None
        return expected
    if algo == "ddtree" and resolved.ddtree_dialect == "pr29907":
        expected["speculative_algorithm"] = "DDTREE"
    else:
        expected["speculative_algorithm"] = "DFLASH"
    expected["speculative_draft_model_path"] = spec.draft
    if algo == "ddtree" and resolved.ddtree_dialect == "fork":
        expected["speculative_num_draft_tokens"] = resolved.ddtree_budget
    else:
        expected["speculative_num_draft_tokens"] = resolved.block_size
    return expected


def compare_server_info(expected: Dict[str, Any], info: Dict[str, Any]) -> List[str]:
    """Mismatches between expected fields and a /server_info answer."""
    problems = []
    for key, want in expected.items():
        got = info.get(key, "<missing>")
        if isinstance(want, str) and isinstance(got, str) and key == "speculative_algorithm":
            same = want.upper() == got.upper()
        else:
            same = got == want
        if not same:
            problems.append("/server_info %s is %r, expected %r" % (key, got, want))
    return problems
