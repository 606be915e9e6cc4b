# -*- coding: utf-8 -*-
# Copyright: ct200-deploy developers
# SPDX-License-Identifier: Apache-2.0
"""systemd unit and environment-file rendering and verification for sglang_service.

PRIVATE to the collection. One instance NAME gets

* ``UNIT_DIR/sglang@NAME.service`` -- an instance of the ``sglang@`` template
  name (``%i`` = NAME), fully rendered so ``systemctl cat`` shows exactly what
  runs;
* ``ENV_DIR/NAME.env`` -- its EnvironmentFile: PATH (the venv's bin/ first, for
  the JIT's ninja), CUDA_HOME (nvcc), CUDA_VISIBLE_DEVICES, NUMA node, offline
  switches, the caller's environment, and the CT200_SGLANG_* keys the module
  reads back to keep ports and GPU sets disjoint across instances.

This module only renders and verifies; the role installs the files
(``ansible.builtin.copy`` with ``validate=``). Reading what is on disk never
follows a symlink.

ExecStart arguments are always double-quoted with systemd's rules
(systemd.service(5) "Command lines"): backslash and double quote are escaped,
``%`` becomes ``%%`` (specifiers) and ``$`` becomes ``$$`` (no variable
expansion), control characters and a lone ``;`` are refused. A path with
spaces or quotes therefore stays one argument and cannot inject anything.
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import tempfile
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from ansible_collections.ct200.deploy.plugins.module_utils._io import atomic_write, listdir_sorted

Runner = Callable[[List[str]], Tuple[int, str, str]]

UNIT_HEADER = "# Managed by Ansible (ct200.deploy.sglang_service); local edits are overwritten."
STATE_DIR = "/var/lib/sglang"
CACHE_DIR = "/var/cache/sglang"
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
READ_LIMIT = 1 << 20  # a unit or env file larger than this is not ours
UVM_LOADER_UNIT = "ct200-nvidia-uvm.service"
PERSISTENCED_UNIT = "nvidia-persistenced.service"
MODULES_LOAD_PATH = "/etc/modules-load.d/ct200-nvidia-uvm.conf"
# Where systemd looks for system units (systemd.unit(5) "Unit File Load Path"), the role's unit_dir first.
SYSTEM_UNIT_PATH = ("/etc/systemd/system", "/run/systemd/system", "/usr/local/lib/systemd/system",
                    "/lib/systemd/system", "/usr/lib/systemd/system")


class UnitError(Exception):
    """The unit cannot be rendered or did not verify."""


# ---------------------------------------------------------------------------
# Quoting
def systemd_quote(arg: Any) -> str:
    """Quote one command-line argument for ExecStart= (always double quotes)."""
    text = str(arg)
    if any(ord(c) < 32 or ord(c) == 127 for c in text):
        raise UnitError("argument %r contains a control character (newline, tab, ...); systemd "
                        "command lines cannot carry it safely: remove it" % text)
    if text == ";":
        raise UnitError("a lone ';' argument separates commands in systemd; it cannot be passed to SGLang")
    text = text.replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%").replace("$", "$$")
    return '"%s"' % text


def command_line(argv: Sequence[Any]) -> str:
    return " ".join(systemd_quote(a) for a in argv)


def path_quote(path: Any) -> str:
    """Quote one path for RequiresMountsFor= (double quotes; ``%`` specifiers escaped, ``$`` is literal there).

    systemd splits that list with extract_first_word(EXTRACT_UNQUOTE): a backslash takes the next character
    literally, so only backslash and double quote need one; then it expands specifiers.
    """
    text = str(path)
    if any(ord(c) < 32 or ord(c) == 127 for c in text):
        raise UnitError("path %r contains a control character; systemd cannot carry it: rename the directory" % text)
    return '"%s"' % text.replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%")


def env_quote(value: Any) -> str:
    """Quote a value for an EnvironmentFile (double quotes, shell-like escapes)."""
    text = "" if value is None else str(value)
    if any(c in text for c in "\n\r\x00"):
        raise UnitError("environment value %r contains a newline or NUL" % text)
    for char in ("\\", '"', "$", "`"):
        text = text.replace(char, "\\" + char)
    return '"%s"' % text


def parse_env_file(text: str) -> Dict[str, str]:
    """Parse the env files this module writes (KEY="value" lines, comments)."""
    out: Dict[str, str] = {}
    for raw in (text or "").splitlines():
        line = raw.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, value = line.split("=", 1)
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
            body = value[1:-1]
            if value[0] == '"':
                body = re.sub(r"\\(.)", r"\1", body)
            value = body
        out[key.strip()] = value
    return out


# ---------------------------------------------------------------------------
# Rendering
def health_url(host: str, port: int, path: str) -> str:
    if host in ("0.0.0.0", "", None):
        host = "127.0.0.1"
    elif host == "::":
        host = "::1"
    if ":" in host and not host.startswith("["):
        host = "[%s]" % host
    return "http://%s:%d%s" % (host, port, path)


# Hardening (systemd-analyze security <= 4.5 is a test). What is NOT set, and why:
# * PrivateDevices=yes would hide /dev/nvidia*; instead DevicePolicy=closed + DeviceAllow= lists the NVIDIA
#   character devices (frontend = /dev/nvidia0..N + nvidiactl, uvm, modeset, caps for MIG).
# * MemoryDenyWriteExecute=yes breaks ctypes/libffi callbacks and the CUDA/Triton JIT loaders, which need
#   writable+executable mappings.
# * ProcSubset=pid hides /proc/meminfo and /proc/cpuinfo, which torch and psutil (SGLang's memory checks) read.
# * PrivateUsers=yes remaps the service user and group in a user namespace; GPU device nodes, /dev/shm
#   segments shared between the TP ranks and the model files would then be owned by "nobody".
# * PrivateNetwork=yes / IPAddressDeny= would cut the served endpoint and the NCCL rendezvous.
# * SystemCallFilter keeps @system-service (which holds @ipc shm*/memfd for NCCL's shared-memory transport,
#   @resources mbind/set_mempolicy/sched_setaffinity for NUMA binding, @process clone3/pidfd_open) plus
#   pidfd_getfd (torch's expandable-segments IPC between ranks); @debug (ptrace, perf_event_open) stays out:
#   CUDA IPC and NCCL exchange handles over unix sockets, not by tracing.
# * RestrictAddressFamilies keeps AF_NETLINK: NCCL and torch enumerate interfaces with netlink (getifaddrs).
# * ProtectHome=read-only rather than yes: model directories below /home stay readable.
HARDENING = [
    "NoNewPrivileges=yes",
    "CapabilityBoundingSet=",
    "AmbientCapabilities=",
    "PrivateTmp=yes",
    "ProtectSystem=strict",
    "ProtectHome=read-only",
    "ProtectKernelTunables=yes",
    "ProtectKernelModules=yes",
    "ProtectKernelLogs=yes",
    "ProtectControlGroups=yes",
    "ProtectClock=yes",
    "ProtectHostname=yes",
    "ProtectProc=invisible",
    "DevicePolicy=closed",
    "DeviceAllow=char-nvidia-frontend rw",
    "DeviceAllow=char-nvidia-uvm rw",
    "DeviceAllow=char-nvidia-modeset rw",
    "DeviceAllow=char-nvidia-caps rw",
    "RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6 AF_NETLINK",
    "RestrictNamespaces=yes",
    "RestrictRealtime=yes",
    "RestrictSUIDSGID=yes",
    "LockPersonality=yes",
    "RemoveIPC=yes",
    "SystemCallArchitectures=native",
    "SystemCallFilter=@system-service pidfd_getfd",
    "SystemCallErrorNumber=EPERM",
    "UMask=0027",
]


# Boot order. The hardening above is why a reboot needs these: libcuda normally creates /dev/nvidia-uvm on demand
# through the setuid nvidia-modprobe, which NoNewPrivileges=, RestrictSUIDSGID= and ProtectKernelModules= stop,
# and systemd resolves DeviceAllow=char-nvidia-uvm from /proc/devices when it sets up the unit's cgroup, before
# the first process (uvm's major is dynamic: 238 on a 580.159 driver). So after a boot in which no root CUDA
# process ran first, cuInit fails, three restarts follow and the unit stays down (issue 15).
# * Wants=/After= ct200-nvidia-uvm.service (rendered when nvidia-modprobe exists on the host): a root oneshot
#   that runs ``nvidia-modprobe -u -c=0`` (loads nvidia_uvm, creates /dev/nvidia-uvm, -tools, nvidia0 and
#   nvidiactl). It is a unit of its own, not an ``ExecStartPre=+`` of this one: by the time an ExecStartPre= ran,
#   this unit's device list would already be fixed without uvm, and its mknod would meet DevicePolicy=closed.
#   The role also installs /etc/modules-load.d/ct200-nvidia-uvm.conf (``nvidia-uvm``) where the driver is
#   present, so systemd-modules-load loads the module in sysinit.target, before any service.
# * Wants=/After= nvidia-persistenced.service when the host has that unit: the daemon (root) opens every GPU
#   at boot, which creates /dev/nvidia1..N, and keeps them initialised; a TP rank's cuInit racing its
#   start would pay or fail the initialisation of each GPU.
# * RequiresMountsFor= the target, the drafter and the venv: a late or network mount (/models on NFS, a
#   separate /opt) is waited for, instead of the three fast restarts (StartLimitBurst=) burning out before it
#   appears.
@dataclass
class BootDeps(object):
    """What the host offers for the boot order (detected by ``detect_boot``)."""

    nvidia_modprobe: Optional[str] = None  # its path: the uvm loader unit runs it
    persistenced: bool = False             # nvidia-persistenced.service exists
    driver: bool = False                   # the NVIDIA kernel driver is installed (modules-load.d entry)

    def units(self) -> List[str]:
        """Units this instance wants and starts after (besides the network)."""
        return ([UVM_LOADER_UNIT] if self.nvidia_modprobe else []) + ([PERSISTENCED_UNIT] if self.persistenced else [])

    def describe(self) -> Dict[str, Any]:
        return {"nvidia_modprobe": self.nvidia_modprobe, "persistenced": self.persistenced, "driver": self.driver,
                "after": self.units()}


def detect_boot(which: Callable[[str], Optional[str]], unit_dirs: Sequence[str] = SYSTEM_UNIT_PATH,
                sys_module: str = "/sys/module/nvidia") -> BootDeps:
    """The host's nvidia-modprobe, nvidia-persistenced unit and driver (nothing is run)."""
    modprobe = which("nvidia-modprobe")
    persistenced = any(os.path.isfile(os.path.join(d, PERSISTENCED_UNIT)) for d in unit_dirs)
    return BootDeps(nvidia_modprobe=modprobe, persistenced=persistenced,
                    driver=bool(modprobe) or os.path.isdir(sys_module))


