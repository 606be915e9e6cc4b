# -*- coding: utf-8 -*-
# SPDX-License-Identifier: Apache-2.0
"""Runtime proof of an SGLang venv on its GPU host, runnable on its own with the venv's python.

    <venv>/bin/python plugins/module_utils/runtime_proof.py --json [--allreduce] [--cuda-home DIR]

Needs only the standard library and the venv's torch (no Ansible). It proves, each with a cause
and a fix when it fails:

* ``pip_check``: ``pip check`` finds pip's installed set consistent (the real dependency pins);
* ``torch_cuda``: torch is a CUDA build of the expected major (13: sglang-kernel 0.4.10 and
  flashinfer_python[cu13] are CUDA 13 builds);
* ``nvcc``: CUDA_HOME's nvcc has that same major (flashinfer cu13 JIT-compiles against the CUDA 13
  runtime; nvcc 12.8 with a cu13 torch is refused);
* ``cuda_devices``: torch sees the GPUs (cuInit worked: /dev/nvidia-uvm existed);
* ``arch``: every GPU's compute capability is in ``torch.cuda.get_arch_list()``;
* ``sgl_kernel``: ``import sgl_kernel`` works;
* ``cuda_op``: one tiny op runs and returns the right value on each GPU;
* ``allreduce`` (``--allreduce``): a timed NCCL all-reduce across the visible GPUs, one process per
  GPU, with the result checked; on failure it is re-run with ``NCCL_P2P_DISABLE=1`` to tell a
  fabric problem (set NCCL_P2P_DISABLE=1 or fix ACS/the IOMMU) from a broken host (out of service).

``--standin`` is the CPU sandbox: what needs a GPU is reported ``proven: false``, never as passed.
Exit status: 0 every check ok, 1 a check failed, 2 bad arguments. ``observe`` and ``evaluate``
are separate so the GPU path is unit-tested on recorded observations.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import subprocess
import sys
import time

EXPECTED_CUDA_MAJOR = 13
NVCC_RE = re.compile(r"release ([0-9]+)\.([0-9]+)")
TORCH_FIX = ("install the torch build the SGLang pin names for CUDA %d (e.g. pip install torch==<pin> --index-url "
             "https://download.pytorch.org/whl/cu130), or let pip resolve sglang's own pins (sglang_runtime_packages)")
STANDIN = "not proven: CPU stand-in (no GPU on this host)"


def _say(text):
    """A line on stdout: this file runs as a script with the venv's python, not as part of a module."""
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def result(check, ok, value, cause=None, fix=None, proven=True):
    return {"check": check, "ok": bool(ok), "value": value, "cause": cause, "fix": fix, "proven": bool(proven)}


def _run(argv, timeout=120, env=None):
    try:
        proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout, env=env,
                              check=False, universal_newlines=True)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return 127, str(exc)
    return proc.returncode, proc.stdout[-20000:]


# ---------------------------------------------------------------- observing (needs the venv)

def observe_torch():
    out = {"error": None, "version": None, "cuda": None, "arch_list": [], "available": False, "devices": [],
           "cuda_error": None}
    try:
        import torch  # pylint: disable=import-outside-toplevel
    except Exception as exc:  # pylint: disable=broad-except
        out["error"] = "%s: %s" % (type(exc).__name__, exc)
        return out
    out["version"], out["cuda"] = torch.__version__, torch.version.cuda
    try:
        out["available"] = bool(torch.cuda.is_available())
        out["arch_list"] = list(torch.cuda.get_arch_list())
        for index in range(torch.cuda.device_count() if out["available"] else 0):
            out["devices"].append({"index": index, "name": torch.cuda.get_device_name(index),
                                   "capability": list(torch.cuda.get_device_capability(index))})
    except Exception as exc:  # pylint: disable=broad-except
        out["cuda_error"] = "%s: %s" % (type(exc).__name__, exc)
    return out


