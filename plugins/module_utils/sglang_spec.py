# -*- coding: utf-8 -*-
# Copyright: ct200-deploy developers
# SPDX-License-Identifier: Apache-2.0
"""Typed deployment spec, validation and rendering for sglang_service.

PRIVATE to the collection. ``ARGUMENT_SPEC`` is the module's argument_spec and
the single source of truth for option names, types and defaults; the role's
``meta/argument_specs.yml`` mirrors it (tests/sglang checks that).

Flow: ``Spec.from_params`` -> ``validate`` (a list of small named rules, each
adding refusals that name the numbers and the fix; all problems are reported
at once) -> ``render_argv``. Nothing is rendered from a spec that failed
validation.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence

from ansible_collections.ct200.deploy.plugins.module_utils import sglang_fit as fitmod
from ansible_collections.ct200.deploy.plugins.module_utils.sglang_flags import (
    Dialect,
    unknown_options,
    version_tuple,
)
from ansible_collections.ct200.deploy.plugins.module_utils.sglang_model import ModelInfo

DEFAULT_PYTHON = "/opt/sglang/venv/bin/python"
# Where the operator sets the runtime (roles/sglang_runtime); named in "SGLang missing" errors.
RUNTIME_ROLE = "ct200.deploy.sglang_runtime"
RUNTIME_VENV_VAR = "sglang_runtime_venv"
RUNTIME_VERSION_VAR = "sglang_runtime_version"
GIB = 1024 ** 3
GB = 1000 ** 3
DFLASH_DEFAULT_BLOCK = 16  # SGLang's default when the drafter config has none
MAMBA_TRACK_INTERVAL = 256  # SGLang default mamba_track_interval (extra_buffer)
NVIDIA_SMI_QUERY = ["nvidia-smi", "--query-gpu=index,memory.total,name", "--format=csv,noheader,nounits"]
LOOPBACK_HOSTS = ("127.0.0.1", "::1", "localhost")
# TimeoutStopSec= default. On SIGTERM SGLang finishes every in-flight request with no limit of its own
# (tokenizer_manager.py sigterm_watchdog), then allows 15 s for the scheduler's ShutdownReq and 60 s for
# kill_process_tree. A long Kimi-K2.6 agent turn is a 32768-token answer; at the 21.1 ms TPOT measured at tp 8
# on 8x RTX PRO 6000 over PCIe (SGLang's pcie_ipc_ar.py baseline, no drafter) that is 691 s, plus the 75 s of
# shutdown = 766 s, rounded up to 900 s. The old 180 s SIGKILLed such a turn mid-drain, which is how GPU memory
# stays held after a stop. Set stop_timeout for longer max_tokens or a slower host.
STOP_TIMEOUT = 900
# Readiness: a DFLASH/DDTree instance must accept more than this many tokens per verify step on average
# (internal_states[0].avg_spec_accept_length after the warm-up); 1.0 is what a drafter that never hits gives.
MIN_ACCEPT_LENGTH = 1.0

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
    "state": {"type": "str", "choices": ["present", "absent"], "default": "present"},
    "target": {"type": "path"},
    "draft": {"type": "path"},
    "speculative": {"type": "dict", "options": SPECULATIVE_OPTIONS, "default": {}},
    "tp": {"type": "int", "default": 1},
    "pp": {"type": "int", "default": 1},
    "gpus": {"type": "list", "elements": "int"},
    "gpu_count": {"type": "int"},
    "gpu_numa_nodes": {"type": "list", "elements": "int"},
    "gpu_memory_gib": {"type": "float"},
    "mem_fraction_static": {"type": "float", "default": 0.85},
    "min_concurrent_requests": {"type": "int", "default": 4},
    "port": {"type": "int", "default": 30000},
    "host": {"type": "str", "default": "127.0.0.1"},
    "api_key": {"type": "bool"},
    "nccl_port": {"type": "int"},
    "served_model_name": {"type": "str"},
    "context_length": {"type": "int"},
    "attention_backend": {"type": "str"},
    "tool_call_parser": {"type": "str"},
    "reasoning_parser": {"type": "str"},
    "require_grammar": {"type": "bool", "default": False},
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
    "cuda_home": {"type": "path", "default": "/usr/local/cuda"},
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
    "stop_timeout": {"type": "int", "default": STOP_TIMEOUT},
    "min_accept_length": {"type": "float", "default": MIN_ACCEPT_LENGTH},
    "restart_sec": {"type": "int", "default": 30},
    "start_limit_burst": {"type": "int", "default": 3},
    "start_limit_interval": {"type": "int", "default": 600},
    "health_path": {"type": "str", "default": "/health_generate"},
    "read_write_paths": {"type": "list", "elements": "path", "default": []},
    "other_instances": {"type": "list", "elements": "dict", "options": OTHER_INSTANCE_OPTIONS, "default": []},
    "verify_unit": {"type": "bool", "default": True},
    # PCIe fabric switches, rendered into the env file (issue 15): see _check_fabric_env.
    "nccl_p2p_disable": {"type": "bool", "default": False},
    "pcie_ipc_allreduce": {"type": "bool", "default": False},
    "gpu_compute_cap": {"type": "str"},
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
    "--api-key": "api_key (the key is read from the 0600 secret file, never from argv)",
    "--admin-api-key": "api_key (the key is read from the 0600 secret file, never from argv)",
    "--config": "api_key (the secret file is passed as --config)",
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
    "PATH": "python (the venv's bin/ first, for the JIT's ninja)",
    "CUDA_HOME": "cuda_home",
    "CT200_SGLANG_PORT": "port",
    "CT200_SGLANG_NCCL_PORT": "nccl_port",
    "CT200_SGLANG_NUMA_NODE": "numa_node",
    "NCCL_P2P_DISABLE": "nccl_p2p_disable",
    "SGLANG_ENABLE_PCIE_IPC_ALLREDUCE": "pcie_ipc_allreduce",
}
LIMIT_RE = re.compile(r"^(infinity|[0-9]+[KMGT]?)(:(infinity|[0-9]+[KMGT]?))?\Z")
# Instance names: systemd instance-safe characters only; no path separators.
NAME_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.@-]{0,63}\Z")
# POSIX portable user/group names (useradd's default NAME_REGEX), at most 32 characters.
POSIX_NAME_RE = re.compile(r"^[a-z_][a-z0-9_-]*[$]?\Z")
POSIX_NAME_MAX = 32
ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\Z")
# Paths rendered unquoted into unit directives (EnvironmentFile=, the env file's PATH).
PLAIN_PATH_RE = re.compile(r"^/[A-Za-z0-9_./@+-]*\Z")
HOST_RE = re.compile(r"^[A-Za-z0-9_.:-]{1,253}\Z")
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
    state: str = "present"
    target: Optional[str] = None
    draft: Optional[str] = None
    speculative: Speculative = field(default_factory=Speculative)
    tp: int = 1
    pp: int = 1
    gpus: Optional[List[int]] = None
    gpu_count: Optional[int] = None
    gpu_numa_nodes: Optional[List[int]] = None
    gpu_memory_gib: Optional[float] = None
    mem_fraction_static: float = 0.85
    min_concurrent_requests: int = 4
    port: int = 30000
    host: str = "127.0.0.1"
    api_key: Optional[bool] = None
    nccl_port: Optional[int] = None
    served_model_name: Optional[str] = None
    context_length: Optional[int] = None
    attention_backend: Optional[str] = None
    tool_call_parser: Optional[str] = None
    reasoning_parser: Optional[str] = None
    require_grammar: bool = False
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
    cuda_home: str = "/usr/local/cuda"
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
    stop_timeout: int = STOP_TIMEOUT
    min_accept_length: float = MIN_ACCEPT_LENGTH
    restart_sec: int = 30
    start_limit_burst: int = 3
    start_limit_interval: int = 600
    health_path: str = "/health_generate"
    read_write_paths: List[str] = field(default_factory=list)
    other_instances: List[Dict[str, Any]] = field(default_factory=list)
    verify_unit: bool = True
    nccl_p2p_disable: bool = False
    pcie_ipc_allreduce: bool = False
    gpu_compute_cap: Optional[str] = None

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

    @property
    def loopback(self) -> bool:
        return self.host in LOOPBACK_HOSTS or self.host.startswith("127.")

    @property
    def secret_path(self) -> str:
        """The API key file the role writes (0640 root:service group); SGLang reads it via --config."""
        return "%s/%s.secret.yaml" % (self.env_dir.rstrip("/"), self.name)


@dataclass
class Resolved:
    """Values decided during validation and used for rendering."""

    gpus: List[int] = field(default_factory=list)
    block_size: Optional[int] = None
    ddtree_budget: Optional[int] = None
    ddtree_dialect: Optional[str] = None
    trust_remote_code: bool = False
    tool_call_parser: Optional[str] = None
    reasoning_parser: Optional[str] = None
    mamba_strategy: Optional[str] = None
    gpu_memory_gib: Optional[float] = None
    max_running_requests: Optional[int] = None
    cuda_graph_max_bs: Optional[int] = None
    api_key: bool = False
    fit: Optional[Dict[str, Any]] = None
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


def has_control(text: Any) -> bool:
    """A newline, tab, NUL or any other control character (systemd and env files cannot carry them)."""
    return any(ord(c) < 32 or ord(c) == 127 for c in str(text))


# ---------------------------------------------------------------------------
# Validation: a list of small named rules over one context.
class _Check(object):
    """What every rule reads (spec, dialect, models, GPUs, peers) and writes (problems, warnings, resolved)."""

    def __init__(self, spec, dialect, target, draft, detected, peers):
        self.spec = spec
        self.dialect = dialect
        self.target = target
        self.draft = draft
        self.detected = detected or []
        self.peers = peers or []
        self.problems: List[str] = []
        self.warnings: List[str] = []
        self.res = Resolved()

    @property
    def algo(self) -> str:
        return self.spec.algorithm

    @property
    def version(self) -> str:
        return self.dialect.version

    def refuse(self, message: str) -> None:
        self.problems.append(message)

    def warn(self, message: str) -> None:
        self.warnings.append(message)


def validate(
    spec: Spec,
    dialect: Dialect,
    target: Optional[ModelInfo],
    draft: Optional[ModelInfo],
    detected_gpus: Optional[List[Dict[str, Any]]] = None,
    peers: Optional[List[Dict[str, Any]]] = None,
) -> Resolved:
    """Check the spec; return resolved values or raise SpecError with every problem."""
    check = _Check(spec, dialect, target, draft, detected_gpus, peers)
    for rule in RULES:
        rule(check)
    if check.problems:
        raise SpecError(check.problems)
    check.res.warnings = check.warnings
    return check.res


def check_instance_name(name: Any) -> Optional[str]:
    """The refusal for an instance name, or None. Used by state=present and state=absent alike."""
    text = name if isinstance(name, str) else ""
    if NAME_RE.match(text) and not has_control(text) and text not in (".", ".."):
        return None
    return ("name %r is not a valid instance name; use 1-64 characters from A-Z a-z 0-9 _ . @ - starting "
            "with a letter, digit or _ (it becomes sglang@NAME.service and ENV_DIR/NAME.env)" % (name,))


def _check_identity(c: _Check) -> None:
    problem = check_instance_name(c.spec.name)
    if problem:
        c.refuse(problem)
    if c.target is None:
        c.refuse("target is required: give the local directory of the target model")
    for label in ("service_user", "service_group"):
        value = getattr(c.spec, label)
        if value is None:
            continue
        if not POSIX_NAME_RE.match(value) or len(value) > POSIX_NAME_MAX:
            c.refuse("%s %r is not a POSIX user/group name; use at most %d characters from a-z 0-9 _ - "
                     "starting with a-z or _ (e.g. sglang)" % (label, value, POSIX_NAME_MAX))


def _check_text_fields(c: _Check) -> None:
    """No control character anywhere a value reaches the unit or the env file."""
    s = c.spec
    values = [("target", s.target), ("draft", s.draft), ("python", s.python), ("served_model_name",
              s.served_model_name), ("host", s.host), ("attention_backend", s.attention_backend),
              ("tool_call_parser", s.tool_call_parser), ("reasoning_parser", s.reasoning_parser),
              ("kv_cache_dtype", s.kv_cache_dtype), ("mamba_strategy", s.mamba_strategy),
              ("speculative.draft_attention_backend", s.speculative.draft_attention_backend),
              ("cuda_home", s.cuda_home), ("unit_dir", s.unit_dir), ("env_dir", s.env_dir)]
    values += [("launcher item", a) for a in s.launcher or []]
    for label, value in values:
        if value is not None and has_control(value):
            c.refuse("%s contains a control character (newline, tab...); systemd units and env files "
                     "cannot carry it: fix the value" % label)
    for label in ("env_dir", "cuda_home"):
        value = getattr(s, label)
        if not has_control(value) and not PLAIN_PATH_RE.match(value):
            c.refuse("%s %r must be an absolute path of A-Z a-z 0-9 _ . / @ + - only (it is written "
                     "unquoted into the unit and the env file)" % (label, value))
    for label in ("python", "target", "draft"):
        value = getattr(s, label)
        if value is not None and not has_control(value) and not value.startswith("/"):
            c.refuse("%s %r must be an absolute path" % (label, value))
    if not has_control(s.host) and not HOST_RE.match(s.host):
        c.refuse("host %r is not an IP address or host name; use e.g. 127.0.0.1 or 0.0.0.0" % s.host)


def _check_ranges(c: _Check) -> None:
    s = c.spec
    for label, port in (("port", s.port), ("nccl_port", s.nccl_port)):
        if port is not None and not 1 <= port <= 65535:
            c.refuse("%s %s is out of range; use 1-65535" % (label, port))
    if s.nccl_port is not None and s.nccl_port == s.port:
        c.refuse("nccl_port %s equals port; give NCCL its own port" % s.port)
    if not 0.0 < s.mem_fraction_static < 1.0:
        c.refuse("mem_fraction_static %s is outside (0, 1); use e.g. 0.85 (the Kimi-K2.6 ceiling)"
                 % _fmt_num(s.mem_fraction_static))
    if s.tp < 1 or s.pp < 1:
        c.refuse("tp %s / pp %s must be >= 1" % (s.tp, s.pp))
    if not s.health_path.startswith("/") or any(ch in s.health_path for ch in " \"'\\%$") or has_control(
            s.health_path):
        c.refuse("health_path %r must be a plain absolute URL path such as /health_generate" % s.health_path)
    if s.start_timeout < 30:
        c.refuse("start_timeout %s s is too short for a model load; use >= 30 (2400 for Kimi-K2.6)"
                 % s.start_timeout)
    for label in ("stop_timeout", "start_limit_burst", "start_limit_interval", "min_concurrent_requests"):
        if getattr(s, label) < 1:
            c.refuse("%s %s must be a positive number" % (label, getattr(s, label)))
    if s.restart_sec < 0:
        c.refuse("restart_sec %s must be >= 0" % s.restart_sec)
    if not 1.0 <= s.min_accept_length <= 64.0:  # also refuses NaN
        c.refuse("min_accept_length %s is outside [1, 64]; it is the average accepted tokens per verify step a "
                 "drafter must exceed (1.0: it accepts anything at all)" % _fmt_num(s.min_accept_length))
    for label in ("max_running_requests", "cuda_graph_max_bs", "context_length"):
        value = getattr(s, label)
        if value is not None and value < 1:
            c.refuse("%s %d must be >= 1" % (label, value))
    if s.chunked_prefill_size is not None and s.chunked_prefill_size < 1 and s.chunked_prefill_size != -1:
        c.refuse("chunked_prefill_size %d must be >= 1 (or -1 to disable chunked prefill)" % s.chunked_prefill_size)
    if s.numa_node is not None and s.numa_node < 0:
        c.refuse("numa_node %d must be >= 0" % s.numa_node)
    if s.gpu_count is not None and s.gpu_count < 0:
        c.refuse("gpu_count %d must be >= 0" % s.gpu_count)
    for label in ("limit_nofile", "limit_memlock"):
        value = str(getattr(s, label))
        if not LIMIT_RE.match(value):
            c.refuse("%s %r is not a systemd resource limit; use a number, infinity or soft:hard "
                     "(e.g. 1048576, or 20000 where root lacks CAP_SYS_RESOURCE)" % (label, value))
    for path in s.read_write_paths:
        if not path.startswith("/") or any(ch in path for ch in " \"'\\%$") or has_control(path):
            c.refuse("read_write_paths entry %r must be an absolute path without spaces or quotes" % path)


def _selected_gpus(c: _Check) -> List[int]:
    per_instance = max(c.spec.tp, 1) * max(c.spec.pp, 1)
    if c.spec.gpus:
        return list(c.spec.gpus)
    if c.detected:
        return [g["index"] for g in c.detected][:per_instance]
    return list(range(per_instance))


def _check_gpu_list(c: _Check) -> None:
    s = c.spec
    gpus = c.res.gpus = _selected_gpus(c)
    if len(set(gpus)) != len(gpus):
        c.refuse("gpus %s lists a GPU twice; list each GPU id once" % gpus)
    if any(g < 0 for g in gpus):
        c.refuse("gpus %s has a negative id; use nvidia-smi indexes (0, 1, ...)" % gpus)
    if c.detected:
        known = {g["index"] for g in c.detected}
        missing = [g for g in gpus if g not in known]
        if missing:
            c.refuse("gpus %s are not on this host (nvidia-smi shows %s); fix the gpus list" % (missing, sorted(known)))
    _check_gpu_split(c, gpus)


def _check_gpu_split(c: _Check, gpus: List[int]) -> None:
    s = c.spec
    per_instance = max(s.tp, 1) * max(s.pp, 1)
    if gpus and len(gpus) % per_instance != 0:
        c.refuse("tp %d x pp %d = %d GPUs per replica does not divide the %d GPUs in gpus %s; use a tp that "
                 "divides %d or list %d GPUs" % (s.tp, s.pp, per_instance, len(gpus), gpus, len(gpus), per_instance))
    elif gpus and len(gpus) > per_instance:
        c.refuse("tp %d x pp %d uses only %d of the %d GPUs in gpus %s; list exactly %d GPUs for this instance "
                 "(run another instance on the rest) or use tp %d"
                 % (s.tp, s.pp, per_instance, len(gpus), gpus, per_instance, len(gpus) // max(s.pp, 1)))
    elif gpus and len(gpus) < per_instance and (s.gpus or c.detected):
        c.refuse("tp %d x pp %d needs %d GPUs but only %d are given/detected (%s); lower tp or add GPUs"
                 % (s.tp, s.pp, per_instance, len(gpus), gpus))


def _check_gpu_count(c: _Check) -> None:
    """Host GPU facts from preflight (gpu_count): tp 8 on a host without GPUs is refused."""
    s = c.spec
    if s.gpu_count is None or s.gpu_count < 0:
        return
    need = max(s.tp, 1) * max(s.pp, 1)
    if s.gpu_count == 0:
        c.refuse("this host has no GPU (gpu_count 0 from the preflight facts) but tp %d x pp %d needs %d; "
                 "deploy on a GPU host, or run the serving stand-in on test hosts" % (s.tp, s.pp, need))
    elif need > s.gpu_count:
        c.refuse("tp %d x pp %d needs %d GPUs but this host has %d (gpu_count); lower tp or use a host with "
                 "more GPUs" % (s.tp, s.pp, need, s.gpu_count))
    elif max(c.res.gpus or [0]) >= s.gpu_count:
        c.refuse("gpus %s name GPUs this host does not have (gpu_count %d: ids 0-%d); fix the gpus list"
                 % (c.res.gpus, s.gpu_count, s.gpu_count - 1))


def _check_numa(c: _Check) -> None:
    """numa_node binds CPU and memory; refuse it when the instance's GPUs sit on other or several nodes."""
    s = c.spec
    if s.numa_node is None or not s.gpu_numa_nodes:
        return
    nodes = sorted({s.gpu_numa_nodes[g] for g in c.res.gpus if 0 <= g < len(s.gpu_numa_nodes)} - {-1})
    if len(nodes) > 1:
        c.refuse("numa_node %d binds the instance to one NUMA node but its GPUs %s sit on nodes %s "
                 "(gpu_numa_nodes); remove numa_node (SGLang 0.5.23 binds each rank to its GPU's node when "
                 "numactl is installed) or give the instance GPUs of one node" % (s.numa_node, c.res.gpus, nodes))
    elif nodes and nodes[0] != s.numa_node:
        c.refuse("numa_node %d, but the instance's GPUs %s sit on NUMA node %d (gpu_numa_nodes); set "
                 "numa_node %d" % (s.numa_node, c.res.gpus, nodes[0], nodes[0]))


