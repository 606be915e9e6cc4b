# -*- coding: utf-8 -*-
# SPDX-License-Identifier: Apache-2.0
"""GPU, driver, CUDA, NUMA and SGLang-runtime facts of one host, and the
preflight verdict on them (PRIVATE to the collection; used by host_facts).

Everything is read, nothing is written: nvidia-smi (when present), sysfs
(``/sys/bus/pci/devices/<bdf>/numa_node``, ``/sys/devices/system/node``),
``CUDA_HOME/bin/nvcc --version`` and the SGLang venv's own parser (the same
dialect probe sglang_service uses, module_utils/sglang_flags.py).
"""

from __future__ import annotations

import inspect
import json
import os
import re
import shutil
import tempfile
from typing import Any, Callable, Dict, List, Optional, Tuple

from ansible_collections.ct200.deploy.plugins.module_utils import gpu_health, runtime_proof, sglang_flags
from ansible_collections.ct200.deploy.plugins.module_utils._io import atomic_write

Runner = Callable[[List[str]], Tuple[int, str, str]]

# What the pinned SGLang builds need to run on sm_120 (RTX PRO 6000 Blackwell).
# Sources:
# * sglang 0.5.23 and 0.5.11 wheels, METADATA: Requires-Dist cuda-python>=13.0
#   (0.5.23 also flashinfer_python[cu13], sglang-kernel cu13 builds): the
#   CUDA 13.0 runtime, which needs an R580 driver: NVIDIA CUDA Toolkit Release
#   Notes, Table 3 "CUDA Toolkit and Corresponding Driver Versions":
#   CUDA 13.0 GA >= 580.65.06 (Linux x86_64).
# * sm_120 code generation first shipped in CUDA 12.8 (CUDA 12.8 release notes,
#   "Added support for ... SM_120"); SGLang JIT-compiles Kimi's INT4 MoE kernels
#   with nvcc from CUDA_HOME (0.5.23 kernels/jit/utils/compile/toolchain.py), so
#   the toolkit on the host must be >= 12.8.
RUNTIME_REQUIREMENTS: Dict[str, Dict[str, Any]] = {
    "0.5.23": {"driver": "580.65.06", "cuda": "13.0", "nvcc": "12.8"},
    "0.5.11": {"driver": "580.65.06", "cuda": "13.0", "nvcc": "12.8"},
}
DEFAULT_REQUIREMENTS = {"driver": "580.65.06", "cuda": "13.0", "nvcc": "12.8"}

GPU_QUERY = "index,name,memory.total,pci.bus_id,driver_version"
CUDA_VERSION_RE = re.compile(r"CUDA Version\s*:\s*([0-9]+(?:\.[0-9]+)*)")
NVCC_RE = re.compile(r"release ([0-9]+\.[0-9]+)")
BDF_RE = re.compile(r"^(?:[0-9a-fA-F]{4,8}:)?([0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])\Z")


def version_tuple(text: Optional[str]) -> Tuple[int, ...]:
    parts = re.findall(r"[0-9]+", text or "")
    return tuple(int(p) for p in parts)


def requirements_for(version: Optional[str]) -> Dict[str, Any]:
    base = re.match(r"^[0-9]+\.[0-9]+\.[0-9]+", version or "")
    return dict(RUNTIME_REQUIREMENTS.get(base.group(0) if base else "", DEFAULT_REQUIREMENTS))


def sysfs_bdf(bus_id: str) -> Optional[str]:
    """nvidia-smi's '00000000:17:00.0' -> sysfs '0000:17:00.0'."""
    match = BDF_RE.match(bus_id.strip())
    if not match:
        return None
    domain = bus_id.strip().split(":")[0] if bus_id.count(":") == 2 else "0"
    return "%04x:%s" % (int(domain, 16), match.group(1).lower())


def numa_node_of(bus_id: str, sysfs_root: str) -> Optional[int]:
    bdf = sysfs_bdf(bus_id)
    if bdf is None:
        return None
    try:
        with open(os.path.join(sysfs_root, "bus/pci/devices", bdf, "numa_node"), "r", encoding="ascii") as handle:
            node = int(handle.read().strip())
    except (OSError, ValueError):
        return None
    return node if node >= 0 else None


