# -*- coding: utf-8 -*-
# SPDX-License-Identifier: Apache-2.0
"""PCIe fabric, GPU health and boot readiness of one host (PRIVATE to the collection; used by host_facts).

Read only: ``nvidia-smi`` (query csv, ``-q -d ROW_REMAPPER,ECC,PAGE_RETIREMENT``, ``topo -p2p r``),
``lspci -vvv`` (ACS control of the bridges above each GPU), ``/proc/cmdline``, ``/sys/class/iommu``,
the GPUs' IOMMU groups, the kernel log since boot (``journalctl -k -b`` or ``dmesg``: NVRM Xid
lines), ``/proc/self/mountinfo`` (``/tmp`` noexec) and what can make ``/dev/nvidia-uvm`` exist at
boot (``nvidia-modprobe`` or a ``modules-load.d`` path for ``nvidia_uvm``).

``evaluate`` turns the gathered facts into one result per check,
``{check, ok, value, cause, fix, proven}``: ``ok`` false gates the host; ``proven`` false says
the check could not look (no GPU, a tool absent) and the report shows it as not proven rather
than passed. Every fix says which of three remedies applies: set ``NCCL_P2P_DISABLE=1``
(inventory ``ct200_nccl_p2p_disable``), fix ACS/the IOMMU, or take the host out of service.
The formats are those of the real driver (tests/unit/fixtures/gpu, recorded on 580.159.04).
"""

from __future__ import annotations

import os
import re
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from ansible_collections.ct200.deploy.plugins.module_utils._io import listdir_sorted

Runner = Callable[[List[str]], Tuple[int, str, str]]

READ_LIMIT = 1 << 20  # a proc/sys file larger than this is not what we expect
# The query the lead recorded on a real H200 (gpu-fixtures/query-gpu.txt): same fields, same order.
HEALTH_QUERY = ("index,name,uuid,memory.total,memory.used,pci.bus_id,driver_version,compute_cap,persistence_mode,"
                "ecc.mode.current,ecc.errors.uncorrected.volatile.total,retired_pages.pending,"
                "clocks_throttle_reasons.active,power.limit")
HEALTH_FIELDS = HEALTH_QUERY.split(",")
ANSI_RE = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
XID_RE = re.compile(r"NVRM: Xid \(PCI:([0-9A-Fa-f:.]+)\): ([0-9]+),\s*(.*)")
# XIDs that mean the GPU or its memory is failing (NVIDIA "XID Errors" guide, r580): the host
# leaves service. Others (13, 31, 43, 45: application faults, resets of one context) are listed only.
SEVERE_XIDS = {
    48: "double-bit ECC error",
    61: "internal micro-controller breakpoint/warning",
    62: "internal micro-controller halt",
    63: "ECC page retirement or row remap recorded",
    64: "ECC page retirement or row remap failure",
    74: "NVLink error",
    79: "GPU has fallen off the bus",
    92: "high single-bit ECC error rate",
    94: "contained ECC error",
    95: "uncontained ECC error",
    119: "GSP RPC timeout",
    120: "GSP error",
    140: "unrecovered ECC error",
}
# ACS control bits that send peer-to-peer TLPs up to the root complex (and through the IOMMU):
# with them on, P2P between GPUs behind the bridge is redirected, which hangs or slows NCCL
# (NVIDIA/nccl#1999, #2079; NCCL troubleshooting, "PCI Access Control Services").
ACS_REDIRECT_BITS = ("ReqRedir", "CmpltRedir", "EgressCtrl")
UVM_MODULE_NAMES = ("nvidia_uvm", "nvidia-uvm")
MODULES_LOAD_DIRS = ("/etc/modules-load.d", "/run/modules-load.d", "/usr/local/lib/modules-load.d",
                     "/usr/lib/modules-load.d", "/lib/modules-load.d")

FIX_P2P_DISABLE = ("set ct200_nccl_p2p_disable: true (renders NCCL_P2P_DISABLE=1 into the instance's env file: NCCL "
                   "reduces through host memory, slower but it cannot hang on the fabric)")
FIX_ACS = ("turn ACS redirect off on the bridges above the GPUs (BIOS 'PCIe ACS' off, or at boot for each bridge: "
           "setpci -s BDF ECAP_ACS+6.w=0000; some kernels take pci=noacs)")