def _check_gpu_memory(c: _Check) -> None:
    gpu_mem = c.spec.gpu_memory_gib
    if gpu_mem is None and c.detected:
        selected = [g for g in c.detected if g["index"] in c.res.gpus] or c.detected
        gpu_mem = min(g["memory_mib"] for g in selected) / 1024.0
    if gpu_mem is not None and gpu_mem <= 0:
        c.refuse("gpu_memory_gib %s must be > 0" % _fmt_num(gpu_mem))
        gpu_mem = None
    c.res.gpu_memory_gib = gpu_mem


def _gpu_names(c: _Check) -> List[str]:
    return sorted({g["name"] for g in c.detected if g["index"] in c.res.gpus})


def _on_sm120(c: _Check) -> bool:
    return any(m in n for n in _gpu_names(c) for m in SM120_NAME_MARKERS)


def _check_target(c: _Check) -> None:
    t, s = c.target, c.spec
    if t is None:
        return
    heads = t.num_attention_heads
    if heads and s.tp >= 1 and heads % s.tp != 0:
        c.refuse("tp %d does not divide the target's %d attention heads; use a tp from %s"
                 % (s.tp, heads, _divisors(heads, max(8, len(c.detected) or 8))))
    if s.context_length and t.max_position_embeddings and s.context_length > t.max_position_embeddings:
        c.refuse("context_length %d exceeds the target's max_position_embeddings %d; use <= %d"
                 % (s.context_length, t.max_position_embeddings, t.max_position_embeddings))
    if _on_sm120(c) and t.mla and s.attention_backend in SM120_BAD_MLA_BACKENDS:
        c.refuse("attention_backend %s %s, and this host has %s; use attention_backend triton (or omit it: "
                 "SGLang picks triton for MLA on SM120)"
                 % (s.attention_backend, SM120_BAD_MLA_BACKENDS[s.attention_backend], ", ".join(_gpu_names(c))))
    if _on_sm120(c) and (t.quantization or {}).get("quant_method") in ("modelopt_fp4", "nvfp4"):
        c.refuse("the target is NVFP4-quantized and this host has %s (SM120): NVFP4 gives NaN there "
                 "(sgl-project/sglang#18954); use the INT4 or BF16 checkpoint" % ", ".join(_gpu_names(c)))


