# -*- coding: utf-8 -*-
# Copyright: ct200-deploy developers
# Apache-2.0
"""systemd unit rendering, verification and atomic install for sglang_service.

PRIVATE to the collection. One instance NAME gets

* ``UNIT_DIR/sglang@NAME.service`` -- an instance of the ``sglang@`` template
  name (``%i`` = NAME), fully rendered so ``systemctl cat`` shows exactly what
  runs;
* ``ENV_DIR/NAME.env`` -- its EnvironmentFile: CUDA_VISIBLE_DEVICES, NUMA node,
  offline switches, the caller's environment, and the CT200_SGLANG_* keys the
  module reads back to keep ports and GPU sets disjoint across instances;
* ``ENV_DIR/wait-healthy.py`` -- the ExecStartPost readiness poll (stdlib only,
  run by the SGLang venv's interpreter), shared by all instances.

ExecStart arguments are always double-quoted with systemd's rules
(systemd.service(5) "Command lines"): backslash and double quote are escaped,
``%`` becomes ``%%`` (specifiers) and ``$`` becomes ``$$`` (no variable
expansion), control characters and a lone ``;`` are refused. A path with
spaces or quotes therefore stays one argument and cannot inject anything.
"""

from __future__ import annotations

import os
import re
import tempfile
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

Runner = Callable[[List[str]], Tuple[int, str, str]]

UNIT_HEADER = "# Managed by Ansible (ct200.deploy.sglang_service); local edits are overwritten."
WAIT_SCRIPT_NAME = "wait-healthy.py"
STATE_DIR = "/var/lib/sglang"
CACHE_DIR = "/var/cache/sglang"

WAIT_HEALTHY_SCRIPT = '''#!/usr/bin/env python3
# Managed by Ansible (ct200.deploy.sglang_service).
# ExecStartPost readiness poll: exit 0 once URL answers 200; exit 1 at the
# deadline or as soon as the main process is gone (systemd would otherwise keep
# the unit "activating" until this poll times out, e.g. 40 min after a crash).
# Usage: wait-healthy.py URL TIMEOUT_SECONDS
import os
import sys
import time
import urllib.request

url, deadline = sys.argv[1], time.monotonic() + float(sys.argv[2])
main_pid = int(os.environ.get("MAINPID") or 0)  # set by systemd for ExecStartPost
opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # local endpoint: never a proxy
last = "no answer yet"
while time.monotonic() < deadline:
    if main_pid and not os.path.exists("/proc/%d" % main_pid):
        print("main process %d exited before %s became healthy" % (main_pid, url), file=sys.stderr, flush=True)
        sys.exit(1)
    try:
        with opener.open(url, timeout=30) as answer:
            if answer.status == 200:
                print("healthy: %s answered 200" % url, flush=True)
                sys.exit(0)
            last = "HTTP %s" % answer.status
    except Exception as exc:  # refused while loading, 503 while warming up
        last = str(exc)
    time.sleep(2)
print("not healthy after %s s: %s (last: %s)" % (sys.argv[2], url, last), file=sys.stderr, flush=True)
sys.exit(1)
'''


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


