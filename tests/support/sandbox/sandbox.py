#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Sandbox fleet of real systemd hosts (systemd-nspawn --boot), see sandbox.sh.

Stdlib only; runs with the machine's python3 (no venv needed) as root.

Every host is ``systemd-nspawn -D ROOTFS --boot --volatile=overlay`` in its
own cgroup (``<cgroup mounts>/ct200lab/NAME``), sharing the machine's network
namespace, or with ``--netns`` in its own network namespace on a bridge, with
sshd and a per-fleet SSH key (as production hosts are reached). The JSON state file lists the hosts with the nspawn PID and the
container's init PID (the "leader", used by ``ansible_nsenter_pid``).
A per-host registry entry (/run/ct200-sandbox/hosts/NAME.json) records which
state file owns a host, so a later ``up``/``down`` can clean up after a killed
run even when its state file was lost.

Exit codes: 0 ok, 1 operation failed (hosts did not boot, ...), 2 usage or
environment error, 3 (status only) sandbox not running.
"""
from __future__ import annotations

import argparse
import fcntl
import hashlib
import ipaddress
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]  # tests/support/sandbox/sandbox.py -> the checkout
DEFAULT_STATE = REPO / ".cache" / "sandbox" / "state.json"
DEFAULT_ROOTFS = "/var/lib/ct200-sandbox/rootfs"
REGISTRY = Path(os.environ.get("CT200_SANDBOX_REGISTRY", "/run/ct200-sandbox/hosts"))
CGROUP_ROOT = Path("/sys/fs/cgroup")
CGROUP_GROUP = "ct200lab"
DEFAULT_PREFIX = "ct200-h"
MAX_HOSTS = 20
NAME_RE = re.compile(r"^[a-z][a-z0-9-]{0,40}$")
# A clean environment for commands run inside the hosts (no controller leak).
HOST_ENV = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "LANG": "C.UTF-8"}
STATE_VERSION = 1
NET_REGISTRY = REGISTRY.parent / "nets"
NET_LOCK = REGISTRY.parent / "net.lock"
LAB_SUPERNET = ipaddress.ip_network("10.200.0.0/16")
HOST_OFFSET = 10       # host i gets .(10+i)
HUB_OFFSETS = (2, 3)   # hub namespace: API address, CDN address (another origin)
RATE_RE = re.compile(r"^[1-9][0-9]{0,5}(bit|kbit|mbit|gbit)$")


class SandboxError(Exception):
    """An error with a message naming cause and fix; exit code attached."""

    def __init__(self, msg: str, code: int = 1):
        super().__init__(msg)
        self.code = code


def log(msg: str) -> None:
    print(f"sandbox: {msg}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------- cgroups --

def cgroup_bases(root: Path = CGROUP_ROOT) -> list[Path]:
    """Hierarchies a host's processes must be placed in (per machine layout).

    unified (cgroup2 only): <root>/ct200lab
    hybrid (v1 + cgroup2 at unified/): systemd/ct200lab and unified/ct200lab
    legacy (v1 only): systemd/ct200lab
    """
    if (root / "cgroup.controllers").exists():
        return [root / CGROUP_GROUP]
    bases = []
    if (root / "systemd" / "cgroup.procs").exists():
        bases.append(root / "systemd" / CGROUP_GROUP)
    if (root / "unified" / "cgroup.controllers").exists():
        bases.append(root / "unified" / CGROUP_GROUP)
    if not bases:
        raise SandboxError(
            f"no usable cgroup hierarchy under {root} (need cgroup2 or the v1 "
            "name=systemd hierarchy); mount one, e.g. "
            "'mount -t cgroup2 none /sys/fs/cgroup/unified'", 2)
    return bases


def cgroup_pids(path: Path) -> list[int]:
    pids: list[int] = []
    if not path.is_dir():
        return pids
    for dirpath, _dirs, files in os.walk(path):
        if "cgroup.procs" in files:
            try:
                with open(os.path.join(dirpath, "cgroup.procs")) as fh:
                    pids += [int(x) for x in fh.read().split()]
            except OSError:
                pass
    return sorted(set(pids))


def rmdir_tree(path: Path) -> bool:
    """rmdir a cgroup directory depth-first; True when it is gone."""
    if not path.is_dir():
        return True
    for dirpath, dirs, _files in os.walk(path, topdown=False):
        for d in dirs:
            try:
                os.rmdir(os.path.join(dirpath, d))
            except FileNotFoundError:
                pass
            except OSError:
                return False
    try:
        os.rmdir(path)
    except FileNotFoundError:
        pass
    except OSError:
        return False
    return True


# -------------------------------------------------------------- processes --

def proc_alive(pid: int | None) -> bool:
    """True if pid exists and is not a zombie."""
    if not pid:
        return False
    try:
        with open(f"/proc/{pid}/stat") as fh:
            stat = fh.read()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def proc_cmdline(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return [a.decode(errors="replace") for a in fh.read().split(b"\0") if a]
    except OSError:
        return []


def is_our_nspawn(pid: int | None, name: str) -> bool:
    """Guard against PID reuse: pid is a live systemd-nspawn for machine name."""
    if not proc_alive(pid):
        return False
    argv = proc_cmdline(pid)
    return bool(argv) and os.path.basename(argv[0]) == "systemd-nspawn" \
        and f"--machine={name}" in argv


def children_of(pid: int) -> list[int]:
    kids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid and fields[0] != "Z":
            kids.append(int(entry))
    return kids


def find_leader(nspawn_pid: int) -> int | None:
    """The container's PID 1 as seen from the machine: nspawn's child that
    lives in another PID namespace."""
    try:
        own_ns = os.readlink(f"/proc/{nspawn_pid}/ns/pid")
    except OSError:
        return None
    for kid in children_of(nspawn_pid):
        try:
            if os.readlink(f"/proc/{kid}/ns/pid") != own_ns:
                return kid
        except OSError:
            continue
    return None


def leader_is_systemd(pid: int | None) -> bool:
    if not proc_alive(pid):
        return False
    try:
        comm = Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return False
    return comm == "systemd"


def in_host(leader: int, *cmd: str, timeout: float = 15) -> subprocess.CompletedProcess:
    return subprocess.run(["nsenter", "-t", str(leader), "-a", *cmd],
                          capture_output=True, text=True, timeout=timeout,
                          env=HOST_ENV, stdin=subprocess.DEVNULL, check=False)


def system_state(leader: int | None) -> str:
    if not leader_is_systemd(leader):
        return "dead"
    try:
        out = in_host(leader, "systemctl", "is-system-running", timeout=10).stdout.strip()
    except subprocess.TimeoutExpired:
        return "unresponsive"
    return out or "unknown"


def failed_units(leader: int) -> str:
    try:
        res = in_host(leader, "systemctl", "--failed", "--no-legend", "--plain", "--no-pager")
    except subprocess.TimeoutExpired:
        return "(systemctl --failed timed out)"
    units = [ln.split()[0] for ln in res.stdout.splitlines() if ln.strip()]
    if not units:
        return "(no failed units reported)"
    lines = []
    for unit in units[:5]:
        lines.append(f"  {unit}:")
        try:
            j = in_host(leader, "journalctl", "-u", unit, "-n", "5", "--no-pager", "-q")
            lines += [f"    {ln}" for ln in j.stdout.splitlines()]
        except subprocess.TimeoutExpired:
            pass
    return "\n".join(lines)


# ------------------------------------------------------------ state files --

def read_json(path: Path) -> dict | None:
    try:
        with open(path) as fh:
            return json.load(fh)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        log(f"ignoring unreadable {path}: {exc}")
        return None


def write_json(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w") as fh:
        json.dump(data, fh, indent=2, sort_keys=True)
        fh.write("\n")
    os.replace(tmp, path)


class FileLock:
    """An exclusive flock on PATH, waited for at most WAIT seconds."""

    def __init__(self, path: Path, wait: float, holder: str):
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path, self.wait, self.holder = path, wait, holder
        self.fh = None

    def __enter__(self):
        self.fh = open(self.path, "w")
        deadline = time.monotonic() + self.wait
        while True:
            try:
                fcntl.flock(self.fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return self
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise SandboxError(f"{self.path} is held by {self.holder} for {self.wait:.0f}s") from None
                time.sleep(0.2)

    def __exit__(self, *exc):
        fcntl.flock(self.fh, fcntl.LOCK_UN)
        self.fh.close()


def state_lock(state: Path) -> FileLock:
    """Serialises up/down/status on one state file."""
    return FileLock(state.with_name(state.name + ".lock"), 300, "another sandbox.sh on this state file")


def registry_entry(name: str) -> dict | None:
    return read_json(REGISTRY / f"{name}.json")


def state_lists(state_file: str, name: str) -> bool:
    data = read_json(Path(state_file))
    return bool(data) and any(h.get("name") == name for h in data.get("hosts", []))


# ------------------------------------------------------------ host control --

def host_pids(name: str, bases: list[Path]) -> list[int]:
    pids: set[int] = set()
    for base in bases:
        pids.update(p for p in cgroup_pids(base / name) if proc_alive(p))
    return sorted(pids)


def stop_host(name: str, nspawn_pid: int | None, bases: list[Path], grace: float = 20,
              leader_pid: int | None = None) -> list[str]:
    """Power a host off (SIGTERM to nspawn -> orderly shutdown), SIGKILL what
    is left in its cgroups, remove the cgroups and registry entry.
    Returns a list of problems (empty when everything is gone)."""
    if is_our_nspawn(nspawn_pid, name):
        try:
            os.kill(nspawn_pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    elif leader_pid and leader_pid in host_pids(name, bases) and leader_is_systemd(leader_pid):
        # nspawn is gone (killed) but the host's systemd lives on: ask it to
        # power off the way nspawn would have (SIGRTMIN+3 = poweroff).
        try:
            os.kill(leader_pid, signal.SIGRTMIN + 3)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        if not is_our_nspawn(nspawn_pid, name) and not host_pids(name, bases):
            break
        time.sleep(0.2)
    problems = []
    for attempt in range(3):
        pids = host_pids(name, bases)
        if is_our_nspawn(nspawn_pid, name):
            pids.append(nspawn_pid)
        if not pids:
            break
        if attempt == 0:
            log(f"{name}: still running after {grace:.0f}s, sending SIGKILL to {len(pids)} process(es)")
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.5)
    else:
        problems.append(f"{name}: processes survive SIGKILL: {host_pids(name, bases)}")
    for base in bases:
        gone = False
        for _unused in range(25):
            if rmdir_tree(base / name):
                gone = True
                break
            time.sleep(0.2)
        if not gone:
            problems.append(f"{name}: cannot remove cgroup {base / name}")
    try:
        (REGISTRY / f"{name}.json").unlink()
    except FileNotFoundError:
        pass
    return problems


def cleanup_bases(bases: list[Path]) -> None:
    for base in bases:
        try:
            base.rmdir()  # only succeeds when no fleet uses it any more
        except OSError:
            pass


def parse_bind(spec: str) -> dict:
    parts = spec.split(":")
    if len(parts) == 2:
        src, dst, mode = parts[0], parts[1], "rw"
    elif len(parts) == 3 and parts[2] in ("ro", "rw"):
        src, dst, mode = parts
    else:
        raise SandboxError(f"--bind '{spec}': expected SRC:DST or SRC:DST:ro "
                           "(absolute paths without ':' or ',')", 2)
    if not src.startswith("/") or not dst.startswith("/") or "," in spec:
        raise SandboxError(f"--bind '{spec}': SRC and DST must be absolute paths without ','", 2)
    if not os.path.exists(src):
        raise SandboxError(f"--bind '{spec}': source {src} does not exist; create it or drop the --bind", 2)
    return {"src": os.path.realpath(src), "dst": os.path.normpath(dst), "mode": mode}


def nspawn_argv(rootfs: str, name: str, binds: list[dict], plan: dict | None = None,
                persist_root: str | None = None) -> list[str]:
    """persist_root: the host's own overlay of the rootfs (--persist), which outlives nspawn across a reboot;
    otherwise nspawn keeps the writes in RAM (--volatile=overlay) and they go when it exits."""
    storage = ["-D", persist_root] if persist_root else ["-D", rootfs, "--volatile=overlay"]
    argv = ["systemd-nspawn", *storage, "--boot", "--register=no", "--keep-unit",
            f"--machine={name}", f"--hostname={name}", "--console=passive"]
    for b in binds:
        flag = "--bind-ro" if b["mode"] == "ro" else "--bind"
        argv.append(f"{flag}={b['src']}:{b['dst']}")
    init_args: list[str] = []
    if plan:
        opts, init_args = nspawn_net_argv(plan, name)
        argv += opts
    return argv + init_args


# ------------------------------------------------------------ persistence --
# --persist: a host's writes go to an overlay of the rootfs whose upper layer is on disk
# (<state dir>/persist/NAME), mounted here before nspawn starts and kept until 'down'. A reboot
# inside the host ends nspawn (--keep-unit makes it exit 133, as systemd-nspawn@.service expects,
# whose RestartForceExitStatus=133 starts it again); 'reboot' does that restart, and the host boots
# from what it wrote before, like a disk.

def persist_dir(state_path: Path, name: str) -> Path:
    return state_path.parent / "persist" / state_path.stem / name


def mount_persistent_root(rootfs: str, state_path: Path, name: str) -> str:
    """Mount (once) and return the merged root of a --persist host."""
    base = persist_dir(state_path, name)
    upper, work, root = base / "upper", base / "work", base / "root"
    for d in (upper, work, root):
        d.mkdir(parents=True, exist_ok=True)
    if not os.path.ismount(root):
        run_cmd(["mount", "-t", "overlay", "overlay", "-o",
                 f"lowerdir={rootfs},upperdir={upper},workdir={work}", str(root)])
    return str(root)


def remove_persistent_root(state_path: Path, name: str) -> list[str]:
    base = persist_dir(state_path, name)
    root = base / "root"
    if os.path.ismount(root):
        res = run_cmd(["umount", str(root)], check=False)
        if res.returncode != 0:
            return [f"{name}: cannot unmount {root}: {res.stderr.strip()}"]
    shutil.rmtree(base, ignore_errors=True)
    return []


def spawn(name: str, argv: list[str], bases: list[Path], logfile: Path) -> int:
    for base in bases:
        (base / name).mkdir(parents=True, exist_ok=True)
    procs_files = [str(base / name / "cgroup.procs") for base in bases]

    def enter_cgroup():  # runs in the child between fork and exec
        os.setsid()
        me = str(os.getpid())
        for f in procs_files:
            with open(f, "w") as fh:
                fh.write(me)

    logfile.parent.mkdir(parents=True, exist_ok=True)
    with open(logfile, "ab") as out:  # appended: a rebooted host's log keeps its earlier boots
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out,
                                stderr=subprocess.STDOUT, close_fds=True,
                                preexec_fn=enter_cgroup, env=HOST_ENV)
    return proc.pid


def tail(path: Path, n: int = 15) -> str:
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return "(no log)"
    return "\n".join("    " + ln for ln in lines[-n:])


# ---------------------------------------------------------------- network --
# --netns: every host gets its own network namespace (/run/netns/NAME) with one
# veth whose other end sits on a per-fleet bridge in the machine's namespace.
# The bridge holds the gateway address (.1): the controller reaches the hosts
# directly and a Hub bound to .1 is reachable from every host.  With --hub-netns
# a Hub gets a namespace of its own (.2 API, .3 CDN) behind its own shaped link.
# Hosts have no default route: they reach the lab subnet only.

def run_cmd(argv: list[str], timeout: float = 15, check: bool = True,
            stdin_text: str | None = None) -> subprocess.CompletedProcess:
    try:
        res = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False,
                             input=stdin_text, stdin=None if stdin_text is not None else subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise SandboxError(f"'{' '.join(argv)}' did not finish in {timeout:.0f}s") from None
    if check and res.returncode != 0:
        raise SandboxError(f"'{' '.join(argv)}' failed (rc {res.returncode}): {res.stderr.strip()}")
    return res


def fleet_id(state_path: Path) -> str:
    """Short, stable per state file: interface names (15 chars max) derive from it."""
    return hashlib.sha256(str(state_path).encode()).hexdigest()[:6]


def net_dir(state_path: Path) -> Path:
    """Keys, known_hosts, ssh_config and SSH control sockets of one fleet."""
    return state_path.parent / f"{state_path.stem}-net"


def parse_rate(value: str | None, flag: str) -> str | None:
    if value is None:
        return None
    if not RATE_RE.match(value):
        raise SandboxError(f"{flag} '{value}': give a tc rate such as 100mbit, 40mbit or 500kbit", 2)
    return value


def tbf_args(rate: str) -> list[str]:
    """Token bucket for one link direction; the burst is 10 ms of traffic (at
    least 32 KiB) so that rates up to a few Gbit/s are reachable at HZ=250."""
    num, unit = re.match(r"^(\d+)([a-z]+)$", rate).groups()
    bits = int(num) * {"bit": 1, "kbit": 10**3, "mbit": 10**6, "gbit": 10**9}[unit]
    burst = max(32 * 1024, bits // 8 // 100)
    return ["root", "tbf", "rate", rate, "burst", str(burst), "latency", "100ms"]


def used_networks() -> list:
    out = run_cmd(["ip", "-j", "-4", "addr", "show"]).stdout
    nets = []
    for link in json.loads(out or "[]"):
        for addr in link.get("addr_info", []):
            nets.append(ipaddress.ip_interface(f"{addr['local']}/{addr['prefixlen']}").network)
    return nets


def pick_subnet(requested: str | None) -> ipaddress.IPv4Network:
    used = used_networks()
    if requested:
        try:
            net = ipaddress.ip_network(requested, strict=True)
        except ValueError as exc:
            raise SandboxError(f"--subnet '{requested}': {exc}; give a /24 such as 10.200.7.0/24", 2) from None
        if net.version != 4 or net.prefixlen != 24:
            raise SandboxError(f"--subnet '{requested}': give an IPv4 /24 such as 10.200.7.0/24", 2)
        if any(net.overlaps(u) for u in used):
            raise SandboxError(f"--subnet {net} is already in use on this machine: choose another "
                               "or leave --subnet out to pick a free one", 2)
        return net
    for net in LAB_SUPERNET.subnets(new_prefix=24):
        if not any(net.overlaps(u) for u in used):
            return net
    raise SandboxError(f"no free /24 left in {LAB_SUPERNET}: bring other fleets down", 1)


def net_plan(state_path: Path, names: list[str], subnet, link_rate: str | None,
             hub: bool, hub_rate: str | None) -> dict:
    fid = fleet_id(state_path)
    base = subnet.network_address
    ndir = net_dir(state_path)
    plan = {
        "mode": "netns", "fleet_id": fid, "subnet": str(subnet), "prefixlen": subnet.prefixlen,
        "bridge": f"cb{fid}", "gateway": str(base + 1), "link_rate": link_rate,
        "dir": str(ndir), "ssh_key": str(ndir / "id_ed25519"),
        "known_hosts": str(ndir / "known_hosts"), "ssh_config": str(ndir / "ssh_config"),
        "control_path_dir": str(ndir / "cp"),
        "hosts": {name: {"netns": name, "veth": f"cv{fid}{i:02d}", "address": str(base + HOST_OFFSET + i)}
                  for i, name in enumerate(names, 1)},
        "hub": None,
    }
    if hub:
        plan["hub"] = {"netns": f"ct200hub-{fid}", "veth": f"cv{fid}hb", "rate": hub_rate,
                       "address": str(base + HUB_OFFSETS[0]), "cdn_address": str(base + HUB_OFFSETS[1])}
    return plan


def plan_namespaces(plan: dict) -> list[str]:
    spaces = [h["netns"] for h in plan["hosts"].values()]
    return spaces + ([plan["hub"]["netns"]] if plan.get("hub") else [])


def netns_exists(name: str) -> bool:
    return Path("/run/netns", name).exists()


def link_exists(name: str) -> bool:
    return Path("/sys/class/net", name).exists()


def shape(dev: str, rate: str | None, netns: str | None = None) -> None:
    if rate:
        run_cmd(["tc", *(["-n", netns] if netns else []), "qdisc", "replace", "dev", dev, *tbf_args(rate)])


def add_endpoint(plan: dict, netns: str, veth: str, addresses: list[str], rate: str | None) -> None:
    """Namespace + veth (eth0 inside, veth on the bridge outside), addresses,
    and the same rate on both directions of the link."""
    prefix = f"/{plan['prefixlen']}"
    run_cmd(["ip", "netns", "add", netns])
    run_cmd(["ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", netns])
    run_cmd(["ip", "link", "set", veth, "master", plan["bridge"], "up"])
    for addr in addresses:
        run_cmd(["ip", "-n", netns, "addr", "add", addr + prefix, "dev", "eth0"])
    run_cmd(["ip", "-n", netns, "link", "set", "lo", "up"])
    run_cmd(["ip", "-n", netns, "link", "set", "eth0", "up"])
    shape(veth, rate)
    shape("eth0", rate, netns)


def setup_network(plan: dict, state_path: Path) -> None:
    """Create bridge, namespaces, veths and qdiscs; the registry entry is
    written first so that a killed run is cleaned up by the next up/down."""
    for ns in plan_namespaces(plan):
        if netns_exists(ns):
            raise SandboxError(f"network namespace {ns} exists and is not owned by {state_path}: "
                               f"remove it ('ip netns del {ns}') or choose another --name", 2)
    write_json(NET_REGISTRY / f"{plan['bridge']}.json",
               {"state_file": str(state_path), "bridge": plan["bridge"],
                "netns": plan_namespaces(plan), "dir": plan["dir"]})
    run_cmd(["ip", "link", "add", plan["bridge"], "type", "bridge"])
    run_cmd(["ip", "addr", "add", f"{plan['gateway']}/{plan['prefixlen']}", "dev", plan["bridge"]])
    run_cmd(["ip", "link", "set", plan["bridge"], "up"])
    for h in plan["hosts"].values():
        add_endpoint(plan, h["netns"], h["veth"], [h["address"]], plan["link_rate"])
    if plan.get("hub"):
        hub = plan["hub"]
        add_endpoint(plan, hub["netns"], hub["veth"], [hub["address"], hub["cdn_address"]], hub["rate"])


def teardown_network(entry: dict) -> list[str]:
    """Remove the namespaces (their veths and qdiscs go with them), the bridge,
    the SSH control masters and the key directory of one fleet."""
    problems = []
    if entry.get("dir"):
        close_control_masters(Path(entry["dir"]) / "cp")
    for ns in entry.get("netns", []):
        if netns_exists(ns):
            res = run_cmd(["ip", "netns", "del", ns], check=False)
            if res.returncode != 0:
                problems.append(f"cannot remove network namespace {ns}: {res.stderr.strip()}")
    bridge = entry.get("bridge")
    if bridge and link_exists(bridge):
        res = run_cmd(["ip", "link", "del", bridge], check=False)
        if res.returncode != 0:
            problems.append(f"cannot remove bridge {bridge}: {res.stderr.strip()}")
    if not problems:
        if entry.get("dir"):
            shutil.rmtree(entry["dir"], ignore_errors=True)
        try:
            (NET_REGISTRY / f"{bridge}.json").unlink()
        except FileNotFoundError:
            pass
    return problems


def close_control_masters(cp_dir: Path) -> None:
    """OpenSSH ControlPersist masters of Ansible would outlive the hosts (and
    be reused by a later fleet on the same address): ask each to exit."""
    if not cp_dir.is_dir():
        return
    for sock in cp_dir.iterdir():
        try:
            subprocess.run(["ssh", "-O", "exit", "-o", f"ControlPath={sock}", "sandbox-host"],
                           capture_output=True, timeout=5, check=False, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            log(f"ssh control master {sock} did not exit in 5s")


def make_ssh_material(plan: dict) -> None:
    """A per-fleet client key, one host key per host, and the known_hosts /
    ssh_config the controller uses (strict host key checking stays on)."""
    ndir = Path(plan["dir"])
    if ndir.exists():
        shutil.rmtree(ndir)
    ndir.mkdir(parents=True, mode=0o700)
    (ndir / "cp").mkdir(mode=0o700)
    keygen = ["ssh-keygen", "-q", "-t", "ed25519", "-N", ""]
    run_cmd([*keygen, "-C", f"ct200-sandbox-{plan['fleet_id']}", "-f", plan["ssh_key"]])
    known = []
    for name, h in plan["hosts"].items():
        hdir = ndir / "hosts" / name
        hdir.mkdir(parents=True, mode=0o700)
        run_cmd([*keygen, "-C", name, "-f", str(hdir / "ssh_host_ed25519_key")])
        kind, blob = (hdir / "ssh_host_ed25519_key.pub").read_text().split()[:2]
        known.append(f"{name},{h['address']} {kind} {blob}")
    Path(plan["known_hosts"]).write_text("\n".join(known) + "\n")
    targets = " ".join([*plan["hosts"], *(h["address"] for h in plan["hosts"].values())])
    lines = [f"Host {name}\n  HostName {h['address']}" for name, h in plan["hosts"].items()]
    lines.append(f"Host {targets}\n  User root\n  IdentityFile {plan['ssh_key']}\n  IdentitiesOnly yes\n"
                 f"  UserKnownHostsFile {plan['known_hosts']}\n  StrictHostKeyChecking yes\n"
                 "  BatchMode yes\n  ConnectTimeout 5\n  LogLevel ERROR")
    Path(plan["ssh_config"]).write_text("\n".join(lines) + "\n")


def nspawn_net_argv(plan: dict, name: str) -> tuple[list[str], list[str]]:
    """(nspawn options, init arguments) that put a host in its namespace with sshd."""
    hkey = Path(plan["dir"]) / "hosts" / name / "ssh_host_ed25519_key"
    opts = [f"--network-namespace-path=/run/netns/{plan['hosts'][name]['netns']}",
            f"--bind-ro={hkey}:/etc/ssh/ssh_host_ed25519_key",
            f"--bind-ro={hkey}.pub:/etc/ssh/ssh_host_ed25519_key.pub",
            f"--bind-ro={plan['ssh_key']}.pub:/root/.ssh/authorized_keys"]
    # systemd in a container reads its own argv as the kernel command line.
    return opts, ["systemd.wants=ssh.service"]


def etc_hosts(plan: dict) -> str:
    lines = ["127.0.0.1\tlocalhost", "::1\tlocalhost ip6-localhost ip6-loopback",
             f"{plan['gateway']}\tct200-lab-gateway"]
    if plan.get("hub"):
        lines += [f"{plan['hub']['address']}\tct200-hub", f"{plan['hub']['cdn_address']}\tct200-hub-cdn"]
    lines += [f"{h['address']}\t{name}" for name, h in plan["hosts"].items()]
    return "\n".join(lines) + "\n"


def ssh_argv(plan: dict, target: str, *cmd: str) -> list[str]:
    return ["ssh", "-F", plan["ssh_config"], target, *cmd]


def finish_hosts(plan: dict, state: dict, timeout: float) -> None:
    """Write /etc/hosts in every host, then prove SSH login to each (bounded)."""
    hosts_file = etc_hosts(plan)
    for host in state["hosts"]:
        res = in_host_input(host["leader_pid"], hosts_file, "sh", "-c", "cat > /etc/hosts")
        if res.returncode != 0:
            raise SandboxError(f"{host['name']}: cannot write /etc/hosts: {res.stderr.strip()}")
    deadline = time.monotonic() + timeout

    def login(name: str) -> str | None:
        while True:
            res = run_cmd(ssh_argv(plan, name, "true"), timeout=15, check=False)
            if res.returncode == 0:
                return None
            if time.monotonic() > deadline:
                return f"{name}: ssh root@{plan['hosts'][name]['address']} failed: {res.stderr.strip()}"
            time.sleep(0.2)

    with ThreadPoolExecutor(max_workers=8) as pool:
        errors = [e for e in pool.map(login, plan["hosts"]) if e]
    if errors:
        raise SandboxError("SSH to the hosts failed:\n  " + "\n  ".join(errors))


def in_host_input(leader: int, text: str, *cmd: str) -> subprocess.CompletedProcess:
    return subprocess.run(["nsenter", "-t", str(leader), "-a", *cmd], input=text, capture_output=True,
                          text=True, timeout=15, env=HOST_ENV, check=False)


# ----------------------------------------------------------------- commands --

def hosts_of(state: dict | None) -> list[dict]:
    return list(state.get("hosts", [])) if state else []


def down_state(state_path: Path, bases: list[Path]) -> list[str]:
    """Stop every host owned by state_path (state file + registry)."""
    state = read_json(state_path)
    targets = {h["name"]: (h.get("nspawn_pid"), h.get("leader_pid"))
               for h in hosts_of(state) if "name" in h}
    if REGISTRY.is_dir():
        for entry in REGISTRY.glob("*.json"):
            reg = read_json(entry)
            if reg and reg.get("state_file") == str(state_path):
                targets.setdefault(reg["name"], (reg.get("nspawn_pid"), None))
    problems: list[str] = []
    for name, (pid, _leader) in targets.items():  # all hosts shut down in parallel
        if is_our_nspawn(pid, name):
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
    for name, (pid, leader) in sorted(targets.items()):
        problems += stop_host(name, pid, bases, leader_pid=leader)
        if not problems:
            problems += remove_persistent_root(state_path, name)
    if not problems:  # namespaces go only once no host process is left in them
        problems += down_networks(state_path, state)
    if not problems:
        for p in (state_path, state_path.with_name(state_path.name + ".lock")):
            try:
                p.unlink()
            except FileNotFoundError:
                pass
    cleanup_bases(bases)
    return problems


def down_networks(state_path: Path, state: dict | None) -> list[str]:
    entries = []
    net = (state or {}).get("network") or {}
    if net.get("mode") == "netns":
        entries.append({"bridge": net["bridge"], "netns": plan_namespaces(net), "dir": net["dir"]})
    if NET_REGISTRY.is_dir():
        for path in NET_REGISTRY.glob("*.json"):
            reg = read_json(path)
            if reg and reg.get("state_file") == str(state_path):
                entries.append(reg)
    problems: list[str] = []
    for entry in entries:
        problems += teardown_network(entry)
    return problems


def healthy(state: dict) -> bool:
    return bool(hosts_of(state)) and all(
        is_our_nspawn(h.get("nspawn_pid"), h["name"]) and system_state(h.get("leader_pid")) == "running"
        for h in hosts_of(state))


# Every booted host's systemd, journald and udev each hold inotify instances of the
# machine's root user; the default of 128 is spent by about 10 hosts, after which a
# host's PID 1 dies at boot with "Failed to allocate manager object: Too many open files".
INOTIFY_MINIMUM = {"max_user_instances": 8192, "max_user_watches": 524288}


def ensure_inotify_limits(proc_dir: Path = Path("/proc/sys/fs/inotify")) -> list[str]:
    """Raise the machine's inotify limits to what a fleet needs; returns what was raised."""
    raised = []
    for key, minimum in INOTIFY_MINIMUM.items():
        path = proc_dir / key
        try:
            current = int(path.read_text().strip())
            if current < minimum:
                path.write_text(str(minimum))
                raised.append(f"{key} {current} -> {minimum}")
        except (OSError, ValueError) as exc:
            log(f"cannot raise fs.inotify.{key} ({exc}); hosts may fail to boot with 'Too many open files'")
    return raised