def _check_parsers(c: _Check) -> None:
    s, t = c.spec, c.target
    tool, reasoning = s.tool_call_parser, s.reasoning_parser
    if t is not None and t.is_kimi:
        tool, reasoning = tool or "kimi_k2", reasoning or "kimi_k2"
        for label, value in (("tool_call_parser", tool), ("reasoning_parser", reasoning)):
            if value != "kimi_k2":
                c.warn("%s %s on a Kimi target; SGLang's Kimi-K2.x docs require kimi_k2" % (label, value))
    c.res.tool_call_parser, c.res.reasoning_parser = tool, reasoning
    trust = s.trust_remote_code
    if trust is None:
        trust = bool(t is not None and (t.trust_remote_code or t.is_kimi))
    c.res.trust_remote_code = trust


def _check_no_speculative(c: _Check) -> None:
    s = c.spec
    if c.algo != "none":
        return
    if s.draft:
        c.refuse("draft %s is given but speculative.algorithm is none; set speculative.algorithm dflash "
                 "(or ddtree) or remove draft" % s.draft)
    for key in ("block_size", "ddtree_budget"):
        if getattr(s.speculative, key) is not None:
            c.refuse("speculative.%s is set but speculative.algorithm is none; remove it or choose an "
                     "algorithm" % key)


