#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: ct200-deploy developers
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_service
short_description: Plan, render and verify an SGLang DFlash/DDTree instance (unit and environment file)
version_added: "0.1.0"
description:
  - Introspects the local target and drafter (C(config.json), nested C(text_config), safetensors index),
    detects the flag dialect of the SGLang installed at O(python) (its own parser, cached per venv) or uses
    the built-in table for O(sglang_version), validates the deployment spec and only then renders the SGLang
    command line, the unit C(sglang@NAME.service) and its EnvironmentFile C(ENV_DIR/NAME.env).
  - Refusals name the numbers and the fix, e.g. weights per GPU (including what every TP rank holds in full)
    and the KV cache pool against O(context_length) (Kimi-K2.6 at tp 8 with context 262144), tp against the
    host's GPUs (O(gpu_count)) and attention heads, a DDTree budget above block_size-1 on a hybrid target,
    a drafter that is not DFlash or does not match, PP with DFLASH, ports or GPUs shared with another
    instance, flags the installed SGLang does not know, secrets in O(environment), a value with a control
    character for any field of the unit or the environment file.
  - The unit is checked with C(systemd-analyze verify) (any warning fails).
  - The module only reads. It writes no file and manages no systemd state; RV(changed) says whether the
    rendered RV(unit_content) / RV(env_content) differ from the files at RV(unit_path) / RV(env_path).
    The role C(ct200.deploy.sglang_service) installs them (C(ansible.builtin.copy) with C(validate=)),
    reloads and starts the unit (C(ansible.builtin.systemd_service)) and proves it (C(ansible.builtin.uri)).
    Check mode therefore returns exactly what a real run returns.
  - The service needs no Hugging Face token (C(HF_HUB_OFFLINE=1), local paths); token-like environment is refused.
    An API key (required when O(host) is not loopback) never reaches the module; SGLang reads it from a
    C(--config) YAML file the role writes (RV(secret_path)); only that path is in the command line.
author: ct200-deploy developers (@ct200-deploy)
requirements:
  - C(systemd-analyze) on the managed host (unless O(verify_unit=false))
  - SGLang in the venv of O(python) (role C(ct200.deploy.sglang_runtime)), unless O(sglang_version) is set
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details: The module never writes, so check mode returns the same result as a real run.
  diff_mode:
    support: full
    details: Diffs of the unit and the environment file against what is on disk (they never contain secrets).
  platform:
    platforms: posix
