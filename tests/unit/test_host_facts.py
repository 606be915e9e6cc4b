# SPDX-License-Identifier: Apache-2.0
"""host_facts: GPU -> NUMA node from sysfs, and the preflight verdict's numbers."""

from ansible_collections.ct200.deploy.plugins.module_utils import host_facts


def test_nvidia_bus_id_maps_to_the_sysfs_device_and_its_numa_node(tmp_path):
    dev = tmp_path / "bus/pci/devices/0000:9a:00.0"
    dev.mkdir(parents=True)
    (dev / "numa_node").write_text("1\n")
    assert host_facts.sysfs_bdf("00000000:9A:00.0") == "0000:9a:00.0"
    assert host_facts.numa_node_of("00000000:9A:00.0", str(tmp_path)) == 1
    (dev / "numa_node").write_text("-1\n")
    assert host_facts.numa_node_of("00000000:9A:00.0", str(tmp_path)) is None
    assert host_facts.numa_node_of("garbage", str(tmp_path)) is None


def test_gpu_facts_from_nvidia_smi(tmp_path):
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\n")
    smi.chmod(0o755)
    (tmp_path / "bus/pci/devices/0000:17:00.0").mkdir(parents=True)
    (tmp_path / "bus/pci/devices/0000:17:00.0/numa_node").write_text("0")

    def run(argv):
        if len(argv) > 1 and argv[1].startswith("--query-gpu"):
            return 0, "0, NVIDIA RTX PRO 6000, 97887, 00000000:17:00.0, 580.95.05\n", ""
        return 0, "| Driver Version: 580.95.05     CUDA Version: 13.0 |", ""

    facts = host_facts.gpu_facts(run, str(smi), str(tmp_path))
    assert facts["gpu_count"] == 1 and facts["driver_version"] == "580.95.05"
    assert facts["cuda_driver_version"] == "13.0"
    assert facts["gpus"][0]["numa_node"] == 0 and facts["gpus"][0]["memory_gib"] == 95.6


def _facts(**over):
    facts = {"gpu_error": None, "gpu_count": 8, "nvidia_smi": "/usr/bin/nvidia-smi", "driver_version": "580.95.05",
             "cuda_driver_version": "13.0", "nvcc_version": "12.9", "cuda_home": "/usr/local/cuda"}
    facts.update(over)
    return facts


def test_check_passes_a_ct200_and_refuses_each_shortfall_with_numbers():
    want = {"sglang_version": "0.5.23", "gpus_needed": 8}
    assert host_facts.check(_facts(), want) == []
    failed = host_facts.check(_facts(gpu_count=4, driver_version="570.86.10", cuda_driver_version="12.8",
                                     nvcc_version=None), want)
    assert [f["check"] for f in failed] == ["gpus", "driver", "cuda", "nvcc"]
    assert "4 GPU(s) found, the instances need 8" in failed[0]["cause"]
    assert "570.86.10 is older than 580.65.06" in failed[1]["cause"]


def test_no_gpu_is_refused_unless_the_inventory_says_cpu_sandbox():
    no_gpu = _facts(gpu_count=0, nvidia_smi=None)
    assert host_facts.check(no_gpu, {"gpus_needed": 8})[0]["check"] == "gpus"
    assert host_facts.check(no_gpu, {"gpus_needed": 8, "allow_no_gpu": True}) == []