def _check_algorithm_support(c: _Check) -> None:
    if c.algo == "dflash" and not c.dialect.has_dflash:
        c.refuse("SGLang %s has no DFLASH speculative algorithm (it knows %s); DFLASH first shipped in 0.5.11: "
                 "upgrade SGLang" % (c.version, ", ".join(sorted(c.dialect.algorithms)) or "none"))
    if c.algo != "ddtree":
        return
    found, wanted = c.dialect.ddtree, c.spec.speculative.ddtree_dialect
    if found is None:
        c.refuse("SGLang %s has no DDTree: its parser knows neither --speculative-ddtree-budget (PR "
                 "sgl-project/sglang#29907) nor --speculative-dflash-enable-ddtree (fork "
                 "DB-Guo/sglang-ddtree-dev); DDTree is in no SGLang release: install such a build (or set "
                 "speculative.ddtree_dialect when rendering with sglang_version), or use algorithm dflash" % c.version)
    elif wanted != "auto" and wanted != found:
        c.refuse("speculative.ddtree_dialect %s does not match the installed build, whose parser speaks %s; "
                 "set ddtree_dialect auto or %s" % (wanted, found, found))
    else:
        c.res.ddtree_dialect = found
        choices = c.dialect.choices.get("speculative_algorithm")
        if found == "pr29907" and "DDTREE" not in c.dialect.algorithms and choices:
            c.refuse("SGLang %s has --speculative-ddtree-budget but DDTREE is not among its "
                     "--speculative-algorithm choices %s; the build is inconsistent" % (c.version, choices))


