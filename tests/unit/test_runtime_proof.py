# SPDX-License-Identifier: Apache-2.0
"""Runtime proof (module_utils/runtime_proof.py): the GPU path on recorded observations, the CPU path for real.

The real runs use the CPU-only SGLang 0.5.23 venv (.cache/sglang-venv-0.5.23: sglang --no-deps, torch 2.13.0+cpu),
which has no Ansible: they also prove the script runs on its own with a venv's python."""
import json
import os
import subprocess

import pytest

from ansible_collections.ct200.deploy.plugins.module_utils import runtime_proof as rp

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
SCRIPT = os.path.join(REPO, "plugins", "module_utils", "runtime_proof.py")
FIX = os.path.join(HERE, "fixtures", "gpu")
CT200_ARCH = ["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"]


def venv_python():
    python = os.path.join(os.environ.get("CT200_SGLANG_VENV_0_5_23", os.path.join(REPO, ".cache", "sglang-venv-0.5.23")),
                          "bin", "python")
    if not os.access(python, os.X_OK):
        if os.environ.get("CI"):
            pytest.fail("no SGLang 0.5.23 parse venv at %s (scripts/sglang-parse-venv.sh 0.5.23)" % python)
        pytest.skip("no SGLang 0.5.23 parse venv at %s" % python)
    return python


def recorded_h200():
    """The lead's real H200: torch 2.11.0+cu130, CUDA 13.0, arch list up to sm_120, capability (9, 0), nvcc 13.0."""
    with open(os.path.join(FIX, "real-h200-torch.txt"), encoding="utf-8") as handle:
        version, cuda = handle.read().split()[:2]
    with open(os.path.join(FIX, "real-h200-nvcc-version.txt"), encoding="utf-8") as handle:
        nvcc = handle.read()
    return {"python": "/opt/sglang/venv/bin/python", "pip_check": {"rc": 0, "output": "No broken requirements found.\n"},
            "torch": {"error": None, "version": version, "cuda": cuda, "arch_list": CT200_ARCH, "available": True,
                      "devices": [{"index": 0, "name": "NVIDIA H200", "capability": [9, 0]}], "cuda_error": None},
            "nvcc": {"path": "/usr/local/cuda/bin/nvcc", "cuda_home": "/usr/local/cuda", "output": nvcc},
            "sgl_kernel": {"error": None, "version": "0.4.10"}, "ops": [{"index": 0, "value": 32.0, "error": None}]}


def ct200(**torch_over):
    obs = recorded_h200()
    obs["torch"]["devices"] = [{"index": i, "name": "NVIDIA RTX PRO 6000 Blackwell Server Edition",
                                "capability": [12, 0]} for i in range(8)]
    obs["ops"] = [{"index": i, "value": 32.0, "error": None} for i in range(8)]
    obs["torch"].update(torch_over)
    return obs


def by_check(results):
    return {r["check"]: r for r in results}


def test_the_recorded_h200_and_a_ct200_pass_every_check():
    for obs in (recorded_h200(), ct200()):
        results = rp.evaluate(obs)
        assert [r["check"] for r in results] == ["pip_check", "torch_cuda", "nvcc", "cuda_devices", "arch", "cuda_op",
                                                 "sgl_kernel"]
        assert all(r["ok"] and r["proven"] for r in results), results
    assert by_check(rp.evaluate(recorded_h200()))["torch_cuda"]["value"] == "torch 2.11.0+cu130, CUDA 13.0"


def test_nvcc_12_8_with_a_cu13_torch_is_refused_with_the_fix():
    obs = ct200()
    obs["nvcc"]["output"] = obs["nvcc"]["output"].replace("release 13.0, V13.0.88", "release 12.8, V12.8.93")
    nvcc = by_check(rp.evaluate(obs))["nvcc"]
    assert not nvcc["ok"] and "nvcc 12.8" in nvcc["cause"] and "CUDA 13.0 build" in nvcc["cause"]
    assert "install the CUDA 13.x toolkit" in nvcc["fix"] and "sglang_runtime_cuda_home" in nvcc["fix"]


def test_a_cu12_torch_and_an_arch_list_without_sm_120_are_refused():
    checks = by_check(rp.evaluate(ct200(version="2.7.1+cu126", cuda="12.6", arch_list=["sm_50", "sm_80", "sm_90"])))
    assert not checks["torch_cuda"]["ok"] and "a CUDA 12.6 build" in checks["torch_cuda"]["cause"]
    assert not checks["arch"]["ok"] and "the GPUs are sm_120" in checks["arch"]["cause"]
    assert "sm_120" in checks["arch"]["fix"]