def render_uvm_loader(boot: BootDeps) -> Optional[str]:
    """``ct200-nvidia-uvm.service`` text, or None when the host has no nvidia-modprobe (see the comment above)."""
    if not boot.nvidia_modprobe:
        return None
    return "\n".join([
        UNIT_HEADER,
        "# Loads nvidia_uvm and creates /dev/nvidia-uvm as root before the sglang@ instances start (they want it):",
        "# their hardening stops libcuda's on-demand setuid nvidia-modprobe.",
        "",
        "[Unit]",
        "Description=NVIDIA UVM device for CUDA services (ct200.deploy.sglang_service)",
        "After=systemd-modules-load.service",
        "",
        "[Service]",
        "Type=oneshot",
        "RemainAfterExit=yes",
        "ExecStart=%s" % command_line([boot.nvidia_modprobe, "-u", "-c=0"]),
        "",
    ])


def modules_load_text() -> str:
    return "# Managed by Ansible (ct200.deploy.sglang_service): load nvidia_uvm at boot (sglang@ units).\nnvidia-uvm\n"


def venv_dir(spec) -> str:
    """The venv holding spec.python (VENV/bin/python)."""
    return os.path.dirname(os.path.dirname(spec.python))


def mount_paths(spec) -> List[str]:
    """Paths the instance reads at start: target, drafter (when speculative) and the venv."""
    paths = [spec.target]
    if spec.draft and spec.algorithm != "none":
        paths.append(spec.draft)
    paths.append(venv_dir(spec))
    out: List[str] = []
    for path in paths:
        if path and path not in out:
            out.append(path)
    return out