FIX_IOMMU = "boot with iommu=pt (intel_iommu=on iommu=pt, or amd_iommu=on iommu=pt) so GPU DMA is not translated"
FIX_OUT_OF_SERVICE = "take the host out of service (drain it and --limit it out of the deployment)"


def result(check: str, ok: bool, value: Any, cause: Optional[str] = None, fix: Optional[str] = None,
           proven: bool = True) -> Dict[str, Any]:
    return {"check": check, "ok": bool(ok), "value": value, "cause": cause, "fix": fix, "proven": bool(proven)}


def read_text(path: str, limit: int = READ_LIMIT) -> Optional[str]:
    """A small proc/sys/etc file, or None (absent, unreadable, not a regular file)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return None
    try:
        with os.fdopen(fd, "rb") as handle:
            return handle.read(limit).decode("utf-8", "replace")
    except OSError:
        return None


def na(value: Optional[str]) -> Optional[str]:
    """nvidia-smi's '[N/A]', 'N/A', '[Not Supported]' -> None."""
    text = (value or "").strip()
    return None if not text or text.strip("[]") in ("N/A", "Not Supported", "Unknown Error") else text


# ---------------------------------------------------------------- parsers (real driver formats)

def parse_health_query(text: str) -> List[Dict[str, Optional[str]]]:
    """Rows of ``--query-gpu=HEALTH_QUERY --format=csv,noheader,nounits`` keyed by field name.

    The name (second field) may hold commas: the fields after it are taken from the right."""
    rows = []
    tail = len(HEALTH_FIELDS) - 2
    for line in (text or "").splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < len(HEALTH_FIELDS) or not parts[0].isdigit():
            continue
        values = [parts[0], ", ".join(parts[1:len(parts) - tail])] + parts[len(parts) - tail:]
        rows.append({name: na(value) for name, value in zip(HEALTH_FIELDS, values)})
    return rows


def parse_smi_q(text: str) -> Dict[str, Dict[str, Any]]:
    """``nvidia-smi -q`` (any ``-d``) as {bus id: nested sections}, by the 4-space indentation it prints."""
    gpus: Dict[str, Dict[str, Any]] = {}
    stack: List[Tuple[int, Dict[str, Any]]] = []
    for raw in (text or "").splitlines():
        if not raw.strip():
            continue
        indent = len(raw) - len(raw.lstrip(" "))
        line = raw.strip()
        match = re.match(r"^GPU ([0-9A-Fa-f]+:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])$", line)
        if indent == 0:
            stack = []
            if match:
                node: Dict[str, Any] = {}
                gpus[match.group(1).upper()] = node
                stack = [(0, node)]
            continue
        if not stack:
            continue
        while len(stack) > 1 and stack[-1][0] >= indent:
            stack.pop()
        key, sep, value = line.partition(":")
        key = key.strip()
        if sep and value.strip():
            stack[-1][1][key] = value.strip()
        else:
            section: Dict[str, Any] = {}
            stack[-1][1][key] = section
            stack.append((indent, section))
    return gpus


def memory_health(gpu: Dict[str, Any]) -> Dict[str, Any]:
    """Uncorrectable ECC, pending/failed row remaps and retired pages of one ``-q`` GPU section."""
    ecc = gpu.get("ECC Errors") or {}
    remap = gpu.get("Remapped Rows") or {}
    retired = gpu.get("Retired Pages") or {}

    def count(section: Dict[str, Any], *keys: str) -> int:
        total = 0
        for key in keys:
            text = na(section.get(key) if isinstance(section.get(key), str) else None)
            total += int(text) if text and text.isdigit() else 0
        return total

    uncorrectable = ("SRAM Uncorrectable Parity", "SRAM Uncorrectable SEC-DED", "SRAM Uncorrectable", "DRAM Uncorrectable")
    double_bit = retired.get("Double Bit ECC")
    return {
        "ecc_uncorrectable_volatile": count(ecc.get("Volatile") or {}, *uncorrectable),
        "ecc_uncorrectable_aggregate": count(ecc.get("Aggregate") or {}, *uncorrectable),
        "remap_pending": (remap.get("Pending") or "").lower() == "yes",
        "remap_failure": (remap.get("Remapping Failure Occurred") or "").lower() == "yes",
        "remapped_uncorrectable": count(remap, "Uncorrectable Error"),
        "retired_pending": (na(retired.get("Pending Page Blacklist")) or "").lower() == "yes",
        "retired_double_bit": int(double_bit) if isinstance(double_bit, str) and double_bit.isdigit() else 0,
    }