def _check_pr29907_base(c: _Check) -> None:
    """PR 29907 is built on the DFlash worker v2 that 0.5.11 does not have."""
    if c.res.ddtree_dialect == "pr29907" and version_tuple(c.version) and version_tuple(c.version) < (0, 5, 12):
        c.refuse("DDTree PR sgl-project/sglang#29907 on SGLang %s cannot exist: the PR is built on the newer "
                 "DFlash worker (DFlashWorkerV2) that 0.5.11 lacks; use a 0.5.2x build with the PR, the fork "
                 "dialect, or algorithm dflash" % c.version)


def _check_speculative_basics(c: _Check) -> None:
    s = c.spec
    if c.algo == "none":
        return
    if s.pp > 1:
        c.refuse("pp %d with speculative %s: SGLang's DFLASH (and DDTree, built on it) supports only pp_size 1; "
                 "use pp 1 and spread the model with tp instead" % (s.pp, c.algo))
    if not s.draft:
        c.refuse("speculative.algorithm %s needs draft: the local directory of the DFlash drafter" % c.algo)
    elif c.draft is not None:
        c.res.block_size = _check_draft(s, c.target, c.draft, c.problems, c.warnings)
    if c.res.block_size is None and s.speculative.block_size is not None:
        c.res.block_size = s.speculative.block_size
    if s.speculative.block_size is not None and s.speculative.block_size < 2:
        c.refuse("speculative.block_size %d must be >= 2" % s.speculative.block_size)
    window, block = s.speculative.draft_window_size, c.res.block_size
    if window is not None and block and window < block:
        c.refuse("speculative.draft_window_size %d is smaller than the block size %d; SGLang requires window >= "
                 "block size: use >= %d" % (window, block, block))
    if c.algo != "ddtree" and s.speculative.ddtree_budget is not None:
        c.refuse("speculative.ddtree_budget is only for algorithm ddtree; remove it for %s" % c.algo)
    if c.algo != "ddtree" and s.speculative.allow_hybrid_tree:
        c.warn("speculative.allow_hybrid_tree has no effect without algorithm ddtree")


def _check_ddtree_budget(c: _Check) -> None:
    s, block, t = c.spec, c.res.block_size, c.target
    if c.algo != "ddtree" or not block:
        return
    budget = s.speculative.ddtree_budget if s.speculative.ddtree_budget is not None else block - 1
    c.res.ddtree_budget = budget
    if budget < 1:
        c.refuse("speculative.ddtree_budget %d must be >= 1 (default: block_size-1 = %d)" % (budget, block - 1))
    elif c.res.ddtree_dialect == "fork" and budget + 1 != block:
        c.refuse("speculative.ddtree_budget %d: the fork dialect reads --speculative-num-draft-tokens as the block "
                 "size and uses budget = num_draft_tokens - 1, so budget + 1 = %d must equal the drafter's block "
                 "size %d; use ddtree_budget %d (or omit it)" % (budget, budget + 1, block, block - 1))
    elif budget > block - 1 and t is not None and t.hybrid and not s.speculative.allow_hybrid_tree:
        c.refuse("speculative.ddtree_budget %d > block_size-1 = %d on hybrid target %s: %s; use ddtree_budget <= %d "
                 "(spine mode, a linear chain) or set speculative.allow_hybrid_tree: true to accept the risk"
                 % (budget, block - 1, t.path, HYBRID_TREE_REASON % "; ".join(t.hybrid_markers[:3]), block - 1))
    elif budget > block - 1 and t is not None and t.hybrid:
        c.warn("ddtree_budget %d > block_size-1 on a hybrid target accepted by allow_hybrid_tree; watch the output "
               "for corruption" % budget)


