# SPDX-License-Identifier: Apache-2.0
"""Test-side control of a sandbox fleet reached over SSH (tests/support/sandbox/sandbox.sh up --netns).

``SshFleet`` brings hosts up and down, runs Ansible against them through the
sandbox inventory, enters hosts directly (nsenter: works while their sshd is
stopped), stops and starts sshd, and re-shapes links.  ``in_netns`` runs a
callable in a thread that joined a network namespace, so a server started there
(e.g. ``LocalHub``) listens inside that namespace while the test keeps running
in the machine's.  Used by tests/fleet/conftest.py and the fleet benchmarks.
"""
from __future__ import annotations

import ctypes
import json
import os
import resource
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SANDBOX = REPO / "tests" / "support" / "sandbox" / "sandbox.sh"
INVENTORY = REPO / "inventories" / "sandbox"
VENV_BIN = Path(sys.executable).parent
CLONE_NEWNET = 0x40000000
HOST_ENV = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"}


class FleetError(RuntimeError):
    pass


def in_netns(netns: str, func, *args, timeout: float = 60):
    """Run ``func(*args)`` in a thread that joined /run/netns/NETNS and return
    its result.  A network namespace is per thread in Linux: sockets created by
    the call belong to NETNS and keep working from any thread afterwards."""
    libc = ctypes.CDLL(None, use_errno=True)
    box: dict = {}

    def body():
        try:
            fd = os.open(f"/run/netns/{netns}", os.O_RDONLY | os.O_CLOEXEC)
            try:
                if libc.setns(fd, CLONE_NEWNET) != 0:
                    err = ctypes.get_errno()
                    raise OSError(err, f"setns({netns}): {os.strerror(err)}")
            finally:
                os.close(fd)
            box["result"] = func(*args)
        except BaseException as exc:  # handed to the caller
            box["error"] = exc

    thread = threading.Thread(target=body, name=f"netns:{netns}", daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        raise FleetError(f"call in network namespace {netns} did not return in {timeout:.0f}s")
    if "error" in box:
        raise box["error"]
    return box.get("result")


@dataclass
class Run:
    """An ansible / ansible-playbook run: return code and stdout+stderr."""
    rc: int
    out: str
    seconds: float


class SshFleet:
    """Hosts of one state file; ``up`` boots them, ``down`` removes everything."""

    def __init__(self, state: Path, prefix: str = "fleet", count: int = 8, link_rate: str | None = None,
                 hub_rate: str | None = None, hub_netns: bool = True, rootfs: str | None = None,
                 binds: tuple[str, ...] = ()):
        self.state_path = Path(state).resolve()
        self.prefix, self.count = prefix, count
        self.link_rate, self.hub_rate, self.want_hub_netns = link_rate, hub_rate, hub_netns
        self.rootfs, self.binds = rootfs, binds
        self.state: dict = {}
        self.up_seconds: float | None = None

    # ------------------------------------------------------------ lifecycle
    def sandbox(self, *args: str, timeout: float = 180) -> subprocess.CompletedProcess:
        env = dict(os.environ)
        if self.rootfs:
            env["CT200_SANDBOX_ROOTFS"] = self.rootfs
        return subprocess.run([str(SANDBOX), *args, "--state", str(self.state_path)], env=env,
                              capture_output=True, text=True, timeout=timeout, check=False)

    def up(self, timeout: float = 120) -> "SshFleet":
        args = ["up", str(self.count), "--name", self.prefix, "--netns", "--recreate",
                "--timeout", str(timeout)]
        args += ["--link-rate", self.link_rate] if self.link_rate else []
        args += ["--hub-rate", self.hub_rate] if self.hub_rate else (["--hub-netns"] if self.want_hub_netns else [])
        for bind in self.binds:
            args += ["--bind", bind]
        started = time.monotonic()
        res = self.sandbox(*args, timeout=timeout + 60)
        self.up_seconds = time.monotonic() - started
        if res.returncode != 0:
            raise FleetError(f"sandbox.sh up failed (rc {res.returncode}):\n{res.stderr[-3000:]}")
        self.state = json.loads(res.stdout)
        return self

    def down(self) -> None:
        res = self.sandbox("down", timeout=180)
        if res.returncode != 0:
            raise FleetError(f"sandbox.sh down failed:\n{res.stderr[-3000:]}")

    def shape(self, link_rate: str | None = None, hub_rate: str | None = None) -> None:
        """Change link rates of the running fleet (tc qdisc replace)."""
        args = ["shape"]
        args += ["--link-rate", link_rate] if link_rate else []
        args += ["--hub-rate", hub_rate] if hub_rate else []
        res = self.sandbox(*args, timeout=60)
        if res.returncode != 0:
            raise FleetError(f"sandbox.sh shape failed:\n{res.stderr[-2000:]}")
        self.state = json.loads(Path(self.state_path).read_text())

    # ------------------------------------------------------------ topology
    @property
    def network(self) -> dict:
        return self.state["network"]

    @property
    def hosts(self) -> list[str]:
        return [h["name"] for h in self.state["hosts"]]

    def host(self, name: str) -> dict:
        for h in self.state["hosts"]:
            if h["name"] == name:
                return h
        raise KeyError(f"no host {name} in {self.state_path}")

    def address(self, name: str) -> str:
        return self.host(name)["address"]

    @property
    def hub_namespace(self) -> str | None:
        return (self.network.get("hub") or {}).get("netns")

    @property
    def hub_address(self) -> str:
        hub = self.network.get("hub") or {}
        return hub.get("address", self.network["gateway"])

    @property
    def hub_cdn_address(self) -> str | None:
        return (self.network.get("hub") or {}).get("cdn_address")

    # ------------------------------------------------------------ commands
    def exec(self, host: str, cmd: str | list[str], input: str | None = None,
             timeout: float = 60) -> subprocess.CompletedProcess:
        """Run a command inside HOST (all its namespaces) without SSH."""
        argv = ["/bin/sh", "-c", cmd] if isinstance(cmd, str) else list(cmd)
        return subprocess.run(["nsenter", "-t", str(self.host(host)["leader_pid"]), "-a", *argv],
                              input=input, capture_output=True, text=True, timeout=timeout,
                              env=HOST_ENV, check=False,
                              stdin=None if input is not None else subprocess.DEVNULL)

    def ssh(self, host: str, cmd: str, input: str | None = None, timeout: float = 30) -> subprocess.CompletedProcess:
        """Run CMD on HOST over SSH with the fleet's key and known_hosts."""
        return subprocess.run(["ssh", "-F", self.network["ssh_config"], host, cmd], input=input,
                              capture_output=True, text=True, timeout=timeout, check=False,
                              stdin=None if input is not None else subprocess.DEVNULL)

    def stop_sshd(self, host: str) -> None:
        """Stop sshd and end every SSH session of HOST (Ansible's ControlPersist
        master included): the host becomes unreachable, as a dead sshd makes it.
        The kill runs inside the host's PID namespace and matches only sshd."""
        res = self.exec(host, "systemctl stop ssh.service && { pkill -KILL -x sshd || true; }")
        if res.returncode != 0:
            raise FleetError(f"{host}: cannot stop sshd: {res.stderr}")

    def start_sshd(self, host: str, timeout: float = 30) -> None:
        res = self.exec(host, "systemctl start ssh.service")
        if res.returncode != 0:
            raise FleetError(f"{host}: cannot start sshd: {res.stderr}")
        deadline = time.monotonic() + timeout
        while self.ssh(host, "true", timeout=15).returncode != 0:
            if time.monotonic() > deadline:
                raise FleetError(f"{host}: no SSH login {timeout:.0f}s after starting sshd")
            time.sleep(0.2)

    def env(self, extra: dict | None = None) -> dict:
        env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), CT200_SANDBOX_STATE=str(self.state_path),
                   ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0", PYTHONPATH=str(REPO))
        env["PATH"] = str(VENV_BIN) + os.pathsep + env.get("PATH", "")
        env.update(extra or {})
        return env

    def ansible(self, pattern: str, module: str, module_args: str | None = None, *extra: str,
                env: dict | None = None, timeout: float = 300) -> Run:
        argv = [str(VENV_BIN / "ansible"), pattern, "-i", str(INVENTORY), "-m", module]
        argv += ["-a", module_args] if module_args else []
        return self._run([*argv, *extra], env, timeout)

    def run_playbook(self, path: str | Path, extra_vars_file: str | Path | None = None,
                     limit: str | None = None, env: dict | None = None, args: tuple[str, ...] = (),
                     timeout: float = 900) -> Run:
        argv = [str(VENV_BIN / "ansible-playbook"), str(path), "-i", str(INVENTORY)]
        argv += ["-e", f"@{extra_vars_file}"] if extra_vars_file else []
        argv += ["--limit", limit] if limit else []
        return self._run([*argv, *args], env, timeout)

    def popen_playbook(self, path: str | Path, env: dict | None = None, args: tuple[str, ...] = ()):
        """Start a playbook run and return the Popen (stdout+stderr merged, text),
        for faults injected while it runs."""
        argv = [str(VENV_BIN / "ansible-playbook"), str(path), "-i", str(INVENTORY), *args]
        return subprocess.Popen(argv, cwd=REPO, env=self.env(env), stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, stdin=subprocess.DEVNULL)

    def _run(self, argv: list[str], env: dict | None, timeout: float) -> Run:
        env = self.env(env)
        logs = os.environ.get("CT200_FLEET_LOGS")  # keep every run's output, with per-task times
        if logs and "ANSIBLE_CALLBACKS_ENABLED" not in env:
            env["ANSIBLE_CALLBACKS_ENABLED"] = "ansible.posix.profile_tasks"
        started = time.monotonic()
        cpu0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        proc = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True,
                              timeout=timeout, check=False, stdin=subprocess.DEVNULL)
        run = Run(proc.returncode, proc.stdout + proc.stderr, time.monotonic() - started)
        if logs:
            cpu1 = resource.getrusage(resource.RUSAGE_CHILDREN)  # the controller's CPU (ansible and its ssh)
            cpu = (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime)
            os.makedirs(logs, exist_ok=True)
            name = "%.0f-%s.log" % (time.time(), Path(argv[1]).stem if len(argv) > 1 else "run")
            with open(os.path.join(logs, name), "w") as handle:
                handle.write("# %s\n# rc %d, %.1f s, controller CPU %.1f s, load %s\n%s" % (
                    " ".join(argv), run.rc, run.seconds, cpu, " ".join(open("/proc/loadavg").read().split()[:3]), run.out))
        return run


def measure_hub_to_host_rate(fleet: SshFleet, host: str, nbytes: int = 4 << 20, timeout: float = 120) -> float:
    """Bits per second of one HTTP download of NBYTES from a throwaway server in
    the fleet's Hub namespace to HOST.  For benchmarks and manual checks of the
    tc shaping only: tests assert that the qdiscs exist, never a rate."""
    import http.server

    payload = os.urandom(nbytes)

    class Blob(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            self.send_response(200)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args):
            pass

    server = in_netns(fleet.hub_namespace, http.server.ThreadingHTTPServer, (fleet.hub_address, 0), Blob)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True).start()
    try:
        url = f"http://{fleet.hub_address}:{server.server_address[1]}/blob"
        res = fleet.ssh(host, f"curl -fsS -o /dev/null -w '%{{size_download}} %{{time_total}}' {url}", timeout=timeout)
        if res.returncode != 0:
            raise FleetError(f"{host}: download from the Hub namespace failed: {res.stderr}")
        size, seconds = res.stdout.split()
        return int(size) * 8 / float(seconds)
    finally:
        server.shutdown()
        server.server_close()