def _numa(spec, argv: Sequence[str], numactl: Optional[str]) -> Tuple[List[str], List[str]]:
    """(ExecStart argv, extra [Service] lines) for the NUMA binding."""
    if spec.numa_node is None:
        return list(argv), []
    if numactl:
        return [numactl, "--cpunodebind=%d" % spec.numa_node, "--membind=%d" % spec.numa_node] + list(argv), []
    return list(argv), ["NUMAPolicy=bind", "NUMAMask=%d" % spec.numa_node, "CPUAffinity=numa"]


def render_unit(spec, argv: Sequence[str], numactl: Optional[str] = None, boot: Optional[BootDeps] = None) -> str:
    """The unit text for ``sglang@NAME.service``."""
    exec_argv, numa_lines = _numa(spec, argv, numactl)
    group = spec.service_group or spec.service_user
    order = " ".join(["network-online.target"] + (boot or BootDeps()).units())
    lines = [
        UNIT_HEADER,
        "# Instance %s of the sglang@ template name; model %s." % (spec.name, _comment(spec.target)),
        "",
        "[Unit]",
        "Description=SGLang %i (ct200.deploy.sglang_service)",
        "Documentation=https://docs.sglang.io/",
        "After=%s" % order,
        "Wants=%s" % order,
        "RequiresMountsFor=%s" % " ".join(path_quote(p) for p in mount_paths(spec)),
        # A failed TP init can leak GPU memory: no retry storms.
        "StartLimitIntervalSec=%d" % spec.start_limit_interval,
        "StartLimitBurst=%d" % spec.start_limit_burst,
        "",
        "[Service]",
        # SGLang has no sd_notify; the role waits for the health endpoint.
        "Type=exec",
        "User=%s" % spec.service_user,
        "Group=%s" % group,
        "EnvironmentFile=%s" % env_path(spec).replace("%", "%%"),
        "WorkingDirectory=%s" % STATE_DIR,
        "StateDirectory=sglang",
        "CacheDirectory=sglang",
        "ExecStart=%s" % command_line(exec_argv),
        "TimeoutStartSec=%d" % spec.start_timeout,
        # SIGTERM to the launcher (it drives the scheduler shutdown), SIGKILL the rest once TimeoutStopSec=
        # runs out. SGLang drains in-flight requests with no limit of its own (sigterm_watchdog), so the
        # default (sglang_spec.STOP_TIMEOUT, 900 s) covers a long agent turn; a SIGKILL mid-drain is how GPU
        # memory stays held after a stop (the role checks that after every stop).
        "KillMode=mixed",
        "TimeoutStopSec=%d" % spec.stop_timeout,
        "Restart=on-failure",
        "RestartSec=%d" % spec.restart_sec,
        "LimitNOFILE=%s" % spec.limit_nofile,
        "LimitMEMLOCK=%s" % spec.limit_memlock,
        "SyslogIdentifier=sglang-%i",
    ] + numa_lines + HARDENING
    if spec.read_write_paths:
        lines.append("ReadWritePaths=%s" % " ".join(systemd_quote(p) for p in spec.read_write_paths))
    lines += ["", "[Install]", "WantedBy=multi-user.target", ""]
    return "\n".join(lines)