def numa_nodes(sysfs_root: str) -> int:
    try:
        names = os.listdir(os.path.join(sysfs_root, "devices/system/node"))
    except OSError:
        return 0
    return len([n for n in names if re.match(r"^node[0-9]+\Z", n)])


def _which(name: str) -> Optional[str]:
    if os.path.isabs(name):
        return name if os.access(name, os.X_OK) else None
    for directory in os.environ.get("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin").split(":"):
        candidate = os.path.join(directory, name)
        if os.access(candidate, os.X_OK):
            return candidate
    return None


def gpu_facts(run: Runner, nvidia_smi: str, sysfs_root: str) -> Dict[str, Any]:
    """GPUs as nvidia-smi lists them, each with the NUMA node of its PCI device."""
    path = _which(nvidia_smi)
    out: Dict[str, Any] = {"nvidia_smi": path, "gpus": [], "gpu_count": 0, "driver_version": None,
                           "cuda_driver_version": None, "gpu_error": None}
    if path is None:
        return out
    rc, text, err = run([path, "--query-gpu=" + GPU_QUERY, "--format=csv,noheader,nounits"])
    if rc != 0:
        out["gpu_error"] = "nvidia-smi failed (rc %s): %s" % (rc, (err or text).strip()[-300:])
        return out
    for line in text.splitlines():
        fields = [f.strip() for f in line.split(",")]
        if len(fields) != 5 or not fields[0].isdigit():
            continue
        memory = int(fields[2]) if fields[2].isdigit() else None
        out["gpus"].append({
            "index": int(fields[0]), "name": fields[1], "memory_mib": memory,
            "memory_gib": round(memory / 1024.0, 1) if memory else None,
            "pci_bus_id": fields[3], "numa_node": numa_node_of(fields[3], sysfs_root),
        })
        out["driver_version"] = fields[4]
    out["gpu_count"] = len(out["gpus"])
    rc, text, _err = run([path])
    match = CUDA_VERSION_RE.search(text or "") if rc == 0 else None
    out["cuda_driver_version"] = match.group(1) if match else None
    return out


def nvcc_facts(run: Runner, cuda_home: str) -> Dict[str, Any]:
    nvcc = os.path.join(cuda_home, "bin", "nvcc")
    if not os.access(nvcc, os.X_OK):
        return {"cuda_home": cuda_home, "nvcc": None, "nvcc_version": None}
    rc, text, _err = run([nvcc, "--version"])
    match = NVCC_RE.search(text or "") if rc == 0 else None
    return {"cuda_home": cuda_home, "nvcc": nvcc, "nvcc_version": match.group(1) if match else None}


def sglang_facts(run: Runner, python: Optional[str], cache_dir: Optional[str], write_cache: bool) -> Dict[str, Any]:
    """Installed SGLang of the venv: version and flag dialect (sglang_flags' probe)."""
    out: Dict[str, Any] = {"python": python, "installed": False, "version": None, "dflash": None,
                           "ddtree": None, "dialect_source": None, "error": None}
    if not python or not os.access(python, os.X_OK):
        out["error"] = "no SGLang venv at %s" % python
        return out
    try:
        dialect = sglang_flags.probe_dialect(run, python, cache_dir, write_cache=write_cache)
    except sglang_flags.DialectError as exc:
        out["error"] = str(exc)
        return out
    described = dialect.describe()
    out.update(installed=True, version=described["version"], dflash=described["dflash"],
               ddtree=described["ddtree"], dialect_source=described["source"])
    return out


