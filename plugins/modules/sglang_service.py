#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: ct200-deploy developers
# Apache-2.0

from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_service
short_description: Run an SGLang DFlash/DDTree instance as a systemd unit that is validated before it is written
version_added: "0.1.0"
description:
  - Introspects the local target and drafter (C(config.json), nested C(text_config), safetensors index),
    detects the flag dialect of the SGLang installed at O(python) (its own parser, cached per venv) or uses
    the built-in table for O(sglang_version), validates the deployment spec and only then renders the SGLang
    command line and the unit C(sglang@NAME.service) with its EnvironmentFile C(ENV_DIR/NAME.env).
  - Refusals name the numbers and the fix, e.g. weights per GPU against GPU memory x O(mem_fraction_static)
    (Kimi-K2.6 at tp 4 on 96 GiB GPUs), tp against GPU count and attention heads, a DDTree budget above
    block_size-1 on a hybrid (recurrent/linear-attention) target, a drafter that is not DFlash or does not
    match, PP with DFLASH, ports or GPUs shared with another instance on the host, flags the installed
    SGLang does not know, secrets in O(environment). A refused spec writes nothing.
  - The unit is checked with C(systemd-analyze verify) (any warning fails) before it is moved into place
    atomically. daemon-reload and restart happen only when something changed.
  - With O(state=started) the module starts or restarts the unit, waits until it is active (the unit's
    ExecStartPost polls the health endpoint), then reads C(/server_info) and fails unless it reports the
    expected speculative algorithm, draft path and draft-token count; failures carry the last journal lines.
  - The service needs no Hugging Face token (C(HF_HUB_OFFLINE=1), local paths); token-like environment is refused.
author: ct200-deploy developers (@ct200-deploy)
requirements:
  - systemd (C(systemctl), C(systemd-analyze)) on the managed host
  - SGLang in the venv of O(python), unless O(sglang_version) is set
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details: Validates, renders and verifies; returns RV(argv) and RV(unit); writes and starts nothing.
  diff_mode:
    support: full
    details: Diffs of the unit and the environment file (they never contain secrets).
  platform:
    platforms: posix
options:
  name:
    description: Instance name; the unit is C(sglang@NAME.service), the environment file C(ENV_DIR/NAME.env).
    type: str
    required: true
  state:
    description:
      - C(present) writes the files (and reports RV(restart_required)); C(started) also starts or restarts and
        proves the instance; C(stopped) stops it; C(absent) stops, disables and removes it.
    type: str
    choices: [present, started, stopped, absent]
    default: started
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
  gpu_memory_gib:
    description: Memory of one GPU in GiB. Detected with C(nvidia-smi) when omitted (required where there is no GPU).
    type: float
  mem_fraction_static:
    description: C(--mem-fraction-static); weights per GPU must fit in GPU memory x this fraction.
    type: float
    default: 0.85
  port:
    description: HTTP port (C(--port)); must differ from every other instance on the host.
    type: int
    default: 30000
  host:
    description: Listen address (C(--host)).
    type: str
    default: 127.0.0.1
  nccl_port:
    description: C(--nccl-port) (random when unset).
    type: int
  served_model_name:
    description: C(--served-model-name).
    type: str
  context_length:
    description: C(--context-length); refused above the target's C(max_position_embeddings).
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
  chunked_prefill_size:
    description: C(--chunked-prefill-size).
    type: int
  max_running_requests:
    description: C(--max-running-requests).
    type: int
  cuda_graph_max_bs:
    description: CUDA graph max batch size (0.5.11 C(--cuda-graph-max-bs), 0.5.23 C(--cuda-graph-max-bs-decode)).
    type: int
  kv_cache_dtype:
    description: C(--kv-cache-dtype).
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
    description: Interpreter of the SGLang venv on the host; runs SGLang and the readiness poll.
    type: path
    default: /opt/sglang/venv/bin/python
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
    description: Directory of the per-instance environment files and the readiness script.
    type: path
    default: /etc/sglang
  cache_dir:
    description: Cache of the probed SGLang flag manifests (one file per venv and version).
    type: path
    default: /var/cache/ct200-sglang
  service_user:
    description: Dedicated user the service runs as (must exist; the role creates it).
    type: str
    default: sglang
  service_group:
    description: Group of the service. Defaults to O(service_user).
    type: str
  numa_node:
    description: Bind CPU and memory to this NUMA node (C(numactl) when installed, else systemd C(NUMAPolicy)).
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
    description: C(TimeoutStartSec=) and the readiness poll deadline, in seconds (weight load + warm-up).
    type: int
    default: 2400
  stop_timeout:
    description: C(TimeoutStopSec=) in seconds (SGLang drains without limit on SIGTERM).
    type: int
    default: 180
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
    description: Endpoint the readiness poll and the module wait for.
    type: str
    default: /health_generate
  wait_timeout:
    description: How long the module waits for the unit to become active, in seconds. Defaults to O(start_timeout) + 60.
    type: int
  check_server_info:
    description: After start, compare C(/server_info) with the rendered spec and fail on a mismatch.
    type: bool
    default: true
  enabled:
    description: Enable the unit at boot. Defaults to true with O(state=started), unchanged otherwise.
    type: bool
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
    description: Run C(systemd-analyze verify) on the rendered unit before writing it.
    type: bool
    default: true