def observe_ops(devices):
    """One tiny op per GPU: a 16-element tensor doubled and summed on the device (32.0 expected)."""
    import torch  # pylint: disable=import-outside-toplevel

    ops = []
    for dev in devices:
        try:
            value = float((torch.ones(16, device="cuda:%d" % dev["index"]) * 2).sum().item())
            torch.cuda.synchronize(dev["index"])
            ops.append({"index": dev["index"], "value": value, "error": None})
        except Exception as exc:  # pylint: disable=broad-except
            ops.append({"index": dev["index"], "value": None, "error": "%s: %s" % (type(exc).__name__, exc)})
    return ops


def observe_sgl_kernel():
    try:
        import sgl_kernel  # noqa: F401 pylint: disable=import-outside-toplevel,unused-import,import-error
    except Exception as exc:  # pylint: disable=broad-except
        return {"error": "%s: %s" % (type(exc).__name__, str(exc)[:500])}
    return {"error": None, "version": getattr(sgl_kernel, "__version__", None)}


def observe_nvcc(cuda_home):
    nvcc = os.path.join(cuda_home, "bin", "nvcc")
    if not os.access(nvcc, os.X_OK):
        return {"path": None, "cuda_home": cuda_home, "output": None}
    rc, text = _run([nvcc, "--version"], timeout=60)
    return {"path": nvcc, "cuda_home": cuda_home, "output": text if rc == 0 else None}


def observe(cuda_home, standin=False):
    obs = {"python": sys.executable}
    rc, text = _run([sys.executable, "-m", "pip", "check", "--disable-pip-version-check"], timeout=300)
    obs["pip_check"] = {"rc": rc, "output": text}
    obs["torch"] = observe_torch()
    obs["nvcc"] = observe_nvcc(cuda_home)
    obs["sgl_kernel"] = observe_sgl_kernel() if not standin else {"error": None, "skipped": True}
    devices = obs["torch"]["devices"]
    obs["ops"] = observe_ops(devices) if devices else []
    return obs


# ---------------------------------------------------------------- verdicts (pure: unit-tested on recordings)

def _sm(capability):
    return "sm_%d%d" % (capability[0], capability[1])


def _arch_has(arch_list, capability):
    """sm_XY (or its 'a'/'f' variants) or compute_XY PTX that the driver can JIT for this GPU."""
    sm, ptx = _sm(capability), "compute_%d%d" % (capability[0], capability[1])
    return any(a == sm or a in (sm + "a", sm + "f", ptx) for a in arch_list)


def _pip(obs, standin):
    pip = obs["pip_check"]
    lines = [line for line in (pip["output"] or "").splitlines() if line.strip()]
    if pip["rc"] == 0:
        return result("pip_check", True, lines[-1:] or "no broken requirements")
    if standin:
        return result("pip_check", True, lines[:20], proven=False,
                      cause="not proven: the CPU stand-in installs sglang --no-deps beside a CPU torch, so pip's set "
                            "is not the real one (%d problem(s))" % len(lines))
    return result("pip_check", False, lines[:20], "pip check finds the installed set inconsistent: %s"
                  % "; ".join(lines[:5]) + (" (and %d more)" % (len(lines) - 5) if len(lines) > 5 else ""),
                  "install the pinned SGLang with its own dependencies (sglang_runtime_packages), or list every "
                  "missing or conflicting pin in the wheelhouse's requirements file, then re-run the role")


def _torch(obs, cuda_major, standin):
    torch = obs["torch"]
    if torch["error"]:
        return result("torch_cuda", False, None, "torch does not import in %s (%s)" % (obs["python"], torch["error"]),
                      TORCH_FIX % cuda_major)
    value = "torch %s, CUDA %s" % (torch["version"], torch["cuda"])
    if standin:
        return result("torch_cuda", True, value, proven=False, cause=STANDIN)
    major = int(torch["cuda"].split(".")[0]) if torch["cuda"] else None
    if major == cuda_major:
        return result("torch_cuda", True, value)
    what = "a CPU build" if major is None else "a CUDA %s build" % torch["cuda"]
    return result("torch_cuda", False, value, "torch %s is %s; SGLang's sglang-kernel and flashinfer_python[cu%d] "
                  "need a CUDA %d build" % (torch["version"], what, cuda_major, cuda_major), TORCH_FIX % cuda_major)