def _comment(text: Optional[str]) -> str:
    return re.sub(r"[\x00-\x1f\x7f]", "?", str(text))


def unit_path(spec) -> str:
    return os.path.join(spec.unit_dir, spec.unit_name)


def env_path(spec) -> str:
    return os.path.join(spec.env_dir, "%s.env" % spec.name)


def service_path(spec) -> str:
    """PATH for the service: the venv's bin/ first (SGLang's JIT runs a bare ``ninja``), then CUDA's bin/."""
    return "%s:%s:%s" % (os.path.dirname(spec.python), os.path.join(spec.cuda_home, "bin"), SYSTEM_PATH)


def render_env(spec, gpus: Sequence[int], fixed_env: Dict[str, str]) -> str:
    """The instance EnvironmentFile text (no secret: the API key, if any, is in its own file)."""
    lines = [UNIT_HEADER, "# Instance %s. No token: the service runs offline from local paths." % spec.name]
    values: List[Tuple[str, Any]] = [
        ("PATH", service_path(spec)),
        ("CUDA_HOME", spec.cuda_home),
        ("CUDA_VISIBLE_DEVICES", ",".join(str(g) for g in gpus)),
        ("CUDA_DEVICE_ORDER", "PCI_BUS_ID"),
    ]
    values += sorted(fixed_env.items())
    if getattr(spec, "nccl_p2p_disable", False):
        values.append(("NCCL_P2P_DISABLE", "1"))  # the preflight found P2P unusable on this fabric (issue 15)
    if getattr(spec, "pcie_ipc_allreduce", False):
        values.append(("SGLANG_ENABLE_PCIE_IPC_ALLREDUCE", "1"))  # validated: tp 8, sm_120, SGLang >= 0.5.23
    values += [("HOME", STATE_DIR), ("XDG_CACHE_HOME", CACHE_DIR)]
    if spec.numa_node is not None:
        values.append(("CT200_SGLANG_NUMA_NODE", spec.numa_node))
    values.append(("CT200_SGLANG_PORT", spec.port))
    if spec.nccl_port is not None:
        values.append(("CT200_SGLANG_NCCL_PORT", spec.nccl_port))
    for key in sorted(spec.environment or {}):
        values.append((key, spec.environment[key]))
    lines += ["%s=%s" % (k, env_quote(v)) for k, v in values]
    return "\n".join(lines) + "\n"


