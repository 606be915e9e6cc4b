# SPDX-License-Identifier: Apache-2.0
"""ct200.deploy.host_facts end to end (in-process main()): health checks and the runtime proof join failed_checks.

nvidia-smi is a TEST-ONLY script printing the CT200-shaped fixtures (tests/unit/fixtures/gpu, built from the real
driver's formats); the runtime proof runs for real with the CPU SGLang venv's python, on the GPU path."""
import glob
import os
import tempfile

import pytest

from modhelper import run_module
from ansible_collections.ct200.deploy.plugins.modules import host_facts as module

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIX = os.path.join(REPO, "tests", "unit", "fixtures", "gpu")
VENV_PYTHON = os.path.join(REPO, ".cache", "sglang-venv-0.5.23", "bin", "python")
FAKE_SMI = """#!/bin/sh
# TEST ONLY: an 8-GPU CT200 as recorded in the fixtures (the GPU is the one thing mocked)
F=%s
case "$1" in
  --query-gpu=index,name,uuid,*) cat "$F/ct200-query-gpu.csv" ;;
  --query-gpu=*) awk -F', ' '{print $1", "$2", "$4", "$6", "$7}' "$F/ct200-query-gpu.csv" ;;
  -q) cat "$F/ct200-q-rowremap.txt" ;;
  topo) cat "$F/ct200-topo-p2p-r.txt" ;;
  *) echo "| NVIDIA-SMI 580.95.05      Driver Version: 580.95.05      CUDA Version: 13.0     |" ;;
esac
"""


@pytest.fixture
def fake_smi(tmp_path):
    path = tmp_path / "nvidia-smi"
    path.write_text(FAKE_SMI % FIX)
    path.chmod(0o755)
    return str(path)


def test_health_failures_join_failed_checks_with_their_remedy(fake_smi, tmp_path):
    failed, result = run_module(module.main, {"nvidia_smi": fake_smi, "sysfs_root": str(tmp_path), "gpus_needed": 8,
                                              "expect_compute_cap": "12.0", "cuda_home": str(tmp_path / "cuda")})
    assert not failed and result["gpu_count"] == 8
    checks = {c["check"]: c for c in result["health_checks"]}
    assert checks["compute_cap"]["ok"] and checks["compute_cap"]["value"]["7"] == "12.0"
    names = [c["check"] for c in result["failed_checks"]]
    assert "p2p" in names and "gpu_memory" in names
    p2p = [c for c in result["failed_checks"] if c["check"] == "p2p"][0]
    assert "GPU0-GPU4 CNS" in p2p["cause"] and "NCCL_P2P_DISABLE=1" in p2p["fix"]
    assert result["runtime_proof"] is None
    failed, result = run_module(module.main, {"nvidia_smi": fake_smi, "sysfs_root": str(tmp_path), "gpus_needed": 8,
                                              "nccl_p2p_disable": True, "health": True})
    assert "p2p" not in [c["check"] for c in result["failed_checks"]]


def test_runtime_proof_on_the_gpu_path_refuses_the_cpu_venv(fake_smi, tmp_path):
    if not os.access(VENV_PYTHON, os.X_OK):
        pytest.skip("no SGLang 0.5.23 parse venv at %s" % VENV_PYTHON)
    before = set(glob.glob(os.path.join(tempfile.gettempdir(), "ct200-runtime-proof-*")))
    failed, result = run_module(module.main, {"nvidia_smi": fake_smi, "sysfs_root": str(tmp_path), "health": False,
                                              "sglang_python": VENV_PYTHON, "runtime_proof": True,
                                              "cuda_home": str(tmp_path / "cuda")})
    assert not failed and result["health_checks"] == []
    proof = result["runtime_proof"]
    assert proof["ok"] is False and "observations" not in proof
    names = [c["check"] for c in result["failed_checks"]]
    assert {"pip_check", "torch_cuda", "nvcc", "cuda_devices", "sgl_kernel"} <= set(names)
    torch = [c for c in result["failed_checks"] if c["check"] == "torch_cuda"][0]
    assert "torch 2.13.0+cpu is a CPU build" in torch["cause"] and "cu130" in torch["fix"]
    assert set(glob.glob(os.path.join(tempfile.gettempdir(), "ct200-runtime-proof-*"))) <= before  # removed


def test_no_venv_means_nothing_to_prove(tmp_path):
    failed, result = run_module(module.main, {"nvidia_smi": str(tmp_path / "absent"), "allow_no_gpu": True,
                                              "sglang_python": str(tmp_path / "none/bin/python"), "runtime_proof": True})
    assert not failed
    assert [c["check"] for c in result["failed_checks"]] == ["runtime_proof"]
    assert "ct200 deploy --tags sglang_runtime" in result["failed_checks"][0]["fix"]