def _nvcc(obs, cuda_major, standin):
    nvcc = obs["nvcc"]
    match = NVCC_RE.search(nvcc.get("output") or "")
    value = "%s.%s" % match.groups() if match else None
    if standin and value is None:
        return result("nvcc", True, None, proven=False, cause=STANDIN + "; no nvcc at %s" % nvcc["cuda_home"])
    torch_cuda = obs["torch"].get("cuda")
    want = int(torch_cuda.split(".")[0]) if torch_cuda else cuda_major
    if value is not None and int(match.group(1)) == want:
        return result("nvcc", True, "%s (%s)" % (value, nvcc["path"]))
    cause = ("no nvcc at %s/bin" % nvcc["cuda_home"]) if value is None else (
        "nvcc %s at %s, but torch is a CUDA %s build: flashinfer_python[cu%d] JIT-compiles against the CUDA %d "
        "runtime and SGLang's JIT builds Kimi's INT4 MoE kernels with this nvcc" % (
            value, nvcc["path"], torch_cuda or want, want, want))
    return result("nvcc", False, value, cause, "install the CUDA %d.x toolkit and point sglang_runtime_cuda_home at it "
                  "(it becomes the service's CUDA_HOME)" % want)


def _devices(obs, cuda_major, standin):
    torch = obs["torch"]
    if standin:
        return [result(name, True, None, proven=False, cause=STANDIN) for name in ("cuda_devices", "arch", "cuda_op")]
    if not torch["devices"]:
        return [result("cuda_devices", False, 0, "torch sees no GPU (%s)" % (
            torch["cuda_error"] or "torch.cuda.is_available() is false"),
            "check that /dev/nvidia-uvm exists (nvidia-modprobe -u -c=0, or modprobe nvidia_uvm), that the driver "
            "supports CUDA %s (nvidia-smi) and that CUDA_VISIBLE_DEVICES is not empty" % (torch["cuda"] or cuda_major))]
    out = [result("cuda_devices", True, ["%d: %s %s" % (d["index"], d["name"], _sm(d["capability"]))
                                         for d in torch["devices"]])]
    missing = sorted({_sm(d["capability"]) for d in torch["devices"] if not _arch_has(torch["arch_list"], d["capability"])})
    out.append(result("arch", not missing, torch["arch_list"], None if not missing else
                      "the GPUs are %s, which torch %s was not built for (arch list %s)" % (
                          ", ".join(missing), torch["version"], torch["arch_list"]),
                      None if not missing else "install a torch build whose arch list has %s (CUDA 12.8+ wheels "
                      "carry sm_120)" % ", ".join(missing)))
    bad = [o for o in obs["ops"] if o["error"] or o["value"] != 32.0]
    out.append(result("cuda_op", not bad and bool(obs["ops"]), {str(o["index"]): o["value"] for o in obs["ops"]},
                      None if not bad else "a tiny CUDA op failed on GPU(s) %s: %s" % (
                          [o["index"] for o in bad],
                          "; ".join((o["error"] or "got %s, want 32.0" % o["value"])[:300] for o in bad[:3])),
                      None if not bad else "check the GPU(s) with nvidia-smi -q and the kernel log (Xid); if they "
                      "are healthy, reinstall the torch/CUDA build; otherwise take the host out of service"))
    return out


def _sgl_kernel(obs, standin):
    kernel = obs["sgl_kernel"]
    if standin:
        return result("sgl_kernel", True, None, proven=False, cause=STANDIN + " (sglang-kernel is a CUDA build)")
    if kernel["error"]:
        return result("sgl_kernel", False, None, "import sgl_kernel fails: %s" % kernel["error"],
                      "install the sglang-kernel release the SGLang pin names (0.4.10 for 0.5.23), built for CUDA "
                      "13 with this GPU's architecture")
    return result("sgl_kernel", True, kernel.get("version") or "imported")


def evaluate(obs, cuda_major=EXPECTED_CUDA_MAJOR, standin=False):
    """One result per check from observe()'s dict (see the module docstring)."""
    return ([_pip(obs, standin), _torch(obs, cuda_major, standin), _nvcc(obs, cuda_major, standin)]
            + _devices(obs, cuda_major, standin) + [_sgl_kernel(obs, standin)])


# ---------------------------------------------------------------- all-reduce (one process per GPU)