def parse_p2p(text: str) -> Optional[Dict[str, Any]]:
    """``nvidia-smi topo -p2p r`` -> {labels: [GPU0..], status: {(i, j): 'OK'|'CNS'|...}}; None if unreadable.

    The real header row is underlined with ANSI escapes (ESC[4m ... ESC[0m): stripped first."""
    lines = [ANSI_RE.sub("", line).rstrip() for line in (text or "").splitlines()]
    labels: List[str] = []
    status: Dict[Tuple[int, int], str] = {}
    for line in lines:
        words = line.split()
        if not words:
            continue
        if words[0] == "Legend:":
            break
        if not labels and all(re.match(r"^GPU[0-9]+$", w) for w in words):
            labels = words
            continue
        if labels and re.match(r"^GPU[0-9]+$", words[0]) and len(words) == len(labels) + 1:
            row = labels.index(words[0]) if words[0] in labels else None
            if row is None:
                return None
            for col, word in enumerate(words[1:]):
                status[(row, col)] = word
    if not labels or len(status) != len(labels) ** 2:
        return None
    return {"labels": labels, "status": status}


def parse_xids(text: str) -> List[Dict[str, Any]]:
    """NVRM Xid lines of a kernel log: [{bus, xid, detail}] in log order."""
    out = []
    for line in (text or "").splitlines():
        match = XID_RE.search(line)
        if match:
            out.append({"bus": match.group(1).upper(), "xid": int(match.group(2)), "detail": match.group(3).strip()[:200]})
    return out


def parse_lspci_acs(text: str) -> Dict[str, Dict[str, bool]]:
    """``lspci -D -vvv`` -> {bdf: {bit: on}} for every device with an ACSCtl line."""
    out: Dict[str, Dict[str, bool]] = {}
    current = None
    for line in (text or "").splitlines():
        head = re.match(r"^([0-9a-fA-F]{4}:)?([0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]) ", line)
        if head:
            current = ((head.group(1) or "0000:") + head.group(2)).lower()
            continue
        ctl = re.match(r"^\s+ACSCtl:\s*(.*)$", line)
        if ctl and current:
            out[current] = {m.group(1): m.group(2) == "+" for m in re.finditer(r"([A-Za-z]+)([+-])", ctl.group(1))}
    return out


