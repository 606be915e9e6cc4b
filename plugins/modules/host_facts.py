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
  - With O(health=true) (default) it also checks the PCIe fabric, GPU health and boot readiness (module_utils/gpu_health.py)
    and returns one result per check in RV(health_checks) - C(tmp_exec) (C(/tmp) not C(noexec)), C(nvidia_uvm_boot)
    (C(nvidia-modprobe) or a modules-load path for C(nvidia_uvm)), C(compute_cap) against O(expect_compute_cap),
    C(persistence_mode), C(gpu_memory) (uncorrectable ECC, pending or failed row remaps, pending retired pages), C(xid)
    (Xid errors in the kernel log since boot), C(p2p) (C(nvidia-smi topo -p2p r)), C(acs) (ACS control of the bridges
    above the GPUs, C(lspci -vvv)), C(iommu) (the GPUs' IOMMU group type) and C(numa) (GPU NUMA nodes against
    O(numa_node)). Failed ones are added to RV(failed_checks); each fix says whether to set C(NCCL_P2P_DISABLE=1)
    (O(nccl_p2p_disable)), fix ACS or the IOMMU, or take the host out of service.
  - With O(runtime_proof=true) it runs module_utils/runtime_proof.py with O(sglang_python) (pip check, torch's CUDA
    major, nvcc's major, the GPUs' arch in torch's arch list, C(import sgl_kernel), a tiny op on each GPU; with
    O(allreduce=true) a timed NCCL all-reduce) and returns its report in RV(runtime_proof). On a host without GPUs
    and O(allow_no_gpu=true) the GPU checks are reported as not proven.
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
  health:
    description: Check the fabric, GPU health and boot readiness (RV(health_checks)).
    type: bool
    default: true
  expect_compute_cap:
    description: Compute capability the rendered backends assume (C(12.0) for the CT200's sm_120); omit to report only.
    type: str
  numa_node:
    description: NUMA node the instance is bound to, if any; its GPUs must sit on it.
    type: int
  instance_gpus:
    description: GPU indexes the instances use (default the first O(gpus_needed)).
    type: list
    elements: int
  nccl_p2p_disable:
    description: The instances run with C(NCCL_P2P_DISABLE=1); P2P, ACS and IOMMU findings are then reported, not failed.
    type: bool
    default: false
  runtime_proof:
    description: Run the runtime proof with O(sglang_python) (RV(runtime_proof)); its failures join RV(failed_checks).
    type: bool
    default: false
  allreduce:
    description: With O(runtime_proof), also time an NCCL all-reduce across the GPUs (one process per GPU).
    type: bool
    default: false
  allreduce_timeout:
    description: Seconds before the all-reduce counts as hung.
    type: int
    default: 60
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
health_checks:
  description: >-
    One result per fabric/health/boot check - C(check), C(ok), C(value), C(cause), C(fix), C(proven) (false - the
    check could not look, e.g. no GPU or no C(lspci); reported as not proven, never as passed).
  returned: always
  type: list
  elements: dict
  sample:
    - {check: p2p, ok: false, proven: true, value: {"0-4": CNS}, cause: "P2P reads are not available between GPU0-GPU4 CNS",
       fix: "set ct200_nccl_p2p_disable: true ..."}
runtime_proof:
  description: The runtime proof's report (C(ok), C(proven), C(checks) as in RV(health_checks)), or null when not run.
  returned: always
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule  # noqa: E402

from ansible_collections.ct200.deploy.plugins.module_utils import gpu_health, host_facts  # noqa: E402


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
            health=dict(type="bool", default=True),
            expect_compute_cap=dict(type="str"),
            numa_node=dict(type="int"),
            instance_gpus=dict(type="list", elements="int"),
            nccl_p2p_disable=dict(type="bool", default=False),
            runtime_proof=dict(type="bool", default=False),
            allreduce=dict(type="bool", default=False),
            allreduce_timeout=dict(type="int", default=60),
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
    want.update(compute_cap=params["expect_compute_cap"], numa_node=params["numa_node"],
                instance_gpus=params["instance_gpus"], nccl_p2p_disable=params["nccl_p2p_disable"])
    facts["health_checks"] = host_facts.health_checks(run, facts, want, params["sysfs_root"]) if params["health"] else []
    facts["runtime_proof"] = None
    if params["runtime_proof"]:
        facts["runtime_proof"] = host_facts.prove_runtime(
            run, params["sglang_python"], params["cuda_home"], standin=facts["gpu_count"] == 0 and params["allow_no_gpu"],
            allreduce=params["allreduce"], allreduce_timeout=params["allreduce_timeout"])
    facts["failed_checks"] += gpu_health.failed(facts["health_checks"] + (facts["runtime_proof"] or {}).get("checks", []))
    module.exit_json(changed=False, **facts)


if __name__ == "__main__":
    main()