class NotOurs(Exception):
    """A path that exists but is a symlink or not a regular file (never read through)."""


def read_existing(path: str) -> Optional[str]:
    """The text at ``path`` (None when absent); NotOurs for a symlink or a non-regular file."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise NotOurs("%s is a symlink" % path)
        raise
    try:
        if not _is_regular(fd):
            raise NotOurs("%s is not a regular file" % path)
        data = os.read(fd, READ_LIMIT + 1)
    finally:
        os.close(fd)
    return data[:READ_LIMIT].decode("utf-8", "replace")


def _is_regular(fd: int) -> bool:
    import stat
    return stat.S_ISREG(os.fstat(fd).st_mode)


def read_peers(env_dir: str, exclude: str) -> List[Dict[str, Any]]:
    """Other instances on this host, from their env files (symlinks and odd files are skipped)."""
    peers = []
    for fname in listdir_sorted(env_dir):
        if not fname.endswith(".env") or fname == "%s.env" % exclude:
            continue
        path = os.path.join(env_dir, fname)
        try:
            env = parse_env_file(read_existing(path) or "")
        except (OSError, NotOurs):
            continue
        if "CT200_SGLANG_PORT" not in env:
            continue
        gpus = [int(g) for g in env.get("CUDA_VISIBLE_DEVICES", "").split(",") if g.strip().isdigit()]
        peer = {"name": fname[:-4], "gpus": gpus, "source": path}
        for key, name in (("CT200_SGLANG_PORT", "port"), ("CT200_SGLANG_NCCL_PORT", "nccl_port")):
            if env.get(key, "").isdigit():
                peer[name] = int(env[key])
        peers.append(peer)
    return peers


# ---------------------------------------------------------------------------
# Verification
def analyze(run: Runner, unit_name: str, text: str, args: Sequence[str],
            systemd_analyze: str = "systemd-analyze") -> Tuple[int, str, str, str]:
    """Run ``systemd-analyze ARGS... FILE`` on ``text`` saved as ``unit_name`` in a private temp dir.

    Returns (rc, stdout, stderr, tempdir prefix to strip from messages).
    """
    tmp = tempfile.mkdtemp(prefix="ct200-verify-")
    try:
        path = os.path.join(tmp, unit_name)
        atomic_write(path, text, mode=0o644)
        rc, out, err = run([systemd_analyze] + list(args) + [path])
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return rc, out, err, tmp + os.sep


def verify_unit(run: Runner, unit_name: str, text: str, systemd_analyze: str = "systemd-analyze") -> List[str]:
    """``systemd-analyze verify`` the text as ``unit_name``; return problem lines (empty = clean).

    Warnings exit 0 (test-hosts.md section 8), so any output line counts as a
    problem, except the "is marked executable" note a temp file can trigger.
    """
    rc, out, err, prefix = analyze(run, unit_name, text, ["verify"], systemd_analyze)
    lines = [line for line in (out + "\n" + err).splitlines()
             if line.strip() and "is marked executable" not in line]
    if rc != 0 and not lines:
        lines = ["systemd-analyze verify exited %d" % rc]
    return [line.replace(prefix, "") for line in lines]


def security_score(run: Runner, unit_name: str, text: str, systemd_analyze: str = "systemd-analyze") -> float:
    """``systemd-analyze security --offline=true`` exposure score of the text (0 best, 10 worst)."""
    rc, out, err, _prefix = analyze(run, unit_name, text, ["security", "--offline=true", "--no-pager"],
                                    systemd_analyze)
    match = re.search(r"Overall exposure level for \S+: ([0-9.]+)", out + err)
    if not match:
        raise UnitError("systemd-analyze security printed no exposure level (rc %s): %s" % (rc, (err or out)[-400:]))
    return float(match.group(1))