def upstream_bridges(bdf: str, sysfs_root: str) -> List[str]:
    """PCI devices between the root complex and ``bdf`` (nearest last), from the sysfs device path."""
    real = os.path.realpath(os.path.join(sysfs_root, "bus/pci/devices", bdf))
    parts = [p for p in real.split(os.sep) if re.match(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$", p)]
    return parts[:-1] if parts and parts[-1] == bdf else []


def mount_options(path: str, mountinfo: str) -> Optional[Tuple[str, List[str]]]:
    """(mount point, per-mount options) of the mount holding ``path``, from /proc/self/mountinfo."""
    best = None
    for line in (mountinfo or "").splitlines():
        fields = line.split()
        if len(fields) < 6:
            continue
        point = fields[4].replace("\\040", " ")
        inside = path == point or path.startswith(point.rstrip("/") + "/")
        if inside and (best is None or len(point) >= len(best[0])):
            best = (point, fields[5].split(","))
    return best


# ---------------------------------------------------------------- gathering (host side)

def _which(name: str, extra: Sequence[str] = ()) -> Optional[str]:
    system = ["/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"]
    dirs = os.environ.get("PATH", "").split(":") + system + list(extra)
    for directory in dirs:
        candidate = os.path.join(directory, name)
        if directory and os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None


def uvm_facts(root: str = "/") -> Dict[str, Any]:
    """What can create /dev/nvidia-uvm before CUDA starts: nvidia-modprobe, or modules-load.d for nvidia_uvm."""
    def under(path: str) -> str:
        return os.path.join(root, path.lstrip("/"))

    modprobe = None
    for directory in ("/usr/bin", "/usr/sbin", "/usr/local/bin", "/usr/local/nvidia/bin", "/bin", "/sbin"):
        candidate = under(os.path.join(directory, "nvidia-modprobe"))
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            modprobe = os.path.join(directory, "nvidia-modprobe")
            break
    entries = []
    for directory in MODULES_LOAD_DIRS:
        for name in listdir_sorted(under(directory))[:256]:
            text = read_text(os.path.join(under(directory), name), 65536) if name.endswith(".conf") else None
            if text and any(line.split("#")[0].strip() in UVM_MODULE_NAMES for line in text.splitlines()):
                entries.append(os.path.join(directory, name))
    release = os.uname().release
    deps = (read_text(under("/lib/modules/%s/modules.dep" % release), 8 << 20) or "")
    deps += read_text(under("/lib/modules/%s/modules.builtin" % release), 8 << 20) or ""
    module_file = bool(re.search(r"(^|/)nvidia[-_]uvm\.ko", deps, re.M))
    loaded = bool(re.search(r"^nvidia_uvm ", read_text(under("/proc/modules")) or "", re.M))
    return {"nvidia_modprobe": modprobe, "modules_load": entries, "module_installed": module_file,
            "loaded": loaded, "kernel": release}


def kernel_log(run: Runner) -> Tuple[Optional[str], str]:
    """The kernel log since boot (journalctl -k -b, else dmesg), and where it came from."""
    for argv, label in ((["journalctl", "-k", "-b", "--no-pager", "-q", "-o", "short-monotonic"], "journalctl -k -b"),
                        (["dmesg"], "dmesg")):
        path = _which(argv[0])
        if path is None:
            continue
        rc, out, _err = run([path] + argv[1:])
        if rc == 0 and out.strip():
            return out[-(4 << 20):], label
    return None, "no readable kernel log (journalctl -k -b and dmesg)"


def iommu_facts(bdfs: Sequence[str], sysfs_root: str, proc_root: str = "/proc") -> Dict[str, Any]:
    cmdline = (read_text(os.path.join(proc_root, "cmdline"), 65536) or "").split()
    wanted = [w for w in cmdline if re.match(r"^(iommu|intel_iommu|amd_iommu|pci)=", w)]
    units = listdir_sorted(os.path.join(sysfs_root, "class/iommu"))
    groups = {}
    for bdf in bdfs:
        link = os.path.join(sysfs_root, "bus/pci/devices", bdf, "iommu_group")
        if not os.path.exists(link):
            groups[bdf] = None
            continue
        group = os.path.basename(os.path.realpath(link))
        kind = (read_text(os.path.join(sysfs_root, "kernel/iommu_groups", group, "type"), 64) or "").strip() or None
        groups[bdf] = {"group": group, "type": kind}
    return {"cmdline": wanted, "units": units, "groups": groups}


def gather(run: Runner, nvidia_smi: Optional[str], gpus: Sequence[Dict[str, Any]], sysfs_root: str = "/sys",
           proc_root: str = "/proc", root: str = "/") -> Dict[str, Any]:
    """Everything evaluate() needs; each tool's absence is recorded, not raised."""
    from ansible_collections.ct200.deploy.plugins.module_utils.host_facts import sysfs_bdf

    facts: Dict[str, Any] = {"uvm": uvm_facts(root), "tmp": mount_options("/tmp", read_text(
        os.path.join(proc_root, "self/mountinfo")) or "")}
    if not nvidia_smi or not gpus:
        return facts
    rc, out, _err = run([nvidia_smi, "--query-gpu=" + HEALTH_QUERY, "--format=csv,noheader,nounits"])
    facts["query"] = parse_health_query(out) if rc == 0 else None
    rc, out, _err = run([nvidia_smi, "-q", "-d", "ROW_REMAPPER,ECC,PAGE_RETIREMENT"])
    facts["memory"] = {bus: memory_health(sec) for bus, sec in parse_smi_q(out).items()} if rc == 0 else None
    rc, out, err = run([nvidia_smi, "topo", "-p2p", "r"])
    facts["p2p"] = parse_p2p(out) if rc == 0 else None
    facts["p2p_error"] = None if rc == 0 else (err or out).strip()[-200:]
    facts["kernel_log"], facts["kernel_log_source"] = kernel_log(run)
    bdfs = [b for b in (sysfs_bdf(g["pci_bus_id"]) for g in gpus) if b]
    lspci = _which("lspci")
    if lspci:
        rc, out, _err = run([lspci, "-D", "-vvv"])
        facts["acs"] = parse_lspci_acs(out) if rc == 0 else None
    else:
        facts["acs"] = None
    facts["bridges"] = {b: upstream_bridges(b, sysfs_root) for b in bdfs}
    facts["iommu"] = iommu_facts(bdfs, sysfs_root, proc_root)
    return facts


# ---------------------------------------------------------------- verdicts

def _pairs_text(pairs: Sequence[Tuple[int, int, str]]) -> str:
    return ", ".join("GPU%d-GPU%d %s" % p for p in pairs[:12]) + (" ..." if len(pairs) > 12 else "")


def check_boot(facts: Dict[str, Any], has_gpu: bool) -> List[Dict[str, Any]]:
    """/tmp executable (SGLang's per-rank numactl wrapper), and a way to create /dev/nvidia-uvm at boot."""
    out = []
    tmp = facts.get("tmp")
    if tmp is None:
        out.append(result("tmp_exec", True, "unknown (no /proc/self/mountinfo)", proven=False))
    elif "noexec" in tmp[1]:
        out.append(result("tmp_exec", False, "%s mounted %s" % (tmp[0], ",".join(tmp[1])),
                          "/tmp is mounted noexec (mount %s): SGLang 0.5.23 writes a #!/bin/sh numactl wrapper per "
                          "rank into /tmp and executes it (srt/utils/numa_utils.py); the unit's PrivateTmp lives "
                          "on the host /tmp, so per-rank NUMA binding fails" % tmp[0],
                          "remount /tmp without noexec (fstab or tmp.mount options), or give the host a /tmp that "
                          "allows execution"))
    else:
        out.append(result("tmp_exec", True, "%s mounted %s" % (tmp[0], ",".join(tmp[1]))))
    uvm = facts.get("uvm") or {}
    ways = ([uvm["nvidia_modprobe"]] if uvm.get("nvidia_modprobe") else []) + list(uvm.get("modules_load") or [])
    if uvm.get("module_installed") and not uvm.get("modules_load"):
        ways.append("nvidia_uvm module of kernel %s (a modules-load.d entry can load it)" % uvm.get("kernel"))
    if not has_gpu:
        out.append(result("nvidia_uvm_boot", True, "not checked: no GPU (CPU stand-in)", proven=False))
    elif ways:
        out.append(result("nvidia_uvm_boot", True, ways))
    else:
        out.append(result("nvidia_uvm_boot", False, "neither nvidia-modprobe nor a modules-load path for nvidia_uvm",
                          "nothing can create /dev/nvidia-uvm at boot: the unit's NoNewPrivileges/RestrictSUIDSGID/"
                          "ProtectKernelModules stop CUDA's on-demand setuid nvidia-modprobe, and there is neither "
                          "nvidia-modprobe nor an nvidia_uvm kernel module (modules.dep of %s) nor a modules-load.d "
                          "entry for it, so after a reboot cuInit fails and the unit stays down" % uvm.get("kernel"),
                          "install the driver's nvidia-modprobe (Debian: nvidia-modprobe) or the nvidia_uvm module "
                          "for the running kernel (DKMS), then re-run the preflight"))
    return out


def _check_identity(query: List[Dict[str, Any]], want: Dict[str, Any]) -> List[Dict[str, Any]]:
    out = []
    caps = {int(r["index"]): r.get("compute_cap") for r in query}
    expected = want.get("compute_cap")
    if not expected:
        out.append(result("compute_cap", True, caps, proven=False, cause="no expected compute capability given"))
    else:
        off = {i: c for i, c in caps.items() if c != expected}
        out.append(result("compute_cap", not off, caps, None if not off else
                          "GPU(s) %s report compute capability %s, the rendered backends assume %s (sm_%s: triton MLA "
                          "attention and triton draft, the CT200's RTX PRO 6000 Blackwell)"
                          % (sorted(off), sorted(set(str(c) for c in off.values())), expected, expected.replace(".", "")),
                          None if not off else "deploy on sm_%s GPUs, or set ct200_gpu_compute_cap to this GPU's and "
                          "re-check the instance's attention backends for it" % expected.replace(".", "")))
    persist = {int(r["index"]): r.get("persistence_mode") for r in query}
    off = sorted(i for i, p in persist.items() if (p or "").lower() != "enabled")
    out.append(result("persistence_mode", not off, persist, None if not off else
                      "persistence mode is off on GPU(s) %s: the driver tears the GPU state down between clients, "
                      "so every start re-initialises it and the unit can race the driver at boot" % off,
                      None if not off else "enable nvidia-persistenced.service (systemctl enable --now "
                      "nvidia-persistenced) or nvidia-smi -pm 1"))
    return out


def _check_memory(query: List[Dict[str, Any]], memory: Optional[Dict[str, Dict[str, Any]]],
                  bus_index: Dict[str, int]) -> List[Dict[str, Any]]:
    """Uncorrectable ECC, pending or failed row remaps, pending page retirement: from the query and from -q."""
    problems: Dict[int, List[str]] = {}
    values: Dict[int, Dict[str, Any]] = {}

    def add(index: int, text: str) -> None:
        if text not in problems.setdefault(index, []):
            problems[index].append(text)

    for row in query:
        index = int(row["index"])
        volatile = row.get("ecc.errors.uncorrected.volatile.total")
        values[index] = {"ecc_uncorrected_volatile": volatile, "retired_pages_pending": row.get("retired_pages.pending")}
        if volatile and volatile.isdigit() and int(volatile) > 0:
            add(index, "uncorrectable ECC errors since the driver loaded (%s)" % volatile)
        if (row.get("retired_pages.pending") or "").lower() == "yes":
            add(index, "retired pages pending (applied at the next GPU reset)")
    for bus, mem in (memory or {}).items():
        index = bus_index.get(bus, -1)
        values.setdefault(index, {}).update(mem)
        if mem["ecc_uncorrectable_volatile"]:
            add(index, "uncorrectable ECC errors since the driver loaded (%d)" % mem["ecc_uncorrectable_volatile"])
        if mem["remap_pending"]:
            add(index, "a row remap is pending (applied at the next GPU reset; until then the bad row is in use)")
        if mem["remap_failure"]:
            add(index, "row remapping failed (no spare rows left)")
        if mem["retired_pending"]:
            add(index, "retired pages pending (applied at the next GPU reset)")
    bad = ["GPU%d: %s" % (i, ", ".join(texts)) for i, texts in sorted(problems.items()) if texts]
    proven = memory is not None
    if not bad:
        return [result("gpu_memory", True, values, None if proven else "nvidia-smi -q -d "
                       "ROW_REMAPPER,ECC,PAGE_RETIREMENT failed", proven=proven)]
    return [result("gpu_memory", False, values, "; ".join(bad), FIX_OUT_OF_SERVICE + "; reset the GPU (reboot) to "
                   "apply pending remaps and retirements, then re-run the preflight; a remap failure or recurring "
                   "uncorrectable errors mean an RMA")]


def _check_xids(facts: Dict[str, Any], bus_index: Dict[str, int]) -> Dict[str, Any]:
    log = facts.get("kernel_log")
    if log is None:
        return result("xid", True, facts.get("kernel_log_source"), proven=False,
                      cause="the kernel log since boot could not be read")
    xids = parse_xids(log)
    severe = [x for x in xids if x["xid"] in SEVERE_XIDS]
    listed = [{"gpu": bus_index.get(_short_bus(x["bus"]), None), "bus": x["bus"], "xid": x["xid"]} for x in xids][:50]
    if not severe:
        return result("xid", True, listed or "no Xid since boot (%s)" % facts.get("kernel_log_source"))
    kinds = sorted({(x["xid"], SEVERE_XIDS[x["xid"]]) for x in severe})
    where = sorted({"GPU%s (%s)" % (bus_index.get(_short_bus(x["bus"]), "?"), x["bus"]) for x in severe})
    return result("xid", False, listed, "Xid %s since boot on %s (%s)" % (
        ", ".join("%d: %s" % k for k in kinds), ", ".join(where), facts.get("kernel_log_source")),
        FIX_OUT_OF_SERVICE + "; Xid 79 (fell off the bus) means PCIe/power/thermal trouble: reseat or RMA; ECC Xids "
        "(48, 63, 64, 94, 95): reset the GPU and watch the row remapper")


def _short_bus(bus: str) -> str:
    """Kernel 'PCI:0000:17:00' or '0000:17:00.0' -> nvidia-smi's '00000000:17:00.0' form."""
    parts = bus.upper().split(":")
    if len(parts) == 3:
        domain, b, rest = parts
        rest = rest if "." in rest else rest + ".0"
        return "%08X:%s:%s" % (int(domain, 16), b, rest)
    return bus.upper()


def _check_p2p(facts: Dict[str, Any], gpus: List[int], p2p_off: bool) -> Dict[str, Any]:
    p2p = facts.get("p2p")
    if p2p is None:
        return result("p2p", p2p_off, facts.get("p2p_error") or "unreadable", "nvidia-smi topo -p2p r printed no "
                      "matrix (%s)" % (facts.get("p2p_error") or "unknown format"), None if p2p_off else
                      "check the driver (nvidia-smi topo -p2p r), or " + FIX_P2P_DISABLE)
    matrix = {"%d-%d" % k: v for k, v in sorted(p2p["status"].items()) if k[0] < k[1]}
    pairs = [(i, j, p2p["status"].get((i, j), "?")) for i in gpus for j in gpus if i < j]
    bad = [p for p in pairs if p[2] != "OK"]
    if not bad:
        return result("p2p", True, matrix)
    if p2p_off:
        return result("p2p", True, matrix, cause="P2P not available on %s; NCCL_P2P_DISABLE=1 is set by the inventory"
                      % _pairs_text(bad))
    return result("p2p", False, matrix, "P2P reads are not available between %s (CNS: chipset not supported, NS: not "
                  "supported, GNS/TNS: GPU/topology not supported): NCCL mixes P2P and host-memory paths on this "
                  "host" % _pairs_text(bad), FIX_P2P_DISABLE + ", or enable P2P between the GPUs (BIOS, and " + FIX_ACS
                  + ") and re-run ct200 preflight --deep to time the all-reduce")


def _check_acs(facts: Dict[str, Any], bdfs: Dict[int, str], p2p_off: bool) -> Dict[str, Any]:
    acs = facts.get("acs")
    bridges = facts.get("bridges") or {}
    if acs is None:
        return result("acs", True, "not checked: lspci absent or failed", proven=False,
                      cause="lspci -vvv could not be read", fix="install pciutils and run the preflight as root")
    value, redirect = {}, []
    for index, bdf in sorted(bdfs.items()):
        for bridge in bridges.get(bdf, []):
            bits = acs.get(bridge)
            if bits is None:
                continue
            on = [b for b in ACS_REDIRECT_BITS if bits.get(b)]
            value[bridge] = "ACSCtl " + " ".join("%s%s" % (k, "+" if v else "-") for k, v in bits.items())
            if on:
                redirect.append("%s above GPU%d (%s+)" % (bridge, index, "+ ".join(on)))
    redirect = sorted(set(redirect))
    if not redirect:
        return result("acs", True, value or "no ACS capability on the bridges above the GPUs")
    if p2p_off:
        return result("acs", True, value, cause="ACS redirects P2P on %s; NCCL_P2P_DISABLE=1 is set by the inventory"
                      % ", ".join(redirect))
    return result("acs", False, value, "ACS redirects peer-to-peer traffic to the root complex on %s: NCCL's P2P "
                  "all-reduce over PCIe hangs or crawls (NVIDIA/nccl#1999, #2079)" % ", ".join(redirect[:8]),
                  FIX_ACS + "; or " + FIX_P2P_DISABLE)


def _check_iommu(facts: Dict[str, Any], bdfs: Dict[int, str], p2p_off: bool) -> Dict[str, Any]:
    iommu = facts.get("iommu") or {}
    groups = iommu.get("groups") or {}
    value = {"cmdline": iommu.get("cmdline"), "units": iommu.get("units"),
             "gpu_groups": {str(i): groups.get(b) for i, b in sorted(bdfs.items())}}
    translated = sorted("GPU%d (group %s, %s)" % (i, groups[b]["group"], groups[b]["type"]) for i, b in bdfs.items()
                        if groups.get(b) and (groups[b].get("type") or "").startswith("DMA"))
    if not translated:
        return result("iommu", True, value)
    if p2p_off:
        return result("iommu", True, value, cause="the IOMMU translates DMA of %s; NCCL_P2P_DISABLE=1 is set by the "
                      "inventory" % ", ".join(translated))
    return result("iommu", False, value, "the IOMMU translates the DMA of %s (iommu group type DMA): peer writes "
                  "between GPUs go through it, which hangs NCCL on PCIe hosts (vllm-project/vllm#33041)"
                  % ", ".join(translated[:8]), FIX_IOMMU + "; or " + FIX_P2P_DISABLE)


def _check_numa(host: Dict[str, Any], gpus: List[int], want: Dict[str, Any]) -> Dict[str, Any]:
    nodes = {g["index"]: g.get("numa_node") for g in host.get("gpus") or []}
    value = {"gpus": {str(i): nodes.get(i) for i in gpus}, "host_nodes": host.get("numa_nodes"),
             "binding": want.get("numa_node")}
    binding = want.get("numa_node")
    if binding is None:
        unknown = [i for i in gpus if nodes.get(i) is None]
        if unknown and (host.get("numa_nodes") or 0) > 1:
            return result("numa", True, value, proven=False, cause="GPU(s) %s report no NUMA node on a %d-node host: "
                          "SGLang's per-rank binding cannot place them" % (unknown, host["numa_nodes"]))
        return result("numa", True, value)
    off = sorted(i for i in gpus if nodes.get(i) is not None and nodes[i] != int(binding))
    if not off:
        return result("numa", True, value)
    return result("numa", False, value, "the instance is bound to NUMA node %s but GPU(s) %s sit on node(s) %s"
                  % (binding, off, sorted({nodes[i] for i in off})),
                  "remove numa_node from the instance (SGLang 0.5.23 binds each rank to its GPU's node) or give it "
                  "GPUs of node %s" % binding)


def evaluate(host: Dict[str, Any], facts: Dict[str, Any], want: Dict[str, Any]) -> List[Dict[str, Any]]:
    """One result per check for this host (see the module docstring)."""
    from ansible_collections.ct200.deploy.plugins.module_utils.host_facts import sysfs_bdf

    has_gpu = bool(host.get("gpu_count"))
    out = check_boot(facts, has_gpu)
    if not has_gpu:
        for name in ("compute_cap", "persistence_mode", "gpu_memory", "xid", "p2p", "acs", "iommu", "numa"):
            out.append(result(name, True, "not checked: no GPU (CPU stand-in)", proven=False))
        return out
    query = facts.get("query")
    if query is None:
        out.append(result("gpu_health_query", False, None, "nvidia-smi --query-gpu=%s failed" % HEALTH_QUERY,
                          "repair the NVIDIA driver installation"))
        query = []
    elif len(query) != host["gpu_count"]:
        out.append(result("gpu_health_query", False, len(query), "nvidia-smi lists %d GPU(s) but its health query "
                          "(%s) answered for %d" % (host["gpu_count"], HEALTH_QUERY, len(query)),
                          "repair the NVIDIA driver installation (a GPU that stops answering queries is failing)"))
    needed = int(want.get("gpus_needed") or 0) or host["gpu_count"]
    gpus = list(want.get("instance_gpus") or range(min(needed, host["gpu_count"])))
    bus_index = {g["pci_bus_id"].upper(): g["index"] for g in host["gpus"]}
    bdfs = {g["index"]: sysfs_bdf(g["pci_bus_id"]) for g in host["gpus"] if g["index"] in gpus}
    bdfs = {i: b for i, b in bdfs.items() if b}
    p2p_off = bool(want.get("nccl_p2p_disable"))
    out += _check_identity(query, want)
    out += _check_memory(query, facts.get("memory"), bus_index)
    out.append(_check_xids(facts, bus_index))
    if len(gpus) < 2:
        for name in ("p2p", "acs", "iommu"):
            out.append(result(name, True, "one GPU per instance: no peer traffic"))
    else:
        out += [_check_p2p(facts, gpus, p2p_off), _check_acs(facts, bdfs, p2p_off), _check_iommu(facts, bdfs, p2p_off)]
    out.append(_check_numa(host, gpus, want))
    return out


def failed(results: Sequence[Dict[str, Any]]) -> List[Dict[str, str]]:
    """The failed results as preflight failed_checks ({check, cause, fix})."""
    return [{"check": r["check"], "cause": r["cause"] or "failed", "fix": r["fix"] or "see the cause"}
            for r in results if not r["ok"]]