notes:
  - The flag manifest of a venv is cached in O(cache_dir) keyed by interpreter path, SGLang version and
    dist-info mtime; a reinstall invalidates it. Check mode does not write the cache.
  - With O(state=absent), RV(argv) and RV(unit) are empty.
seealso:
  - name: SGLang server arguments
    description: Upstream documentation of the flags.
    link: https://docs.sglang.io/
"""

EXAMPLES = r"""
- name: Kimi-K2.6 with DFlash on 8 GPUs
  ct200.deploy.sglang_service:
    name: kimi
    target: /models/moonshotai/Kimi-K2.6
    draft: /models/z-lab/Kimi-K2.6-DFlash
    speculative:
      algorithm: dflash
      draft_attention_backend: triton
    tp: 8
    served_model_name: kimi-k2.6
    attention_backend: triton
    context_length: 131072
    chunked_prefill_size: 16384
    max_running_requests: 16
    cuda_graph_max_bs: 16
    enable_metrics: true
    extra_args: [--watchdog-timeout, "600"]
    environment:
      OMP_NUM_THREADS: "8"
    python: /opt/sglang/venv/bin/python

- name: Review the plan for SGLang 0.5.11 before it is installed
  ct200.deploy.sglang_service:
    name: kimi
    target: /models/moonshotai/Kimi-K2.6
    draft: /models/z-lab/Kimi-K2.6-DFlash
    speculative: {algorithm: dflash}
    tp: 8
    gpu_memory_gib: 96
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
    numa_node: "{{ item.numa }}"
    port: "{{ item.port }}"
  loop:
    - {name: a, gpus: [0, 1, 2, 3], numa: 0, port: 30000}
    - {name: b, gpus: [4, 5, 6, 7], numa: 1, port: 30001}
"""

RETURN = r"""
argv:
  description: The SGLang command line as a list (interpreter first). Empty with O(state=absent).
  returned: always
  type: list
  elements: str
  sample: ["/opt/sglang/venv/bin/python", "-m", "sglang.launch_server", "--model-path", "/models/moonshotai/Kimi-K2.6", "--tp-size", "8"]
unit:
  description: The rendered unit text (also in check mode). Empty with O(state=absent).
  returned: always
  type: str
env_file:
  description: The rendered EnvironmentFile text.
  returned: when state is not absent
  type: str
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
changed_files:
  description: Files that were (or in check mode would be) written.
  returned: when state is not absent
  type: list
  elements: str
dialect:
  description: The SGLang build the line was rendered for (version, source probe/cache/static, DDTree dialect, chosen spellings).
  returned: when state is not absent
  type: dict
  sample: {"version": "0.5.23", "source": "cache", "ddtree": null, "dflash": true}
gpus:
  description: GPU ids of the instance (CUDA_VISIBLE_DEVICES).
  returned: when state is not absent
  type: list
  elements: int
gpu_memory_gib:
  description: Memory per GPU used by the memory check (given or detected).
  returned: when state is not absent
  type: float
target:
  description: Introspection of the target (model_type, layers, heads, hybrid and why, quantization, weight bytes).
  returned: when state is not absent
  type: dict
draft:
  description: Introspection of the drafter, including its C(dflash) block size.
  returned: when a speculative algorithm is set
  type: dict
expected_server_info:
  description: Fields C(/server_info) must report.
  returned: when state is not absent
  type: dict
  sample: {"speculative_algorithm": "DFLASH", "speculative_draft_model_path": "/models/z-lab/Kimi-K2.6-DFlash",
           "speculative_num_draft_tokens": 16, "tp_size": 8}
server_info:
  description: The checked fields as the running server reported them.
  returned: when state is started and the check ran
  type: dict
action:
  description: What was (or would be) done to the unit (start, restart or null).
  returned: when state is started
  type: str
restart_required:
  description: With O(state=present), whether the running instance runs an older unit or environment.
  returned: when state is present
  type: bool
journal:
  description: Last 50 journal lines of the unit.
  returned: on failure after the unit was started
  type: list
  elements: str
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

from ansible_collections.ct200.deploy.plugins.module_utils.sglang_deploy import AnsibleHost, DeployError, deploy
from ansible_collections.ct200.deploy.plugins.module_utils.sglang_spec import ARGUMENT_SPEC, redact_params


def main():
    module = AnsibleModule(
        argument_spec=ARGUMENT_SPEC,
        required_if=[("state", "present", ["target"]), ("state", "started", ["target"]),
                     ("state", "stopped", ["target"])],
        supports_check_mode=True,
    )
    try:
        result = deploy(AnsibleHost(module), module.params)
    except DeployError as exc:
        redact_params(module.params)  # a refused token must not come back in 'invocation'
        module.fail_json(msg=exc.message, **exc.extra)
    redact_params(module.params)
    warnings = result.pop("warnings", [])
    for warning in warnings:
        module.warn(warning)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