def check(facts: Dict[str, Any], want: Dict[str, Any]) -> List[Dict[str, str]]:
    """Failed preflight checks, each {check, cause, fix}. Empty: the host can serve."""
    failed: List[Dict[str, str]] = []
    need = requirements_for(want.get("sglang_version"))
    if facts.get("gpu_error"):
        failed.append({"check": "gpus", "cause": facts["gpu_error"],
                       "fix": "repair the NVIDIA driver installation until nvidia-smi lists the GPUs"})
        return failed
    if facts["gpu_count"] == 0:
        if not want.get("allow_no_gpu"):
            failed.append({"check": "gpus", "cause": "no NVIDIA GPU found (nvidia-smi %s)"
                           % ("absent" if not facts.get("nvidia_smi") else "lists none"),
                           "fix": "install the NVIDIA driver >= %s, or set sglang_runtime_allow_no_gpu: true "
                                  "only for a CPU sandbox that runs the serving stand-in" % need["driver"]})
        return failed
    gpus_needed = int(want.get("gpus_needed") or 0)
    if facts["gpu_count"] < gpus_needed:
        failed.append({"check": "gpus", "cause": "%d GPU(s) found, the instances need %d (tp x pp)"
                       % (facts["gpu_count"], gpus_needed),
                       "fix": "deploy on a host with %d GPUs or lower tp in the instance spec" % gpus_needed})
    if version_tuple(facts.get("driver_version")) < version_tuple(need["driver"]):
        failed.append({"check": "driver", "cause": "NVIDIA driver %s is older than %s, which SGLang %s (CUDA %s "
                       "build) needs on sm_120" % (facts.get("driver_version"), need["driver"],
                                                   want.get("sglang_version"), need["cuda"]),
                       "fix": "upgrade the NVIDIA driver to >= %s (R580 branch or newer)" % need["driver"]})
    if version_tuple(facts.get("cuda_driver_version")) < version_tuple(need["cuda"]):
        failed.append({"check": "cuda", "cause": "the driver supports CUDA %s, SGLang %s needs CUDA %s"
                       % (facts.get("cuda_driver_version"), want.get("sglang_version"), need["cuda"]),
                       "fix": "upgrade the NVIDIA driver to >= %s" % need["driver"]})
    if version_tuple(facts.get("nvcc_version")) < version_tuple(need["nvcc"]):
        failed.append({"check": "nvcc", "cause": "no CUDA toolkit >= %s at %s (found %s); SGLang JIT-compiles "
                       "Kimi's INT4 MoE kernels for sm_120 with its nvcc" % (need["nvcc"], facts.get("cuda_home"),
                                                                             facts.get("nvcc_version") or "none"),
                       "fix": "install the CUDA toolkit >= %s and set sglang_runtime_cuda_home to it" % need["nvcc"]})
    return failed


def health_checks(run: Runner, facts: Dict[str, Any], want: Dict[str, Any], sysfs_root: str) -> List[Dict[str, Any]]:
    """Fabric, GPU health and boot readiness (module_utils/gpu_health.py), one result per check."""
    gathered = gpu_health.gather(run, facts.get("nvidia_smi"), facts.get("gpus") or [], sysfs_root)
    return gpu_health.evaluate(facts, gathered, want)


def prove_runtime(run: Runner, python: Optional[str], cuda_home: str, standin: bool, allreduce: bool,
                  allreduce_timeout: int) -> Dict[str, Any]:
    """Run module_utils/runtime_proof.py with the SGLang venv's python; its JSON report.

    The script is written to a fresh private directory (it re-executes itself, one process per GPU,
    for the all-reduce) and removed afterwards."""
    if not python or not os.access(python, os.X_OK):
        return {"ok": False, "proven": False, "checks": [gpu_health.result(
            "runtime_proof", False, None, "no SGLang venv at %s: nothing to prove" % python,
            "install the runtime first (ct200 deploy --tags sglang_runtime), then re-run ct200 preflight --deep")]}
    workdir = tempfile.mkdtemp(prefix="ct200-runtime-proof-")
    try:
        script = os.path.join(workdir, "runtime_proof.py")
        atomic_write(script, inspect.getsource(runtime_proof), mode=0o600)
        argv = [python, script, "--json", "--cuda-home", cuda_home] + (["--standin"] if standin else [])
        if allreduce:
            argv += ["--allreduce", "--allreduce-timeout", str(int(allreduce_timeout))]
        rc, out, err = run(argv)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    try:
        report = json.loads(out)
        report["checks"] = [dict(c) for c in report["checks"]]
    except (ValueError, KeyError, TypeError):
        return {"ok": False, "proven": False, "checks": [gpu_health.result(
            "runtime_proof", False, None, "the runtime proof did not report (rc %s): %s" % (rc, (err or out).strip()[-500:]),
            "run %s plugins/module_utils/runtime_proof.py on the host and read its output" % python)]}
    report.pop("observations", None)  # pip's and torch's raw text; the checks carry what matters
    return report