def test_no_gpu_visible_a_failed_op_and_a_broken_kernel_import():
    obs = ct200(devices=[], available=False, cuda_error="RuntimeError: CUDA driver initialization failed")
    obs["ops"] = []
    checks = by_check(rp.evaluate(obs))
    assert not checks["cuda_devices"]["ok"] and "/dev/nvidia-uvm" in checks["cuda_devices"]["fix"]
    obs = ct200()
    obs["ops"][5] = {"index": 5, "value": None, "error": "RuntimeError: CUDA error: unspecified launch failure"}
    obs["sgl_kernel"] = {"error": "ImportError: libcuda.so.1: cannot open shared object file"}
    checks = by_check(rp.evaluate(obs))
    assert not checks["cuda_op"]["ok"] and "GPU(s) [5]" in checks["cuda_op"]["cause"]
    assert not checks["sgl_kernel"]["ok"] and "libcuda.so.1" in checks["sgl_kernel"]["cause"]


def run_script(*args, timeout=300):
    proc = subprocess.run([venv_python(), SCRIPT, "--json"] + list(args), capture_output=True, text=True,
                          timeout=timeout, check=False, env=dict(os.environ, CUDA_HOME="/nonexistent-cuda"))
    return proc.returncode, json.loads(proc.stdout)


def test_the_cpu_venv_is_refused_on_the_gpu_path_with_causes():
    """Without --standin the sandbox's own venv fails: --no-deps set, CPU torch, no sgl_kernel, no GPU."""
    rc, report = run_script()
    checks = by_check(report["checks"])
    assert rc == 1 and not report["ok"]
    assert not checks["pip_check"]["ok"] and "sglang 0.5.23 requires" in checks["pip_check"]["cause"]
    assert "torch 2.13.0+cpu is a CPU build" in checks["torch_cuda"]["cause"]
    assert not checks["nvcc"]["ok"] and "no nvcc at /nonexistent-cuda/bin" in checks["nvcc"]["cause"]
    assert not checks["sgl_kernel"]["ok"] and not checks["cuda_devices"]["ok"]


def test_the_standin_reports_gpu_checks_not_proven_and_runs_a_real_gloo_allreduce():
    rc, report = run_script("--standin", "--allreduce", "--allreduce-backend", "gloo", "--allreduce-world", "2",
                            "--allreduce-mib", "1", "--allreduce-timeout", "120")
    checks = by_check(report["checks"])
    assert rc == 0 and report["ok"] and not report["proven"]
    assert [c for c, r in checks.items() if not r["proven"]] == ["pip_check", "torch_cuda", "nvcc", "cuda_devices",
                                                                 "arch", "cuda_op", "sgl_kernel"]
    assert checks["allreduce"]["ok"] and checks["allreduce"]["proven"]
    assert "1 MiB in" in checks["allreduce"]["value"]["as_configured"]
    ranks = report["observations"]["allreduce"]["first"]["ranks"]
    assert sorted(r["rank"] for r in ranks) == [0, 1] and all(r["right"] for r in ranks)


def test_a_hung_allreduce_is_killed_and_reported(monkeypatch):
    monkeypatch.setattr(rp.sys, "executable", venv_python())
    run = rp.run_allreduce(2, timeout=1, mib=1, backend="gloo", script=SCRIPT)
    assert run["hung"] and run["ranks"] == []
    verdict = rp.evaluate_allreduce(run)
    assert not verdict["ok"] and "did not finish in 1 s (hung)" in verdict["cause"]


def _run(ok, world=8, hung=False):
    ranks = [{"rank": r, "right": ok, "ms": 4.2, "busbw_gbps": 28.0} for r in range(world)] if not hung else []
    return {"world": world, "hung": hung, "errors": [], "ranks": ranks, "timeout": 60, "mib": 64}


def test_allreduce_verdicts_name_the_remedy():
    assert rp.evaluate_allreduce(_run(True))["ok"]
    fabric = rp.evaluate_allreduce(_run(False, hung=True), _run(True))
    assert not fabric["ok"] and "passes with NCCL_P2P_DISABLE=1" in fabric["cause"]
    assert "fix ACS/the IOMMU" in fabric["fix"] and "ct200_nccl_p2p_disable: true" in fabric["fix"]
    broken = rp.evaluate_allreduce(_run(False), _run(False))
    assert "returned wrong sums" in broken["cause"] and "also with NCCL_P2P_DISABLE=1" in broken["cause"]
    assert "take the host out of service" in broken["fix"]
    assert rp.evaluate_allreduce(_run(True, world=1))["value"] == "one GPU: nothing to reduce"