def cmd_up(args) -> int:
    if os.geteuid() != 0:
        raise SandboxError("must run as root (systemd-nspawn, cgroups, nsenter)", 2)
    for change in ensure_inotify_limits():
        log(f"raised fs.inotify.{change}")
    if args.names:
        names = [n.strip() for n in args.names.split(",") if n.strip()]
        if args.name is not None:
            raise SandboxError("give either --name PREFIX or --names LIST, not both", 2)
        if args.count is not None and args.count != len(names):
            raise SandboxError(f"N={args.count} but --names lists {len(names)} host(s)", 2)
        if len(set(names)) != len(names):
            raise SandboxError(f"--names has duplicates: {args.names}", 2)
        args.count = len(names)
    elif args.count is None:
        raise SandboxError("give the number of hosts N (or --names LIST)", 2)
    else:
        names = [f"{DEFAULT_PREFIX}{i}" if args.name is None else f"{args.name}-{i}"
                 for i in range(1, args.count + 1)]
    if not 1 <= args.count <= MAX_HOSTS:
        raise SandboxError(f"N must be between 1 and {MAX_HOSTS}, got {args.count}", 2)
    for n in names:
        if not NAME_RE.match(n):
            raise SandboxError(f"host name '{n}' is invalid: use --name with lowercase letters, "
                               "digits and '-' (starting with a letter)", 2)
    rootfs = os.path.realpath(args.rootfs)
    if not os.access(os.path.join(rootfs, "lib/systemd/systemd"), os.X_OK):
        raise SandboxError(f"no bootable rootfs at {rootfs}: run tests/support/sandbox/build-rootfs.sh "
                           "(or set CT200_SANDBOX_ROOTFS)", 2)
    for tool in ("systemd-nspawn", "nsenter"):
        if not shutil.which(tool):
            raise SandboxError(f"'{tool}' not found: run tests/support/sandbox/build-rootfs.sh (installs "
                               "systemd-container and util-linux) or apt-get install them", 2)
    binds = [parse_bind(b) for b in args.bind]
    net_options = check_net_options(args, rootfs)
    bases = cgroup_bases()
    state_path = Path(args.state).resolve()
    logdir = state_path.parent / "logs"

    with state_lock(state_path):
        old = read_json(state_path)
        wanted = {"names": names, "rootfs": rootfs, "binds": binds, "net_options": net_options,
                  "persist": bool(args.persist)}
        if old and not args.recreate and {k: old.get(k) for k in wanted} == wanted and healthy(old):
            log(f"{len(names)} host(s) already running from {state_path}; nothing to do "
                "(use --recreate for fresh hosts)")
            print(json.dumps(old, indent=2))
            return 0
        if old or any(d.is_dir() and any(d.glob("*.json")) for d in (REGISTRY, NET_REGISTRY)):
            problems = down_state(state_path, bases)
            if problems:
                raise SandboxError("could not clean the previous fleet:\n  " + "\n  ".join(problems))
        # Names we are about to use must not belong to another live fleet.
        for name in names:
            reg = registry_entry(name)
            live = host_pids(name, bases) or (reg and is_our_nspawn(reg.get("nspawn_pid"), name))
            if live and reg and reg.get("state_file") != str(state_path) \
                    and state_lists(reg["state_file"], name):
                raise SandboxError(
                    f"host {name} is running for another fleet ({reg['state_file']}); run "
                    f"'tests/support/sandbox/sandbox.sh down --state {reg['state_file']}' or choose another --name", 2)
            if live or reg or any((b / name).exists() for b in bases):
                log(f"{name}: removing leftovers of a previous run")
                problems = stop_host(name, reg.get("nspawn_pid") if reg else None, bases)
                if problems:
                    raise SandboxError("; ".join(problems))

        def on_term(signum, _frame):
            raise SandboxError(f"interrupted by signal {signum}; hosts removed")
        signal.signal(signal.SIGTERM, on_term)
        signal.signal(signal.SIGHUP, on_term)
        started = time.monotonic()
        state = {"version": STATE_VERSION, "state_file": str(state_path), "rootfs": rootfs,
                 "names": names, "binds": binds, "cgroups": [str(b) for b in bases],
                 "net_options": net_options, "network": {"mode": "shared"}, "persist": bool(args.persist),
                 "status": "starting", "hosts": []}
        REGISTRY.mkdir(parents=True, exist_ok=True)
        plan = None
        try:
            if net_options:
                plan = prepare_network(state_path, names, net_options)
                state["network"] = plan
                write_json(state_path, state)
            for index, name in enumerate(names, 1):
                logfile = logdir / f"{name}.log"
                if logfile.exists():
                    logfile.unlink()
                root = mount_persistent_root(rootfs, state_path, name) if args.persist else None
                pid = spawn(name, nspawn_argv(rootfs, name, binds, plan, root), bases, logfile)
                host = {"name": name, "index": index, "nspawn_pid": pid, "leader_pid": None,
                        "log": str(logfile), "root": root}
                if plan:
                    host.update(plan["hosts"][name])
                state["hosts"].append(host)
                # Written after every spawn: a killed 'up' leaves a usable trail.
                write_json(REGISTRY / f"{name}.json", {"name": name, "nspawn_pid": pid,
                                                       "state_file": str(state_path)})
                write_json(state_path, state)
            wait_running(state, args.timeout)
            if plan:
                finish_hosts(plan, state, timeout=max(10.0, args.timeout - (time.monotonic() - started)))
        except BaseException as exc:
            if args.keep_on_failure:
                state["status"] = "failed"
                write_json(state_path, state)
                log(f"hosts kept for debugging; clean up with: tests/support/sandbox/sandbox.sh down --state {state_path}")
            else:
                problems = down_state(state_path, bases)
                if problems:
                    log("cleanup after failure left problems:\n  " + "\n  ".join(problems))
            if isinstance(exc, subprocess.TimeoutExpired):
                raise SandboxError(f"command timed out: {exc}") from None
            raise
        state["status"] = "running"
        write_json(state_path, state)
    log(f"{len(names)} host(s) running in {time.monotonic() - started:.1f}s; state {state_path}")
    print(json.dumps(state, indent=2))
    return 0