def render_unit(spec, argv: Sequence[str], numactl: Optional[str] = None) -> str:
    """The unit text for ``sglang@NAME.service``."""
    exec_argv = list(argv)
    numa_lines: List[str] = []
    if spec.numa_node is not None:
        if numactl:
            exec_argv = [numactl, "--cpunodebind=%d" % spec.numa_node, "--membind=%d" % spec.numa_node] + exec_argv
        else:
            numa_lines = ["NUMAPolicy=bind", "NUMAMask=%d" % spec.numa_node, "CPUAffinity=numa"]
    group = spec.service_group or spec.service_user
    env_file = os.path.join(spec.env_dir, "%i.env")
    wait = [spec.python, os.path.join(spec.env_dir, WAIT_SCRIPT_NAME),
            health_url(spec.host, spec.port, spec.health_path), str(spec.start_timeout)]
    rw_paths = " ".join(systemd_quote(p) for p in spec.read_write_paths)
    lines = [
        UNIT_HEADER,
        "# Instance %s of the sglang@ template name; model %s." % (spec.name, _comment(spec.target)),
        "",
        "[Unit]",
        "Description=SGLang %i (ct200.deploy.sglang_service)",
        "Documentation=https://docs.sglang.io/",
        "After=network-online.target",
        "Wants=network-online.target",
        # A failed TP init can leak GPU memory: no retry storms.
        "StartLimitIntervalSec=%d" % spec.start_limit_interval,
        "StartLimitBurst=%d" % spec.start_limit_burst,
        "",
        "[Service]",
        # SGLang has no sd_notify; readiness comes from ExecStartPost.
        "Type=exec",
        "User=%s" % spec.service_user,
        "Group=%s" % group,
        "EnvironmentFile=%s" % env_file,
        "WorkingDirectory=%s" % STATE_DIR,
        "StateDirectory=sglang",
        "CacheDirectory=sglang",
        "ExecStart=%s" % command_line(exec_argv),
        "ExecStartPost=%s" % command_line(wait),
        "TimeoutStartSec=%d" % spec.start_timeout,
        # SIGTERM to the launcher (it drives the scheduler shutdown), SIGKILL the rest.
        "KillMode=mixed",
        "TimeoutStopSec=%d" % spec.stop_timeout,
        "Restart=on-failure",
        "RestartSec=%d" % spec.restart_sec,
        "LimitNOFILE=%s" % spec.limit_nofile,
        "LimitMEMLOCK=%s" % spec.limit_memlock,
        "SyslogIdentifier=sglang-%i",
    ] + numa_lines + [
        # Hardening. No PrivateDevices/ProtectClock/DeviceAllow: they would close /dev/nvidia*.
        "NoNewPrivileges=yes",
        "PrivateTmp=yes",
        "ProtectSystem=strict",
        "ProtectHome=read-only",
        "ProtectKernelTunables=yes",
        "ProtectKernelModules=yes",
        "ProtectKernelLogs=yes",
        "ProtectControlGroups=yes",
        "RestrictSUIDSGID=yes",
        "RestrictRealtime=yes",
        "RestrictNamespaces=yes",
        "LockPersonality=yes",
        "SystemCallArchitectures=native",
        "UMask=0027",
    ]
    if rw_paths:
        lines.append("ReadWritePaths=%s" % rw_paths)
    lines += ["", "[Install]", "WantedBy=multi-user.target", ""]
    return "\n".join(lines)


def _comment(text: Optional[str]) -> str:
    return re.sub(r"[\x00-\x1f]", "?", str(text))


def render_env(spec, gpus: Sequence[int], fixed_env: Dict[str, str]) -> str:
    """The instance EnvironmentFile text."""
    lines = [UNIT_HEADER, "# Instance %s. No token: the service runs offline from local paths." % spec.name]
    values: List[Tuple[str, Any]] = [
        ("CUDA_VISIBLE_DEVICES", ",".join(str(g) for g in gpus)),
        ("CUDA_DEVICE_ORDER", "PCI_BUS_ID"),
    ]
    values += sorted(fixed_env.items())
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


def read_peers(env_dir: str, exclude: str) -> List[Dict[str, Any]]:
    """Other instances on this host, from their env files."""
    peers = []
    try:
        names = sorted(os.listdir(env_dir))
    except OSError:
        return peers
    for fname in names:
        if not fname.endswith(".env") or fname == "%s.env" % exclude:
            continue
        path = os.path.join(env_dir, fname)
        try:
            with open(path, "r", encoding="utf-8") as handle:
                env = parse_env_file(handle.read())
        except OSError:
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
# Verification and install
def verify_unit(run: Runner, unit_name: str, text: str, workdir: Optional[str] = None,
                systemd_analyze: str = "systemd-analyze") -> List[str]:
    """``systemd-analyze verify`` the text as ``unit_name``; return problem lines (empty = clean).

    Warnings exit 0 (test-hosts.md section 8), so any output line counts as a
    problem, except the "is marked executable" note a temp file can trigger.
    """
    tmp = tempfile.mkdtemp(prefix="ct200-verify-", dir=workdir)
    path = os.path.join(tmp, unit_name)
    try:
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.chmod(path, 0o644)
        rc, out, err = run([systemd_analyze, "verify", path])
    finally:
        if os.path.exists(path):
            os.unlink(path)
        os.rmdir(tmp)
    lines = [line for line in (out + "\n" + err).splitlines()
             if line.strip() and "is marked executable" not in line]
    if rc != 0 and not lines:
        lines = ["systemd-analyze verify exited %d" % rc]
    return [line.replace(tmp + os.sep, "") for line in lines]


def read_text(path: str) -> Optional[str]:
    try:
        with open(path, "r", encoding="utf-8") as handle:
            return handle.read()
    except FileNotFoundError:
        return None


def write_atomic(path: str, content: str, mode: int,
                 atomic_move: Optional[Callable[[str, str], None]] = None) -> None:
    """Write via a temp file in the destination directory, then rename into place."""
    directory = os.path.dirname(path)
    fd, tmp = tempfile.mkstemp(prefix=".%s." % os.path.basename(path), dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(content)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, mode)
        if atomic_move is not None:
            atomic_move(tmp, path)  # keeps SELinux context; may reset the mode
        else:
            os.replace(tmp, path)
        os.chmod(path, mode)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