def _free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def allreduce_worker(rank, world, port, mib, backend, timeout):
    """One rank: init the group, check one all-reduce's values, time 5 more; print one JSON line."""
    import datetime  # pylint: disable=import-outside-toplevel
    import torch  # pylint: disable=import-outside-toplevel
    import torch.distributed as dist  # pylint: disable=import-outside-toplevel

    device = torch.device("cuda", rank) if backend == "nccl" else torch.device("cpu")
    if backend == "nccl":
        torch.cuda.set_device(rank)
    dist.init_process_group(backend, init_method="tcp://127.0.0.1:%d" % port, rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=timeout))
    numel = max(1, mib * (1 << 20) // 4)
    tensor = torch.full((numel,), float(rank + 1), device=device)
    dist.all_reduce(tensor)
    want = world * (world + 1) / 2.0
    right = bool(torch.all(tensor == want).item())
    ones = torch.ones(numel, device=device)
    if backend == "nccl":
        torch.cuda.synchronize()
    start = time.perf_counter()
    for _call in range(5):
        dist.all_reduce(ones)
    if backend == "nccl":
        torch.cuda.synchronize()
    per_call = (time.perf_counter() - start) / 5
    dist.destroy_process_group()
    bus_gbps = numel * 4 * 2.0 * (world - 1) / world / per_call / 1e9
    _say(json.dumps({"rank": rank, "right": right, "ms": round(per_call * 1e3, 3), "busbw_gbps": round(bus_gbps, 2)}))


def run_allreduce(world, timeout=60, mib=64, backend="nccl", extra_env=None, script=None):
    """Launch ``world`` ranks of this script; kill them all past ``timeout``. Returns an observation dict."""
    port = _free_port()
    env = dict(os.environ, **(extra_env or {}))
    argv = [sys.executable, script or os.path.abspath(__file__), "--allreduce-worker"]
    started = time.monotonic()
    procs = [subprocess.Popen(argv + [str(r), str(world), str(port), str(mib), backend, str(timeout)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, universal_newlines=True)
             for r in range(world)]
    outs, hung = [], False
    for proc in procs:
        left = max(0.1, timeout - (time.monotonic() - started))
        try:
            outs.append(proc.communicate(timeout=left))
        except subprocess.TimeoutExpired:
            hung = True
            break
    if hung:
        for proc in procs:
            proc.kill()
        for proc in procs:
            proc.communicate()
    ranks, errors = [], []
    for proc, (stdout, stderr) in zip(procs, outs):
        line = (stdout or "").strip().splitlines()[-1:] if proc.returncode == 0 else []
        if line:
            ranks.append(json.loads(line[0]))
        else:
            errors.append("rank exited %s: %s" % (proc.returncode, (stderr or "").strip()[-300:]))
    return {"world": world, "backend": backend, "env": extra_env or {}, "hung": hung, "timeout": timeout,
            "seconds": round(time.monotonic() - started, 2), "ranks": ranks, "errors": errors, "mib": mib}


def _passed(run):
    return not run["hung"] and not run["errors"] and len(run["ranks"]) == run["world"] and all(
        r["right"] for r in run["ranks"])


def _summary(run):
    if run["hung"]:
        return "did not finish in %s s (hung)" % run["timeout"]
    if run["errors"] or len(run["ranks"]) != run["world"]:
        return "failed: %s" % "; ".join(run["errors"][:2])
    if not all(r["right"] for r in run["ranks"]):
        return "returned wrong sums (data corrupted on the way)"
    slowest = max(run["ranks"], key=lambda r: r["ms"])
    return "%d MiB in %.2f ms, bus bandwidth %.1f GB/s" % (run["mib"], slowest["ms"], slowest["busbw_gbps"])


def evaluate_allreduce(first, retry=None):
    """The all-reduce verdict: first run as configured; retry (if any) with NCCL_P2P_DISABLE=1."""
    value = {"as_configured": _summary(first)}
    if first["world"] < 2:
        return result("allreduce", True, "one GPU: nothing to reduce")
    if _passed(first):
        return result("allreduce", True, value)
    if retry is not None:
        value["nccl_p2p_disable"] = _summary(retry)
    if retry is not None and _passed(retry):
        return result("allreduce", False, value, "the %d-GPU all-reduce %s, and passes with NCCL_P2P_DISABLE=1: "
                      "peer-to-peer over this PCIe fabric is broken (ACS redirect or IOMMU translation)"
                      % (first["world"], _summary(first)),
                      "fix ACS/the IOMMU (see the acs and iommu checks), or set ct200_nccl_p2p_disable: true "
                      "(renders NCCL_P2P_DISABLE=1), then re-run ct200 preflight --deep")
    return result("allreduce", False, value, "the %d-GPU all-reduce %s%s" % (
        first["world"], _summary(first), (", also with NCCL_P2P_DISABLE=1" if retry is not None else "")),
        "take the host out of service (drain it and --limit it out) and check the GPUs (nvidia-smi -q, Xid in the "
        "kernel log)")


def prove_allreduce(world, timeout, mib=64, backend="nccl", script=None):
    first = run_allreduce(world, timeout, mib, backend, script=script)
    retry = None
    if world >= 2 and not _passed(first) and os.environ.get("NCCL_P2P_DISABLE") != "1" and backend == "nccl":
        retry = run_allreduce(world, timeout, mib, backend, {"NCCL_P2P_DISABLE": "1"}, script=script)
    return evaluate_allreduce(first, retry), {"first": first, "retry": retry}


# ---------------------------------------------------------------- command line

def build_parser():
    parser = argparse.ArgumentParser(description="Prove an SGLang venv's runtime on this GPU host "
                                                 "(run it with the venv's python).")
    parser.add_argument("--json", action="store_true", help="print {checks, ok, proven, observations} as JSON")
    parser.add_argument("--cuda-home", default=os.environ.get("CUDA_HOME", "/usr/local/cuda"),
                        help="CUDA toolkit whose nvcc SGLang's JIT uses (default: $CUDA_HOME or /usr/local/cuda)")
    parser.add_argument("--cuda-major", type=int, default=EXPECTED_CUDA_MAJOR, help="CUDA major torch must be built for")
    parser.add_argument("--standin", action="store_true", help="CPU sandbox: report GPU checks as not proven")
    parser.add_argument("--allreduce", action="store_true", help="also time an NCCL all-reduce across the GPUs")
    parser.add_argument("--allreduce-timeout", type=int, default=60, help="seconds before the all-reduce counts as hung")
    parser.add_argument("--allreduce-mib", type=int, default=64, help="MiB per all-reduce")
    parser.add_argument("--allreduce-backend", choices=["nccl", "gloo"], default="nccl",
                        help="gloo runs the same ranks on CPU (to exercise the launcher without a GPU)")
    parser.add_argument("--allreduce-world", type=int, help="ranks (default: the GPUs torch sees)")
    return parser


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--allreduce-worker"]:
        rank, world, port, mib, backend, timeout = argv[1:7]
        allreduce_worker(int(rank), int(world), int(port), int(mib), backend, int(timeout))
        return 0
    args = build_parser().parse_args(argv)
    obs = observe(args.cuda_home, args.standin)
    checks = evaluate(obs, args.cuda_major, args.standin)
    if args.allreduce:
        world = args.allreduce_world or len(obs["torch"]["devices"])
        if args.standin and args.allreduce_backend == "nccl":
            checks.append(result("allreduce", True, None, proven=False, cause=STANDIN))
        else:
            verdict, obs["allreduce"] = prove_allreduce(world, args.allreduce_timeout, args.allreduce_mib,
                                                        args.allreduce_backend)
            checks.append(verdict)
    ok = all(c["ok"] for c in checks)
    report = {"ok": ok, "proven": all(c["proven"] for c in checks), "checks": checks, "observations": obs}
    if args.json:
        _say(json.dumps(report, indent=2, sort_keys=True))
    else:
        for check in checks:
            state = "ok" if check["ok"] and check["proven"] else ("NOT PROVEN" if check["ok"] else "FAILED")
            _say("%-13s %-10s %s" % (check["check"], state, check["cause"] or check["value"]))
            if not check["ok"]:
                _say("%-24s fix: %s" % ("", check["fix"]))
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
