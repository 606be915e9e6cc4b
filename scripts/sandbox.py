#!/usr/bin/env python3
"""Sandbox fleet of real systemd hosts (systemd-nspawn --boot), see sandbox.sh.

Stdlib only; runs with the machine's python3 (no venv needed) as root.

Every host is ``systemd-nspawn -D ROOTFS --boot --volatile=overlay`` in its
own cgroup (``<cgroup mounts>/ct200lab/NAME``), sharing the machine's network
namespace. The JSON state file lists the hosts with the nspawn PID and the
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
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
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


class StateLock:
    """Serialises up/down/status on one state file."""

    def __init__(self, state: Path):
        state.parent.mkdir(parents=True, exist_ok=True)
        self.path = state.with_name(state.name + ".lock")
        self.fh = None

    def __enter__(self):
        self.fh = open(self.path, "w")
        deadline = time.monotonic() + 300
        while True:
            try:
                fcntl.flock(self.fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return self
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise SandboxError(f"{self.path} is locked by another sandbox.sh for 5 min") from None
                time.sleep(0.5)

    def __exit__(self, *exc):
        fcntl.flock(self.fh, fcntl.LOCK_UN)
        self.fh.close()


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


def nspawn_argv(rootfs: str, name: str, binds: list[dict]) -> list[str]:
    argv = ["systemd-nspawn", "-D", rootfs, "--boot", "--register=no", "--keep-unit",
            "--volatile=overlay", f"--machine={name}", f"--hostname={name}",
            "--console=passive"]
    for b in binds:
        flag = "--bind-ro" if b["mode"] == "ro" else "--bind"
        argv.append(f"{flag}={b['src']}:{b['dst']}")
    return argv


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
    with open(logfile, "wb") as out:
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
        for p in (state_path, state_path.with_name(state_path.name + ".lock")):
            try:
                p.unlink()
            except FileNotFoundError:
                pass
    cleanup_bases(bases)
    return problems


def healthy(state: dict) -> bool:
    return bool(hosts_of(state)) and all(
        is_our_nspawn(h.get("nspawn_pid"), h["name"]) and system_state(h.get("leader_pid")) == "running"
        for h in hosts_of(state))


def cmd_up(args) -> int:
    if os.geteuid() != 0:
        raise SandboxError("must run as root (systemd-nspawn, cgroups, nsenter)", 2)
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
        raise SandboxError(f"no bootable rootfs at {rootfs}: run scripts/build-rootfs.sh "
                           "(or set CT200_SANDBOX_ROOTFS)", 2)
    for tool in ("systemd-nspawn", "nsenter"):
        if not shutil.which(tool):
            raise SandboxError(f"'{tool}' not found: run scripts/build-rootfs.sh (installs "
                               "systemd-container and util-linux) or apt-get install them", 2)
    binds = [parse_bind(b) for b in args.bind]
    bases = cgroup_bases()
    state_path = Path(args.state).resolve()
    logdir = state_path.parent / "logs"

    with StateLock(state_path):
        old = read_json(state_path)
        wanted = {"names": names, "rootfs": rootfs, "binds": binds}
        if old and not args.recreate and {k: old.get(k) for k in wanted} == wanted and healthy(old):
            log(f"{len(names)} host(s) already running from {state_path}; nothing to do "
                "(use --recreate for fresh hosts)")
            print(json.dumps(old, indent=2))
            return 0
        if old or (REGISTRY.is_dir() and any(REGISTRY.glob("*.json"))):
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
                    f"'scripts/sandbox.sh down --state {reg['state_file']}' or choose another --name", 2)
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
                 "status": "starting", "hosts": []}
        REGISTRY.mkdir(parents=True, exist_ok=True)
        try:
            for index, name in enumerate(names, 1):
                logfile = logdir / f"{name}.log"
                pid = spawn(name, nspawn_argv(rootfs, name, binds), bases, logfile)
                host = {"name": name, "index": index, "nspawn_pid": pid, "leader_pid": None,
                        "log": str(logfile)}
                state["hosts"].append(host)
                # Written after every spawn: a killed 'up' leaves a usable trail.
                write_json(REGISTRY / f"{name}.json", {"name": name, "nspawn_pid": pid,
                                                       "state_file": str(state_path)})
                write_json(state_path, state)
            wait_running(state, args.timeout)
        except BaseException as exc:
            if args.keep_on_failure:
                state["status"] = "failed"
                write_json(state_path, state)
                log(f"hosts kept for debugging; clean up with: scripts/sandbox.sh down --state {state_path}")
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
    with StateLock(state_path):
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
            print(f"sandbox is not running (no state at {state_path}): run scripts/sandbox.sh up N")
        return 3
    rows = []
    for h in hosts_of(state):
        st = system_state(h.get("leader_pid"))
        if st != "dead" and not is_our_nspawn(h.get("nspawn_pid"), h["name"]):
            st = f"orphaned ({st}, systemd-nspawn gone; run scripts/sandbox.sh down)"
        rows.append({"name": h["name"], "nspawn_pid": h.get("nspawn_pid"),
                     "leader_pid": h.get("leader_pid"), "state": st})
    if args.json:
        print(json.dumps({"state_file": str(state_path), "hosts": rows}, indent=2))
    else:
        print(f"{'NAME':<20} {'NSPAWN':>8} {'LEADER':>8}  STATE")
        for r in rows:
            print(f"{r['name']:<20} {r['nspawn_pid'] or '-':>8} {r['leader_pid'] or '-':>8}  {r['state']}")
    return 0 if all(r["state"] == "running" for r in rows) else 1


def cmd_exec(args) -> int:
    state = read_json(Path(args.state).resolve())
    host = next((h for h in hosts_of(state) if h["name"] == args.host), None)
    if host is None or not leader_is_systemd(host.get("leader_pid")):
        raise SandboxError(f"host {args.host} is not running (see scripts/sandbox.sh status)", 3)
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
    down = sub.add_parser("down", help="power off the hosts and remove their cgroups")
    down.add_argument("--state", default=default_state)
    st = sub.add_parser("status", help="show hosts (exit 0 all running, 1 not, 3 none)")
    st.add_argument("--state", default=default_state)
    st.add_argument("--json", action="store_true")
    ex = sub.add_parser("exec", help="run a command (default a shell) inside a host")
    ex.add_argument("host")
    ex.add_argument("command", nargs=argparse.REMAINDER)
    ex.add_argument("--state", default=default_state)
    args = p.parse_args(argv)
    try:
        return {"up": cmd_up, "down": cmd_down, "status": cmd_status, "exec": cmd_exec}[args.cmd](args)
    except SandboxError as exc:
        log(f"ERROR: {exc}")
        return exc.code
    except KeyboardInterrupt:
        log("interrupted")
        return 130


if __name__ == "__main__":
    sys.exit(main())