def _lacks_grammar(c: _Check) -> Optional[str]:
    """Why this build cannot serve grammar-constrained / logprob requests, or None."""
    if c.algo == "dflash" and version_tuple(c.version) and version_tuple(c.version) < (0, 5, 12):
        return ("SGLang %s's DFLASH rejects logprobs and every grammar-constrained request (json_schema, "
                "tool_choice required/named, strict tools; managers/scheduler.py)" % c.version)
    if c.algo == "ddtree" and c.res.ddtree_dialect == "pr29907":
        return "DDTree (PR sgl-project/sglang#29907) serves no grammar-constrained or logprob requests"
    return None


def _check_grammar(c: _Check) -> None:
    reason = _lacks_grammar(c)
    if reason is None:
        return
    if c.spec.require_grammar:
        c.refuse("require_grammar is true (strict tool calls, JSON schema), but %s; use SGLang 0.5.23 with "
                 "algorithm dflash, or set require_grammar false and send tool_choice auto only" % reason)
    else:
        c.warn("%s; agentic clients must use tool_choice auto and no logprobs (set require_grammar: true to "
               "refuse this combination)" % reason)


def _check_mamba(c: _Check) -> None:
    s, t = c.spec, c.target
    mamba = s.mamba_strategy
    if t is not None and t.hybrid and c.algo != "none" and mamba is None:
        mamba = "extra_buffer"  # z-lab recipe; 0.5.11 no_buffer + radix cache raises
    c.res.mamba_strategy = mamba
    if mamba is None:
        return
    flag = c.dialect.flag("mamba_strategy")
    if flag is None:
        c.refuse("SGLang %s has no mamba strategy flag; remove mamba_strategy" % c.version)
    if (mamba == "no_buffer" and c.algo != "none" and flag == "--mamba-scheduler-strategy"
            and "--disable-radix-cache" not in s.extra_args):
        c.refuse("mamba_strategy no_buffer with speculative decoding and the radix cache raises on SGLang %s; use "
                 "mamba_strategy extra_buffer or add --disable-radix-cache to extra_args" % c.version)
    tokens = c.res.block_size
    if mamba.startswith("extra_buffer") and tokens and tokens > MAMBA_TRACK_INTERVAL:
        c.refuse("mamba_strategy %s needs mamba_track_interval %d >= draft tokens %d; lower the block size/budget"
                 % (mamba, MAMBA_TRACK_INTERVAL, tokens))


def _check_choices(c: _Check) -> None:
    s, mamba, mflag = c.spec, c.res.mamba_strategy, c.dialect.flag("mamba_strategy")
    for dest, value in (
        ("tool_call_parser", c.res.tool_call_parser),
        ("reasoning_parser", c.res.reasoning_parser),
        ("attention_backend", s.attention_backend),
        ("speculative_draft_attention_backend", s.speculative.draft_attention_backend),
        ("kv_cache_dtype", s.kv_cache_dtype),
        ("mamba_radix_cache_strategy", mamba if mflag == "--mamba-radix-cache-strategy" else None),
        ("mamba_scheduler_strategy", mamba if mflag == "--mamba-scheduler-strategy" else None),
    ):
        choices = c.dialect.choices.get(dest)
        if value is not None and choices and str(value) not in choices:
            c.refuse("%s %r is not accepted by SGLang %s; choose one of: %s"
                     % (dest, value, c.version, ", ".join(choices)))


def _check_graph_batch(c: _Check) -> None:
    """Render max_running_requests and the CUDA graph batch size together: batches above the graph size
    run without CUDA graphs (DFLASH otherwise resolves 48 running requests)."""
    running, graph = c.spec.max_running_requests, c.spec.cuda_graph_max_bs
    if running is not None and graph is not None and running != graph:
        c.refuse("max_running_requests %d and cuda_graph_max_bs %d disagree: batches %d-%d would run without "
                 "CUDA graphs (or graphs are captured for batches that never run); set both to the same value, "
                 "or set one and the module renders the other" % (running, graph, min(running, graph) + 1,
                                                                  max(running, graph)))
    c.res.max_running_requests = running if running is not None else graph
    c.res.cuda_graph_max_bs = graph if graph is not None else running


def _fit_input(c: _Check, **changes) -> fitmod.FitInput:
    s, t = c.spec, c.target
    draft = c.draft if (c.draft is not None and c.draft.dflash is not None and c.algo != "none") else None
    inp = fitmod.FitInput(
        gpu_memory_gib=c.res.gpu_memory_gib, mem_fraction_static=s.mem_fraction_static, tp=max(s.tp, 1),
        pp=max(s.pp, 1), context_length=s.context_length or t.max_position_embeddings or 0,
        kv_cache_dtype=s.kv_cache_dtype, target=t, draft=draft)
    return fitmod.with_changes(inp, **changes) if changes else inp


def _memory_ready(c: _Check) -> bool:
    """Whether the fit arithmetic can run (weights known, GPU memory known)."""
    t = c.target
    if t is None or not 0.0 < c.spec.mem_fraction_static < 1.0 or c.spec.tp < 1 or c.spec.pp < 1:
        return False
    if t.weight_bytes is None:
        c.warn("weight size of %s unknown (no model.safetensors.index.json, no *.safetensors); memory per GPU "
               "and the KV cache not checked" % t.path)
        return False
    if c.res.gpu_memory_gib is None:
        c.refuse("gpu_memory_gib is not set and nvidia-smi found no GPU; set gpu_memory_gib to the memory of one "
                 "GPU in GiB (e.g. 96 for an RTX PRO 6000) so the weights-per-GPU check can run")
        return False
    return True


def _usable_text(c: _Check, fit: fitmod.Fit) -> str:
    return "%s usable per GPU (%s GiB - %s GiB runtime reserve, x mem_fraction_static %s)" % (
        _fmt_gb(fit.usable_gb * GB), _fmt_num(c.res.gpu_memory_gib), _fmt_num(fitmod.RUNTIME_RESERVE_GIB),
        _fmt_num(c.spec.mem_fraction_static))


def _weights_text(fit: fitmod.Fit) -> str:
    parts = "%.1f GB sharded + %.1f GB replicated on every rank" % (fit.weights_gb, fit.replicated_gb)
    if fit.draft_gb:
        parts += " + %.1f GB drafter" % fit.draft_gb
    return "weights %.1f GB per GPU (%s)" % (fit.weights_total_gb, parts)


