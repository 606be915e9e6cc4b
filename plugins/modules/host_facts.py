#!/usr/bin/python
# -*- coding: utf-8 -*-
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

DOCUMENTATION = r"""
---
module: host_facts
short_description: GPU, driver, CUDA, NUMA and SGLang runtime facts of a host, with a serving preflight verdict
version_added: "0.2.0"
description:
  - Reads, and changes nothing, C(nvidia-smi) (GPU index, model, memory, PCI bus id, driver version and the CUDA
    version the driver supports), the NUMA node of each GPU from sysfs (C(/sys/bus/pci/devices/BDF/numa_node)),
    the number of NUMA nodes, C(CUDA_HOME/bin/nvcc --version), and the SGLang installed in O(sglang_python)'s venv
    (version and flag dialect, probed with SGLang's own parser like M(ct200.deploy.sglang_service) does).
  - Evaluates whether the host can serve O(sglang_version) with O(gpus_needed) GPUs on sm_120 (driver, CUDA, nvcc)
    and returns the failed checks with cause and fix in RV(failed_checks); it never fails because of them, so a
    preflight can report every host in one table.
  - A host without GPUs fails the C(gpus) check unless O(allow_no_gpu=true) (CPU sandbox with the serving stand-in).
author: ct200-deploy developers (@ct200-deploy)
options:
  nvidia_smi:
    description: Name (looked up in C(PATH)) or absolute path of C(nvidia-smi).
    type: str
    default: nvidia-smi
  sysfs_root:
    description: Where sysfs is mounted.
    type: path
    default: /sys
  cuda_home:
    description: CUDA toolkit whose C(bin/nvcc) SGLang's JIT uses.
    type: path
    default: /usr/local/cuda
  sglang_python:
    description: Interpreter of the SGLang venv. Omit to skip the SGLang probe.
    type: path
  sglang_cache_dir:
    description: Cache of probed SGLang flag manifests (shared with M(ct200.deploy.sglang_service)); not written in check mode.
    type: path
  sglang_version:
    description: SGLang version that will serve (selects the driver/CUDA minimums).
    type: str
  gpus_needed:
    description: GPUs the instances of this host need (sum of tp x pp).
    type: int
    default: 0
  allow_no_gpu:
    description: Accept a host without GPUs (only for a CPU sandbox that runs the serving stand-in).
    type: bool
    default: false
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
  platform:
    support: full
    platforms: posix
"""

EXAMPLES = r"""
- name: What this host has, and whether it can serve SGLang 0.5.23 with 8 GPUs
  ct200.deploy.host_facts:
    sglang_python: /opt/sglang/venv/bin/python
    sglang_version: "0.5.23"
    gpus_needed: 8
  register: facts
"""

RETURN = r"""
gpus:
  description: One entry per GPU.
  returned: always
  type: list
  elements: dict
  sample:
    - index: 0
      name: NVIDIA RTX PRO 6000 Blackwell Server Edition
      memory_mib: 97887
      memory_gib: 95.6
      pci_bus_id: "00000000:17:00.0"
      numa_node: 0
gpu_count:
  description: Number of GPUs (0 when nvidia-smi is absent).
  returned: always
  type: int
gpu_numa:
  description: GPU index -> NUMA node (null when sysfs does not say).
  returned: always
  type: dict
numa_nodes:
  description: NUMA nodes of the host (from C(/sys/devices/system/node)).
  returned: always
  type: int
driver_version:
  description: NVIDIA driver version, or null.
  returned: always
  type: str
cuda_driver_version:
  description: Highest CUDA version the driver supports, or null.
  returned: always
  type: str
nvcc_version:
  description: Release of C(CUDA_HOME/bin/nvcc), or null.
  returned: always
  type: str
sglang:
  description: The SGLang of O(sglang_python) (installed, version, dflash, ddtree dialect, error).
  returned: always
  type: dict
requirements:
  description: Driver, CUDA and nvcc minimums used for O(sglang_version).
  returned: always
  type: dict
failed_checks:
  description: Failed checks, each with C(check), C(cause) and C(fix). Empty when the host can serve.
  returned: always
  type: list
  elements: dict
"""

from ansible.module_utils.basic import AnsibleModule  # noqa: E402

from ansible_collections.ct200.deploy.plugins.module_utils import host_facts  # noqa: E402


def main():
    module = AnsibleModule(
        argument_spec=dict(
            nvidia_smi=dict(type="str", default="nvidia-smi"),
            sysfs_root=dict(type="path", default="/sys"),
            cuda_home=dict(type="path", default="/usr/local/cuda"),
            sglang_python=dict(type="path"),
            sglang_cache_dir=dict(type="path"),
            sglang_version=dict(type="str"),
            gpus_needed=dict(type="int", default=0),
            allow_no_gpu=dict(type="bool", default=False),
        ),
        supports_check_mode=True,
    )
    params = module.params

    def run(argv):
        return module.run_command(argv, environ_update={"LC_ALL": "C"})

    facts = host_facts.gpu_facts(run, params["nvidia_smi"], params["sysfs_root"])
    facts.update(host_facts.nvcc_facts(run, params["cuda_home"]))
    facts["numa_nodes"] = host_facts.numa_nodes(params["sysfs_root"])
    facts["gpu_numa"] = {str(g["index"]): g["numa_node"] for g in facts["gpus"]}
    facts["sglang"] = host_facts.sglang_facts(run, params["sglang_python"], params["sglang_cache_dir"],
                                              write_cache=not module.check_mode)
    want = {"sglang_version": params["sglang_version"] or facts["sglang"].get("version"),
            "gpus_needed": params["gpus_needed"], "allow_no_gpu": params["allow_no_gpu"]}
    facts["requirements"] = host_facts.requirements_for(want["sglang_version"])
    facts["failed_checks"] = host_facts.check(facts, want)
    module.exit_json(changed=False, **facts)


if __name__ == "__main__":
    main()