def check_net_options(args, rootfs: str) -> dict | None:
    """The network options of 'up' (None: hosts share the machine's namespace)."""
    link_rate = parse_rate(args.link_rate, "--link-rate")
    hub_rate = parse_rate(args.hub_rate, "--hub-rate")
    hub = args.hub_netns or hub_rate is not None
    if not args.netns:
        given = [f for f, v in (("--link-rate", link_rate), ("--hub-netns/--hub-rate", hub),
                                ("--subnet", args.subnet)) if v]
        if given:
            raise SandboxError(f"{', '.join(given)} need --netns (hosts in their own network namespaces)", 2)
        return None
    for tool, pkg in (("ip", "iproute2"), ("tc", "iproute2"), ("ssh", "openssh-client"),
                      ("ssh-keygen", "openssh-client")):
        if not shutil.which(tool):
            raise SandboxError(f"--netns needs '{tool}' on this machine: apt-get install {pkg}", 2)
    if not os.access(os.path.join(rootfs, "usr/sbin/sshd"), os.X_OK):
        raise SandboxError(f"the rootfs {rootfs} has no sshd (built before --netns existed): "
                           "run tests/support/sandbox/build-rootfs.sh (it rebuilds when the package list changed)", 2)
    return {"link_rate": link_rate, "hub": hub, "hub_rate": hub_rate, "subnet": args.subnet}