def _larger_tp_fix(c: _Check) -> str:
    heads = c.target.num_attention_heads or 0
    limit = max(c.spec.gpu_count or len(c.detected), 8)
    for tp in range(c.spec.tp + 1, limit + 1):
        if heads and heads % tp:
            continue
        fit = fitmod.compute(_fit_input(c, tp=tp))
        if fit.pool_tokens >= fit.context_length:
            return "use tp %d (%.1f GB per GPU)" % (tp, fit.weights_total_gb)
    weights_only = fitmod.fraction_for(_fit_input(c), 0)
    if weights_only < 0.95:
        return ("raise mem_fraction_static above %.2f for the weights alone and higher still for the KV cache "
                "(0.85 is Kimi-K2.6's field ceiling), or use more/larger GPUs" % weights_only)
    return "it does not fit even on %d GPUs: use more/larger GPUs or a smaller (quantized) checkpoint" % limit


def _check_memory(c: _Check) -> None:
    """Weights per GPU, including what every rank holds in full, against the usable memory."""
    if not _memory_ready(c):
        return
    fit = fitmod.compute(_fit_input(c))
    c.res.fit = fit.as_dict()
    if fit.weights_total_gb < fit.usable_gb:
        return
    split = "tp %d" % c.spec.tp if c.spec.pp == 1 else "tp %d x pp %d" % (c.spec.tp, c.spec.pp)
    c.refuse("%s at %s > %s, leaving no KV cache (0 tokens for a %d-token context_length request); %s"
             % (_weights_text(fit), split, _usable_text(c, fit), fit.context_length, _larger_tp_fix(c)))