options:
  name:
    description:
      - Instance name; the unit is C(sglang@NAME.service), the environment file C(ENV_DIR/NAME.env).
      - 1-64 characters from C(A-Z a-z 0-9 _ . @ -), starting with a letter, digit or C(_); checked the same way
        for O(state=absent).
    type: str
    required: true
  state:
    description:
      - C(present) validates, renders and verifies the instance and returns its files.
      - C(absent) validates the name and returns the paths the role removes (RV(changed) when any exists).
    type: str
    choices: [present, absent]
    default: present
  target:
    description: Local directory of the target model (with C(config.json)). Required unless O(state=absent).
    type: path
  draft:
    description: Local directory of the DFlash drafter. Required with a speculative algorithm.
    type: path
  speculative:
    description: Speculative decoding settings.
    type: dict
    default: {}
    suboptions:
      algorithm:
        description:
          - C(dflash) renders C(--speculative-algorithm DFLASH); C(ddtree) renders the DDTree dialect of the
            installed build (PR 29907 C(DDTREE) + C(--speculative-ddtree-budget), or the fork's
            C(--speculative-dflash-enable-ddtree)). DDTree is in no SGLang release.
        type: str
        choices: [none, dflash, ddtree]
        default: none
      block_size:
        description: DFlash block size (draft tokens per verify). Defaults to the drafter's C(block_size); must match it.
        type: int
      ddtree_budget:
        description:
          - DDTree node budget. Defaults to block_size-1 (spine mode, a linear chain). Above block_size-1
            on a hybrid target it is refused unless O(speculative.allow_hybrid_tree=true).
        type: int
      allow_hybrid_tree:
        description: Accept a full DDTree (budget above block_size-1) on a hybrid target despite the state-leak risk.
        type: bool
        default: false
      ddtree_dialect:
        description: DDTree flag dialect. C(auto) takes it from the installed parser; set it with O(sglang_version).
        type: str
        choices: [auto, pr29907, fork]
        default: auto
      draft_attention_backend:
        description: C(--speculative-draft-attention-backend) (triton or flashinfer on SM120).
        type: str
      draft_window_size:
        description: Draft KV window (0.5.11 C(--speculative-dflash-draft-window-size), 0.5.23 C(--speculative-draft-window-size)).
        type: int
  tp:
    description: Tensor-parallel size. Must divide the attention heads and match the GPUs of the instance.
    type: int
    default: 1
  pp:
    description: Pipeline-parallel size (refused above 1 with DFLASH/DDTree).
    type: int
    default: 1
  gpus:
    description: GPU ids (nvidia-smi indexes) of this instance, written as C(CUDA_VISIBLE_DEVICES). Defaults to the first tp x pp GPUs.
    type: list
    elements: int
  gpu_count:
    description:
      - Number of GPUs on the host, from the preflight facts. C(0) refuses every instance (tp 8 on a host
        without GPUs); fewer than tp x pp GPUs is refused too. Unset, nvidia-smi (when present) decides.
    type: int
  gpu_numa_nodes:
    description:
      - NUMA node of each GPU, indexed by GPU id (from sysfs C(/sys/bus/pci/devices/BDF/numa_node) in the
        preflight facts; C(-1) = unknown). With O(numa_node), an instance whose GPUs span several nodes (or
        sit on another node) is refused.
    type: list
    elements: int
  gpu_memory_gib:
    description: Memory of one GPU in GiB. Detected with C(nvidia-smi) when omitted (required where there is no GPU).
    type: float
  mem_fraction_static:
    description:
      - C(--mem-fraction-static). Weights per GPU (sharded part / tp + what every rank holds in full + drafter / tp)
        and the KV cache pool must fit in (GPU memory - 2.25 GiB runtime reserve) x this fraction; see RV(fit).
    type: float
    default: 0.85
  min_concurrent_requests:
    description:
      - Warn when the KV pool holds fewer than this many full-length (O(context_length)) requests. A pool that
        cannot hold one is always refused.
    type: int
    default: 4
  port:
    description: HTTP port (C(--port)); must differ from every other instance on the host.
    type: int
    default: 30000
  host:
    description: Listen address (C(--host)). Beyond loopback an API key is required (O(api_key)).
    type: str
    default: 127.0.0.1
  api_key:
    description:
      - Protect the endpoint with an API key. Defaults to true when O(host) is not loopback; false is refused there.
      - The module never sees the key. SGLang reads it only from C(--api-key) (argv, visible in C(ps)) or from a
        C(--config) YAML file; the module renders C(--config ENV_DIR/NAME.secret.yaml) (RV(secret_path)) and the
        role writes that file (key C(api-key), mode 0640, group of the service).
      - C(/health*), C(/ready*) and C(/metrics*) stay open; SGLang 0.5.23 returns the key in C(/server_info) to
        authenticated callers, so do not print that answer unfiltered.
    type: bool
  nccl_port:
    description: C(--nccl-port) (random when unset).
    type: int
  served_model_name:
    description: C(--served-model-name).
    type: str
  context_length:
    description:
      - C(--context-length); refused above the target's C(max_position_embeddings), and refused when the KV pool
        cannot hold one request of this many tokens. Unset, the target's C(max_position_embeddings) is checked.
    type: int
  attention_backend:
    description: C(--attention-backend). MLA backends that fail on SM120 are refused when nvidia-smi shows such GPUs.
    type: str
  tool_call_parser:
    description: C(--tool-call-parser); defaults to C(kimi_k2) for Kimi targets.
    type: str
  reasoning_parser:
    description: C(--reasoning-parser); defaults to C(kimi_k2) for Kimi targets.
    type: str
  require_grammar:
    description:
      - The clients need grammar-constrained requests (strict tool calls, C(tool_choice) required/named, JSON
        schema) or logprobs. Refuses builds that reject them (0.5.11 DFLASH, DDTree PR 29907); false only warns.
    type: bool
    default: false
  chunked_prefill_size:
    description: C(--chunked-prefill-size).
    type: int
  max_running_requests:
    description:
      - C(--max-running-requests). Rendered together with the CUDA graph batch size; set one and both are rendered
        with that value; set both and they must be equal (batches above the graph size run without CUDA graphs).
    type: int
  cuda_graph_max_bs:
    description:
      - CUDA graph max batch size (0.5.11 C(--cuda-graph-max-bs), 0.5.23 C(--cuda-graph-max-bs-decode)); see
        O(max_running_requests).
    type: int
  kv_cache_dtype:
    description: C(--kv-cache-dtype); C(fp8_e4m3) halves the KV bytes per token (see RV(fit)).
    type: str
  mamba_strategy:
    description:
      - Mamba cache strategy of hybrid targets (0.5.11 C(--mamba-scheduler-strategy), 0.5.23
        C(--mamba-radix-cache-strategy)). Defaults to C(extra_buffer) for a hybrid target with speculative decoding.
    type: str
  enable_metrics:
    description: C(--enable-metrics).
    type: bool
    default: false
  trust_remote_code:
    description: C(--trust-remote-code). Defaults to true when the target config has C(auto_map) or is Kimi.
    type: bool
  extra_args:
    description:
      - More SGLang arguments, one per item. Flags the spec renders itself are refused, and so are flags the
        installed parser does not know (when probed).
    type: list
    elements: str
    default: []
  environment:
    description: Extra environment for the service. Token- or secret-like names and values are refused.
    type: dict
    default: {}
  python:
    description:
      - Interpreter of the SGLang venv on the host (installed by the role C(ct200.deploy.sglang_runtime)); its
        C(bin/) directory comes first in the service's PATH (SGLang's JIT runs C(ninja) from PATH).
    type: path
    default: /opt/sglang/venv/bin/python
  cuda_home:
    description: C(CUDA_HOME) of the service (SGLang's JIT finds C(nvcc) there); its C(bin/) is on PATH too.
    type: path
    default: /usr/local/cuda
  launcher:
    description:
      - TEST ONLY. Arguments between O(python) and the SGLang flags, replacing C(-m sglang.launch_server);
        the Molecule scenario points it at the SGLang test stand-in. Leave unset in production.
    type: list
    elements: str
  sglang_version:
    description:
      - Render for this SGLang version (built-in flag table, 0.5.11 or 0.5.23) without probing O(python),
        e.g. to review a plan before SGLang is installed.
    type: str
  unit_dir:
    description: Directory of the unit file.
    type: path
    default: /etc/systemd/system
  env_dir:
    description: Directory of the per-instance environment files (and the API key files the role writes).
    type: path
    default: /etc/sglang
  cache_dir:
    description: Cache of the probed SGLang flag manifests (one file per venv and version).
    type: path
    default: /var/cache/ct200-sglang
  service_user:
    description: Dedicated user the service runs as (the role creates it). A POSIX name, at most 32 characters.
    type: str
    default: sglang
  service_group:
    description: Group of the service (a POSIX name). Defaults to O(service_user).
    type: str
  numa_node:
    description:
      - Bind CPU and memory to this NUMA node (C(numactl) when installed, else systemd C(NUMAPolicy)). Refused
        when O(gpu_numa_nodes) shows the instance's GPUs on other or several nodes.
    type: int
  limit_nofile:
    description: C(LimitNOFILE=). Where root lacks CAP_SYS_RESOURCE use at most the hard limit (e.g. 20000).
    type: str
    default: "1048576"
  limit_memlock:
    description: C(LimitMEMLOCK=).
    type: str
    default: infinity
  start_timeout:
    description: C(TimeoutStartSec=) in seconds (at least 30); the role's readiness wait uses the same budget.
    type: int
    default: 2400
  stop_timeout:
    description:
      - C(TimeoutStopSec=) in seconds. SGLang drains in-flight requests without limit on SIGTERM; when this runs
        out the rest is SIGKILLed mid-drain, which can leave GPU memory held (the role checks after every stop).
      - The default 900 covers a 32768-token answer at 21.1 ms per token (Kimi-K2.6, tp 8 over PCIe) = 691 s, plus
        SGLang's 75 s of shutdown. Raise it for longer answers or slower hosts.
    type: int
    default: 900
  min_accept_length:
    description:
      - For O(speculative.algorithm=dflash) or C(ddtree), the role's readiness requires
        C(internal_states[0].avg_spec_accept_length) in C(/server_info) to be above this after its warm-up requests
        (the drafter accepts something). 1.0 is what a drafter that never hits gives; between 1 and 64.
    type: float
    default: 1.0
  restart_sec:
    description: C(RestartSec=) in seconds.
    type: int
    default: 30
  start_limit_burst:
    description: C(StartLimitBurst=) (a failed TP init can leak GPU memory; no retry storms).
    type: int
    default: 3
  start_limit_interval:
    description: C(StartLimitIntervalSec=) in seconds.
    type: int
    default: 600
  health_path:
    description: Health endpoint (RV(health_url)); needs no API key.
    type: str
    default: /health_generate
  read_write_paths:
    description: Extra writable paths (C(ReadWritePaths=)); the unit runs with C(ProtectSystem=strict).
    type: list
    elements: path
    default: []
  other_instances:
    description:
      - Instances planned elsewhere in the play (not yet on disk) whose ports and GPUs must not overlap this
        one. Instances already on the host are read from O(env_dir).
    type: list
    elements: dict
    default: []
    suboptions:
      name:
        description: Instance name.
        type: str
        required: true
      port:
        description: Its HTTP port.
        type: int
      nccl_port:
        description: Its NCCL port.
        type: int
      gpus:
        description: Its GPU ids.
        type: list
        elements: int
        default: []
  verify_unit:
    description: Run C(systemd-analyze verify) on the rendered unit (any warning refuses it).
    type: bool
    default: true
  nccl_p2p_disable:
    description:
      - Render C(NCCL_P2P_DISABLE=1) into the environment file - NCCL reduces through host memory instead of PCIe
        peer-to-peer. For hosts whose preflight (C(p2p), C(acs), C(iommu) or the C(--deep) all-reduce) says P2P is
        unusable and ACS/the IOMMU cannot be fixed (inventory C(ct200_nccl_p2p_disable)).
    type: bool
    default: false
  pcie_ipc_allreduce:
    description:
      - Render C(SGLANG_ENABLE_PCIE_IPC_ALLREDUCE=1) - SGLang 0.5.23's FlashInfer PCIe-IPC all-reduce
        (C(pcie_ipc_ar.py)), measured upstream on 8x sm_120 across two NUMA
        nodes (TPOT 21.1 to 13.6 ms); off by default in SGLang and here until an A/B run on the site's hosts
        (README, PCIe IPC all-reduce). Refused unless O(tp=8), the GPUs are sm_120 (O(gpu_compute_cap) or the
        detected GPU names) and SGLang >= 0.5.23, and together with O(nccl_p2p_disable) (its kernels write to
        peer GPUs). Inventory C(ct200_pcie_ipc_allreduce).
    type: bool
    default: false
  gpu_compute_cap:
    description: Compute capability of the host's GPUs (C(12.0) for sm_120), for O(pcie_ipc_allreduce)'s check.
    type: str
notes:
  - The flag manifest of a venv is cached in O(cache_dir) keyed by interpreter path, SGLang version and
    dist-info mtime; a reinstall invalidates it. Check mode does not write the cache.
  - The flag manifest cache is the only thing the module may write (atomically, never in check mode).
seealso:
  - name: SGLang server arguments
    description: Upstream documentation of the flags.
    link: https://docs.sglang.io/
"""

EXAMPLES = r"""
- name: Plan Kimi-K2.6 with DFlash on 8 GPUs
  ct200.deploy.sglang_service:
    name: kimi
    target: /models/moonshotai/Kimi-K2.6
    draft: /models/z-lab/Kimi-K2.6-DFlash
    speculative:
      algorithm: dflash
      draft_attention_backend: triton
    tp: 8
    gpu_count: 8
    served_model_name: kimi-k2.6
    attention_backend: triton
    context_length: 65536
    min_concurrent_requests: 1
    cuda_graph_max_bs: 16
    enable_metrics: true
    python: /opt/sglang/venv/bin/python
  register: kimi_plan

- name: Install the unit the plan rendered (the role does this, with a handler for the restart)
  ansible.builtin.copy:
    content: "{{ kimi_plan.unit_content }}"
    dest: "{{ kimi_plan.unit_path }}"
    owner: root
    group: root
    mode: "0644"

- name: Review the plan for SGLang 0.5.11 before it is installed
  ct200.deploy.sglang_service:
    name: kimi
    target: /models/moonshotai/Kimi-K2.6
    draft: /models/z-lab/Kimi-K2.6-DFlash
    speculative: {algorithm: dflash}
    tp: 8
    gpu_memory_gib: 96
    context_length: 65536
    sglang_version: 0.5.11
  check_mode: true
  register: plan

- name: Two DDTree instances of a hybrid model, one per NUMA node
  ct200.deploy.sglang_service:
    name: "qwen-{{ item.name }}"
    target: /models/Qwen/Qwen3.6-27B
    draft: /models/z-lab/Qwen3.6-27B-DFlash
    speculative: {algorithm: ddtree, ddtree_budget: 15}
    tp: 4
    gpus: "{{ item.gpus }}"
    gpu_numa_nodes: [0, 0, 0, 0, 1, 1, 1, 1]
    numa_node: "{{ item.numa }}"
    port: "{{ item.port }}"
  loop:
    - {name: a, gpus: [0, 1, 2, 3], numa: 0, port: 30000}
    - {name: b, gpus: [4, 5, 6, 7], numa: 1, port: 30001}
"""

RETURN = r"""
changed:
  description:
    - With O(state=present), whether RV(unit_content) or RV(env_content) differ from the files on disk (a symlink
      there counts as different and is never read); with O(state=absent), whether any of the files exists.
  returned: always
  type: bool
unit_name:
  description: Name of the unit.
  returned: always
  type: str
  sample: sglang@kimi.service
unit_path:
  description: Path of the unit file.
  returned: always
  type: str
  sample: /etc/systemd/system/sglang@kimi.service
env_path:
  description: Path of the environment file.
  returned: always
  type: str
  sample: /etc/sglang/kimi.env
secret_path:
  description:
    - Path of the API key file (YAML with the key C(api-key)) passed to SGLang as C(--config) when RV(api_key) is true;
      the role writes it (0640, group of the service) and removes it with O(state=absent).
  returned: always
  type: str
  sample: /etc/sglang/kimi.secret.yaml
unit_content:
  description: The rendered, verified unit text (hardened; no secret).
  returned: when state is present
  type: str
env_content:
  description: The rendered EnvironmentFile text (PATH, CUDA_HOME, CUDA_VISIBLE_DEVICES, offline switches; no secret).
  returned: when state is present
  type: str
argv:
  description: The SGLang command line as a list (interpreter first).
  returned: when state is present
  type: list
  elements: str
  sample: ["/opt/sglang/venv/bin/python", "-m", "sglang.launch_server", "--model-path", "/models/moonshotai/Kimi-K2.6", "--tp-size", "8"]
command_line:
  description: RV(argv) quoted as in the unit's C(ExecStart=).
  returned: when state is present
  type: str
health_url:
  description: URL of the health endpoint (loopback when the service listens on all addresses); needs no API key.
  returned: when state is present
  type: str
  sample: http://127.0.0.1:30000/health_generate
chat_url:
  description: URL of the OpenAI-compatible chat endpoint (C(/v1/chat/completions)) for the smoke completion.
  returned: when state is present
  type: str
  sample: http://127.0.0.1:30000/v1/chat/completions
server_info_url:
  description: URL of C(/server_info).
  returned: when state is present
  type: str
served_model_name:
  description: The model name clients send (O(served_model_name), else the target path).
  returned: when state is present
  type: str
host:
  description: Listen address.
  returned: when state is present
  type: str
port:
  description: HTTP port.
  returned: when state is present
  type: int
api_key:
  description: Whether the endpoint requires an API key (the role must write RV(secret_path) before the start).
  returned: when state is present
  type: bool
dialect:
  description: The SGLang build the line was rendered for (version, source probe/cache/static, DDTree dialect,
    DFLASH support, chosen spellings).
  returned: when state is present
  type: dict
  sample: {"version": "0.5.23", "source": "cache", "ddtree": null, "dflash": true}
fit:
  description:
    - The memory arithmetic per GPU (GB = 10^9 bytes) - weights (sharded part / tp), replicated on every rank (MLA
      projections, router gates, vision tower), drafter, KV pool, KV bytes per token of the target and of the
      drafter, the tokens the pool holds, the context_length checked and how many full-length requests fit at once.
    - Null when the weight size is unknown.
  returned: when state is present
  type: dict
  sample: {"gpu_memory_gib": 96, "runtime_reserve_gib": 2.25, "usable_gb_per_gpu": 85.57, "weights_gb_per_gpu": 74.03,
           "replicated_gb_per_gpu": 3.11, "draft_gb_per_gpu": 0.38, "kv_pool_gb_per_gpu": 8.05,
           "kv_bytes_per_token": 70272, "draft_kv_bytes_per_token": 2560, "kv_cache_dtype": "auto (bf16)",
           "pool_tokens": 110581, "context_length": 65536, "concurrent_full_requests": 1.69}
gpus:
  description: GPU ids of the instance (CUDA_VISIBLE_DEVICES).
  returned: when state is present
  type: list
  elements: int
gpu_memory_gib:
  description: Memory per GPU used by the fit check (given or detected).
  returned: when state is present
  type: float
min_accept_length:
  description: O(min_accept_length), for the role's readiness check of a speculative instance.
  returned: when state is present
  type: float
  sample: 1.0
boot:
  description:
    - Boot order of the unit (see the module_utils sglang_unit "Boot order" comment) and the host-wide files the role
      installs for it; the unit C(Wants=)/C(After=) the units in C(after) and C(RequiresMountsFor=) the paths in
      C(requires_mounts_for).
    - C(uvm_loader_content) (a root oneshot running C(nvidia-modprobe -u -c=0), verified like the unit) when the host has
      nvidia-modprobe; C(modules_load_content) (C(nvidia-uvm)) when the NVIDIA driver is installed; null otherwise.
  returned: when state is present
  type: dict
  sample: {"nvidia_modprobe": "/usr/bin/nvidia-modprobe", "persistenced": true, "driver": true,
           "after": ["ct200-nvidia-uvm.service", "nvidia-persistenced.service"],
           "uvm_loader_path": "/etc/systemd/system/ct200-nvidia-uvm.service", "uvm_loader_content": "...",
           "modules_load_path": "/etc/modules-load.d/ct200-nvidia-uvm.conf", "modules_load_content": "...",
           "requires_mounts_for": ["/models/Kimi-K2.6", "/models/Kimi-K2.6-DFlash", "/opt/sglang/venv"]}
expected_server_info:
  description: Fields C(/server_info) must report once the instance runs.
  returned: when state is present
  type: dict
  sample: {"speculative_algorithm": "DFLASH", "speculative_draft_model_path": "/models/z-lab/Kimi-K2.6-DFlash",
           "speculative_num_draft_tokens": 16, "tp_size": 8}
target:
  description: Introspection of the target (model_type, layers, heads, hybrid and why, quantization, weight bytes).
  returned: when state is present
  type: dict
draft:
  description: Introspection of the drafter, including its C(dflash) block size.
  returned: when a speculative algorithm is set
  type: dict
gpu_detection:
  description: Outcome of the nvidia-smi query (C(ok), or why no GPU was found).
  returned: when the spec is refused
  type: str
problems:
  description: Every refusal, one message each.
  returned: when the spec is refused
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.ct200.deploy.plugins.module_utils.sglang_deploy import AnsibleHost, DeployError, plan
from ansible_collections.ct200.deploy.plugins.module_utils.sglang_spec import ARGUMENT_SPEC, redact_params


def main():
    module = AnsibleModule(
        argument_spec=ARGUMENT_SPEC,
        required_if=[("state", "present", ["target"])],
        supports_check_mode=True,
    )
    try:
        result = plan(AnsibleHost(module), module.params)
    except DeployError as exc:
        redact_params(module.params)  # a refused token must not come back in 'invocation'
        module.fail_json(msg=exc.message, **exc.extra)
    redact_params(module.params)
    for warning in result.pop("warnings", []):
        module.warn(warning)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