def net_lock() -> FileLock:
    """Subnets are picked machine-wide: one fleet at a time takes a free one."""
    return FileLock(NET_LOCK, 60, "another sandbox.sh picking a subnet")


def prepare_network(state_path: Path, names: list[str], opts: dict) -> dict:
    with net_lock():
        subnet = pick_subnet(opts["subnet"])
        plan = net_plan(state_path, names, subnet, opts["link_rate"], opts["hub"], opts["hub_rate"])
        setup_network(plan, state_path)
    make_ssh_material(plan)
    return plan


def wait_running(state: dict, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    pending = {h["name"]: h for h in state["hosts"]}
    last: dict[str, str] = {}
    while pending:
        for name, host in list(pending.items()):
            if not is_our_nspawn(host["nspawn_pid"], name):
                raise SandboxError(f"{name}: systemd-nspawn exited during boot; last lines of "
                                   f"{host['log']}:\n{tail(Path(host['log']))}")
            if host["leader_pid"] is None:
                host["leader_pid"] = find_leader(host["nspawn_pid"])
                if host["leader_pid"] is None:
                    continue
                write_json(Path(state["state_file"]), state)
            st = system_state(host["leader_pid"])
            last[name] = st
            if st == "running":
                del pending[name]
            elif st == "degraded":
                raise SandboxError(f"{name} booted 'degraded'; failed units:\n"
                                   f"{failed_units(host['leader_pid'])}")
        if not pending:
            return
        if time.monotonic() > deadline:
            detail = ", ".join(f"{n}={last.get(n, 'no init yet')}" for n in sorted(pending))
            raise SandboxError(f"hosts not running after {timeout:.0f}s ({detail}); logs in "
                               f"{Path(state['state_file']).parent / 'logs'}; raise --timeout "
                               "if the machine is busy")
        time.sleep(0.25)


def cmd_down(args) -> int:
    if os.geteuid() != 0:
        raise SandboxError("must run as root", 2)
    state_path = Path(args.state).resolve()
    bases = cgroup_bases()
    with state_lock(state_path):
        state = read_json(state_path)
        n = len(hosts_of(state))
        started = time.monotonic()
        problems = down_state(state_path, bases)
    if problems:
        raise SandboxError("down left problems:\n  " + "\n  ".join(problems))
    log(f"down: {n} host(s) stopped in {time.monotonic() - started:.1f}s" if n
        else f"down: nothing running for {state_path}")
    return 0


def cmd_status(args) -> int:
    state_path = Path(args.state).resolve()
    state = read_json(state_path)
    if not hosts_of(state):
        if args.json:
            print(json.dumps({"state_file": str(state_path), "hosts": []}))
        else:
            print(f"sandbox is not running (no state at {state_path}): run tests/support/sandbox/sandbox.sh up N")
        return 3
    rows = []
    for h in hosts_of(state):
        st = system_state(h.get("leader_pid"))
        if st != "dead" and not is_our_nspawn(h.get("nspawn_pid"), h["name"]):
            st = f"orphaned ({st}, systemd-nspawn gone; run tests/support/sandbox/sandbox.sh down)"
        rows.append({"name": h["name"], "nspawn_pid": h.get("nspawn_pid"),
                     "leader_pid": h.get("leader_pid"), "address": h.get("address"), "state": st})
    if args.json:
        print(json.dumps({"state_file": str(state_path), "hosts": rows,
                          "network": state.get("network") or {"mode": "shared"}}, indent=2))
    else:
        print(f"{'NAME':<20} {'NSPAWN':>8} {'LEADER':>8} {'ADDRESS':>15}  STATE")
        for r in rows:
            print(f"{r['name']:<20} {r['nspawn_pid'] or '-':>8} {r['leader_pid'] or '-':>8} "
                  f"{r['address'] or 'shared':>15}  {r['state']}")
    return 0 if all(r["state"] == "running" for r in rows) else 1


def cmd_shape(args) -> int:
    """Re-shape the links of a running --netns fleet (tc qdisc replace)."""
    if os.geteuid() != 0:
        raise SandboxError("must run as root", 2)
    link_rate = parse_rate(args.link_rate, "--link-rate")
    hub_rate = parse_rate(args.hub_rate, "--hub-rate")
    if not link_rate and not hub_rate:
        raise SandboxError("give --link-rate RATE and/or --hub-rate RATE", 2)
    state_path = Path(args.state).resolve()
    with state_lock(state_path):
        state = read_json(state_path)
        net = (state or {}).get("network") or {}
        if net.get("mode") != "netns":
            raise SandboxError(f"no --netns fleet in {state_path}: start one with 'up N --netns'", 2)
        if hub_rate and not net.get("hub"):
            raise SandboxError("this fleet has no Hub namespace: bring it up with --hub-netns", 2)
        if link_rate:
            for h in net["hosts"].values():
                shape(h["veth"], link_rate)
                shape("eth0", link_rate, h["netns"])
            net["link_rate"] = link_rate
        if hub_rate:
            shape(net["hub"]["veth"], hub_rate)
            shape("eth0", hub_rate, net["hub"]["netns"])
            net["hub"]["rate"] = hub_rate
        write_json(state_path, state)
    log(f"shaped: hosts {net.get('link_rate') or 'unshaped'}, hub "
        f"{(net.get('hub') or {}).get('rate') or 'unshaped'}")
    return 0


REBOOT_LINE = "is being rebooted"  # systemd-nspawn: "Container NAME is being rebooted."


def cmd_reboot(args) -> int:
    """'systemctl reboot' inside a --persist host, then start its nspawn again and wait until it runs."""
    if os.geteuid() != 0:
        raise SandboxError("must run as root", 2)
    state_path = Path(args.state).resolve()
    bases = cgroup_bases()
    with state_lock(state_path):
        state = read_json(state_path)
        host = next((h for h in hosts_of(state) if h["name"] == args.host), None)
        if host is None or not leader_is_systemd(host.get("leader_pid")):
            raise SandboxError(f"host {args.host} is not running (see tests/support/sandbox/sandbox.sh status)", 3)
        if not host.get("root"):
            raise SandboxError(f"host {args.host} keeps its writes in RAM (--volatile=overlay): a reboot would lose "
                               "them; bring the fleet up with 'up --persist'", 2)
        started = time.monotonic()
        logfile = Path(host["log"])
        seen = logfile.stat().st_size if logfile.exists() else 0
        in_host(host["leader_pid"], "systemctl", "reboot", "--no-block")
        deadline = time.monotonic() + args.timeout
        while is_our_nspawn(host["nspawn_pid"], host["name"]) or host_pids(host["name"], bases):
            if time.monotonic() > deadline:
                raise SandboxError(f"{args.host} did not shut down for the reboot in {args.timeout:.0f}s; log "
                                   f"{logfile}:\n{tail(logfile)}")
            time.sleep(0.2)
        with open(logfile, "rb") as fh:
            fh.seek(seen)
            if REBOOT_LINE.encode() not in fh.read():
                raise SandboxError(f"{args.host} powered off instead of rebooting; log {logfile}:\n{tail(logfile)}")
        plan = state["network"] if state.get("network", {}).get("mode") == "netns" else None
        argv = nspawn_argv(state["rootfs"], host["name"], state["binds"], plan, host["root"])
        host.update(nspawn_pid=spawn(host["name"], argv, bases, logfile), leader_pid=None)
        write_json(REGISTRY / f"{host['name']}.json", {"name": host["name"], "nspawn_pid": host["nspawn_pid"],
                                                       "state_file": str(state_path)})
        write_json(state_path, state)
        wait_running(state, args.timeout)  # the other hosts run already; this one's new leader is recorded
        if plan:
            finish_hosts(plan, state, timeout=args.timeout)
    log(f"{args.host} rebooted in {time.monotonic() - started:.1f}s")
    print(json.dumps(host, indent=2))
    return 0


def cmd_exec(args) -> int:
    state = read_json(Path(args.state).resolve())
    host = next((h for h in hosts_of(state) if h["name"] == args.host), None)
    if host is None or not leader_is_systemd(host.get("leader_pid")):
        raise SandboxError(f"host {args.host} is not running (see tests/support/sandbox/sandbox.sh status)", 3)
    cmd = args.command or ["/bin/bash", "-l"]
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    os.execvpe("nsenter", ["nsenter", "-t", str(host["leader_pid"]), "-a", *cmd], HOST_ENV)
    return 0


def main(argv: list[str] | None = None) -> int:
    default_state = os.environ.get("CT200_SANDBOX_STATE", str(DEFAULT_STATE))
    p = argparse.ArgumentParser(prog="sandbox.sh", description=__doc__.split("\n\n", maxsplit=1)[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    up = sub.add_parser("up", help="boot N hosts")
    up.add_argument("count", type=int, metavar="N", nargs="?")
    up.add_argument("--name", help=f"host name prefix: PREFIX-1..N (default {DEFAULT_PREFIX}1..N)")
    up.add_argument("--names", metavar="NAME,NAME,...", help="explicit host names (Molecule platforms)")
    up.add_argument("--state", default=default_state)
    up.add_argument("--bind", action="append", default=[], metavar="SRC:DST[:ro]")
    up.add_argument("--rootfs", default=os.environ.get("CT200_SANDBOX_ROOTFS", DEFAULT_ROOTFS))
    up.add_argument("--timeout", type=float,
                    default=float(os.environ.get("CT200_SANDBOX_TIMEOUT", "120")))
    up.add_argument("--recreate", action="store_true",
                    help="replace hosts even when an identical healthy fleet is up")
    up.add_argument("--keep-on-failure", action="store_true",
                    help="leave hosts running when boot fails (debugging)")
    up.add_argument("--netns", action="store_true",
                    help="each host in its own network namespace on a bridge, reached over SSH")
    up.add_argument("--subnet", help="lab /24 (default: the first free one in 10.200.0.0/16)")
    up.add_argument("--link-rate", metavar="RATE", help="tc rate of every host link, e.g. 100mbit")
    up.add_argument("--hub-netns", action="store_true",
                    help="a namespace for a Hub at .2 (API) and .3 (CDN), see 'status --json'")
    up.add_argument("--hub-rate", metavar="RATE", help="tc rate of the Hub link (implies --hub-netns)")
    up.add_argument("--persist", action="store_true",
                    help="keep each host's writes on disk (not in RAM), so that 'reboot' boots it with them")
    rb = sub.add_parser("reboot", help="'systemctl reboot' in a --persist host; boot it again and wait")
    rb.add_argument("host")
    rb.add_argument("--state", default=default_state)
    rb.add_argument("--timeout", type=float, default=float(os.environ.get("CT200_SANDBOX_TIMEOUT", "120")))
    down = sub.add_parser("down", help="power off the hosts and remove their cgroups")
    down.add_argument("--state", default=default_state)
    st = sub.add_parser("status", help="show hosts (exit 0 all running, 1 not, 3 none)")
    st.add_argument("--state", default=default_state)
    st.add_argument("--json", action="store_true")
    sh = sub.add_parser("shape", help="change the tc rates of a running --netns fleet")
    sh.add_argument("--link-rate", metavar="RATE")
    sh.add_argument("--hub-rate", metavar="RATE")
    sh.add_argument("--state", default=default_state)
    ex = sub.add_parser("exec", help="run a command (default a shell) inside a host")
    ex.add_argument("host")
    ex.add_argument("command", nargs=argparse.REMAINDER)
    ex.add_argument("--state", default=default_state)
    args = p.parse_args(argv)
    try:
        return {"up": cmd_up, "down": cmd_down, "status": cmd_status, "shape": cmd_shape,
                "exec": cmd_exec, "reboot": cmd_reboot}[args.cmd](args)
    except SandboxError as exc:
        log(f"ERROR: {exc}")
        return exc.code
    except KeyboardInterrupt:
        log("interrupted")
        return 130


if __name__ == "__main__":
    sys.exit(main())