def _kv_fixes(c: _Check, fit: fitmod.Fit, wanted: int) -> str:
    """The three ways out, with their numbers."""
    requests = max(wanted // max(fit.context_length, 1), 1)
    fixes = ["context_length <= %d" % (fit.pool_tokens // requests // 1024 * 1024)]
    if fitmod.kv_dtype_bytes(c.spec.kv_cache_dtype) > 1:
        fp8 = fitmod.compute(_fit_input(c, kv_cache_dtype=fitmod.FP8_KV))
        fixes.append("kv_cache_dtype %s (%d tokens)" % (fitmod.FP8_KV, fp8.pool_tokens))
    fraction = fitmod.fraction_for(_fit_input(c), wanted) + 0.005
    if fraction < 0.9:  # Kimi-K2.6 ran out of memory at 0.90 in the field
        fixes.append("mem_fraction_static %.2f (if the GPUs have that headroom; 0.90 ran out of memory in the "
                     "field)" % fraction)
    return ", or ".join(fixes)


def _check_kv_cache(c: _Check) -> None:
    """The KV pool must hold one full context_length request; warn below min_concurrent_requests of them."""
    if c.res.fit is None or any(p.startswith("weights ") for p in c.problems):
        return
    fit = fitmod.compute(_fit_input(c))
    head = ("KV cache: %s leaves %.1f GB per GPU for the KV pool after %s; at %d bytes per token (target %d + "
            "drafter %d, kv_cache_dtype %s) it holds %d tokens"
            % (_usable_text(c, fit), fit.kv_pool_gb, _weights_text(fit), fit.kv_bytes_per_token
               + fit.draft_kv_bytes_per_token, fit.kv_bytes_per_token, fit.draft_kv_bytes_per_token,
               fit.kv_cache_dtype, fit.pool_tokens))
    if fit.pool_tokens < fit.context_length:
        c.refuse("%s, fewer than one request of context_length %d (SGLang stops with 'Not enough memory' or "
                 "truncates); fix with %s" % (head, fit.context_length, _kv_fixes(c, fit, fit.context_length)))
    elif fit.concurrent_requests < c.spec.min_concurrent_requests:
        wanted = c.spec.min_concurrent_requests * fit.context_length
        c.warn("%s = %.1f concurrent full-length requests of context_length %d, fewer than min_concurrent_requests "
               "%d; more with %s" % (head, fit.concurrent_requests, fit.context_length,
                                     c.spec.min_concurrent_requests, _kv_fixes(c, fit, wanted)))


def _check_extra_args(c: _Check) -> None:
    s = c.spec
    for arg in s.extra_args:
        if not isinstance(arg, str) or has_control(arg):
            c.refuse("extra_args item %r contains a newline, NUL or other control character; pass one argument "
                     "per item" % (TOKEN_VALUE_RE.sub("<redacted>", str(arg)),))
            continue
        option = arg.split("=", 1)[0]
        if option in MANAGED_FLAGS:
            c.refuse("extra_args sets %s, which the spec renders from option %s; set that option instead"
                     % (option, MANAGED_FLAGS[option]))
        if TOKEN_VALUE_RE.search(arg):
            c.refuse("extra_args contains what looks like a Hugging Face token; the service runs offline from "
                     "local paths and needs none: remove it")
    if ";" in s.extra_args:
        c.refuse("extra_args has a lone ';', which systemd reads as a command separator; remove it")
    unknown = unknown_options(c.dialect, s.extra_args)
    if unknown:
        c.refuse("extra_args %s: unknown to SGLang %s's parser (typo, or a flag renamed between versions, e.g. "
                 "0.5.11 --cuda-graph-max-bs -> 0.5.23 --cuda-graph-max-bs-decode); fix the flag names"
                 % (", ".join(unknown), c.version))


def _check_environment(c: _Check) -> None:
    for key, value in (c.spec.environment or {}).items():
        text = "" if value is None else str(value)
        if not ENV_NAME_RE.match(str(key)):
            c.refuse("environment name %r is not a valid variable name" % (TOKEN_VALUE_RE.sub("<redacted>", str(key)),))
        elif key in SECRET_ENV_NAMES or SECRET_ENV_RE.search(str(key)):
            c.refuse("environment %s looks like a secret; the SGLang service runs with HF_HUB_OFFLINE=1 from local "
                     "paths and needs no token, and the API key goes through api_key: remove it" % key)
        elif key in FIXED_ENV:
            c.refuse("environment %s is fixed to %s by the module (offline service); remove it" % (key, FIXED_ENV[key]))
        elif key in MANAGED_ENV:
            c.refuse("environment %s is written by the module from %s; set that instead" % (key, MANAGED_ENV[key]))
        if has_control(text):
            c.refuse("environment %s has a newline or other control character in its value; use a single line"
                     % TOKEN_VALUE_RE.sub("<redacted>", str(key)))
        if TOKEN_VALUE_RE.search(text):
            c.refuse("environment %s holds what looks like a Hugging Face token; remove it (the service needs none)"
                     % key)


def _check_peers(c: _Check) -> None:
    s = c.spec
    my_ports = {p for p in (s.port, s.nccl_port) if p is not None}
    for peer in c.peers:
        if peer.get("name") == s.name:
            continue
        where = peer.get("source") or "other_instances"
        clash = sorted(my_ports & {p for p in (peer.get("port"), peer.get("nccl_port")) if p is not None})
        if clash:
            c.refuse("port %s is already used by instance %r (%s); give each instance its own port and nccl_port"
                     % (", ".join(str(p) for p in clash), peer.get("name"), where))
        shared = sorted(set(c.res.gpus) & set(peer.get("gpus") or []))
        if shared:
            c.refuse("GPUs %s are already assigned to instance %r (%s); give each instance a disjoint gpus list"
                     % (", ".join(str(g) for g in shared), peer.get("name"), where))


def _check_exposure(c: _Check) -> None:
    """Beyond loopback the endpoint needs an API key (delivered in a secret file, never in argv)."""
    s = c.spec
    c.res.api_key = bool(s.api_key) if s.api_key is not None else not s.loopback
    if not s.loopback and s.api_key is False:
        c.refuse("host %s listens beyond loopback but api_key is false; an endpoint reachable from the network "
                 "needs an API key: set api_key true (the role writes it to %s) or host 127.0.0.1"
                 % (s.host, s.secret_path))
    if c.res.api_key and c.dialect.config_reader_error:
        c.refuse("api_key: SGLang %s reads the key from the --config file %s, but its config reader does not "
                 "import with %s (%s), so the instance would die at start; install PyYAML into that venv (add a "
                 "pyyaml wheel to the wheelhouse of ct200.deploy.sglang_runtime)"
                 % (c.version, s.secret_path, s.python, c.dialect.config_reader_error))


def _check_fabric_env(c: _Check) -> None:
    """SGLANG_ENABLE_PCIE_IPC_ALLREDUCE only where it was measured and can run.

    SGLang 0.5.23 ships FlashInfer's PCIe-IPC all-reduce (srt/distributed/device_communicators/pcie_ipc_ar.py,
    off by default: environ.py SGLANG_ENABLE_PCIE_IPC_ALLREDUCE = EnvBool(False)), measured on one 8x SM120 host
    with GPUs 0-3 and 4-7 on separate NUMA nodes (TPOT 21.14 -> 13.62 ms against NCCL). Its kernels write to
    peer GPUs, so it needs working P2P: never together with NCCL_P2P_DISABLE."""
    s = c.spec
    if not s.pcie_ipc_allreduce:
        return
    if not version_tuple(c.version) or version_tuple(c.version) < (0, 5, 23):
        c.refuse("pcie_ipc_allreduce needs SGLang >= 0.5.23 (pcie_ipc_ar.py first shipped there); this venv runs %s: "
                 "remove pcie_ipc_allreduce or pin 0.5.23" % c.version)
    if s.tp != 8:
        c.refuse("pcie_ipc_allreduce is offered for tp 8 only (the 8x sm_120 two-NUMA layout it was measured on); "
                 "this instance has tp %d: remove pcie_ipc_allreduce" % s.tp)
    sm120 = s.gpu_compute_cap == "12.0" if s.gpu_compute_cap else _on_sm120(c)
    if not sm120:
        c.refuse("pcie_ipc_allreduce is offered for sm_120 GPUs only (RTX PRO 6000 Blackwell); these are %s: remove "
                 "pcie_ipc_allreduce" % (("compute capability %s" % s.gpu_compute_cap) if s.gpu_compute_cap
                                         else (_gpu_names(c) or "unknown GPUs (give gpu_compute_cap)")))
    if s.nccl_p2p_disable:
        c.refuse("pcie_ipc_allreduce writes to peer GPUs over PCIe P2P, which nccl_p2p_disable says this fabric cannot "
                 "carry: use one of the two")


RULES = (
    _check_identity, _check_text_fields, _check_ranges, _check_gpu_list, _check_gpu_count, _check_numa,
    _check_gpu_memory, _check_target, _check_parsers, _check_no_speculative, _check_algorithm_support,
    _check_pr29907_base, _check_speculative_basics, _check_ddtree_budget, _check_grammar, _check_mamba,
    _check_choices, _check_graph_batch, _check_memory, _check_kv_cache, _check_extra_args, _check_environment,
    _check_peers, _check_exposure, _check_fabric_env,
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
            # The fork reads num_draft_tokens as the block size; its tree budget is that minus one.
            _add(argv, flag("ddtree_enable"))
            _add(argv, flag("num_draft_tokens"), resolved.ddtree_budget + 1)
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
    if resolved.max_running_requests is not None:
        _add(argv, flag("max_running_requests"), resolved.max_running_requests)
        _add(argv, flag("cuda_graph_max_bs"), resolved.cuda_graph_max_bs)
    if spec.enable_metrics:
        _add(argv, flag("enable_metrics"))
    _add(argv, flag("host"), spec.host)
    _add(argv, flag("port"), spec.port)
    if spec.nccl_port is not None:
        _add(argv, flag("nccl_port"), spec.nccl_port)
    if resolved.api_key:
        # SGLang reads the key from --api-key or from a --config YAML; the path keeps the key out of argv.
        _add(argv, "--config", spec.secret_path)
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
