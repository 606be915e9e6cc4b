# SPDX-License-Identifier: Apache-2.0
"""Sandbox fleet: dynamic inventory errors (fast) and real hosts (slow).

The slow tests boot real systemd hosts with tests/support/sandbox/sandbox.sh (root, a rootfs
from tests/support/sandbox/build-rootfs.sh, systemd-container installed) and run the Molecule
scenario molecule/sandbox_smoke.
"""
import http.server
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
FLEET = REPO / "inventories" / "sandbox" / "fleet.py"
SANDBOX = REPO / "tests" / "support" / "sandbox" / "sandbox.sh"
ROOTFS = Path(os.environ.get("CT200_SANDBOX_ROOTFS", "/var/lib/ct200-sandbox/rootfs"))
REGISTRY = Path("/run/ct200-sandbox/hosts")
CGROUP_DIRS = [Path("/sys/fs/cgroup/systemd/ct200lab"), Path("/sys/fs/cgroup/unified/ct200lab"),
               Path("/sys/fs/cgroup/ct200lab")]
VENV_BIN = str(Path(sys.executable).parent)
NOT_RUNNING = "sandbox is not running: run tests/support/sandbox/sandbox.sh up N"


def run_fleet(state: Path, *args):
    env = dict(os.environ, CT200_SANDBOX_STATE=str(state))
    return subprocess.run([sys.executable, str(FLEET), *(args or ("--list",))], env=env,
                          capture_output=True, text=True, timeout=30, check=False)


def venv_env(**extra):
    """Environment for ansible/molecule: the venv's bin first on PATH
    (ansible-compat looks ansible-config up on PATH)."""
    env = dict(os.environ, **extra)
    env["PATH"] = VENV_BIN + os.pathsep + env.get("PATH", "")
    return env


# ------------------------------------------------------------------ fast --

def test_inventory_fails_clearly_when_nothing_is_up(tmp_path):
    res = run_fleet(tmp_path / "state.json")
    assert res.returncode == 1
    assert res.stdout == ""
    assert NOT_RUNNING in res.stderr


def test_inventory_fails_on_stale_state_of_a_killed_run(tmp_path):
    state = tmp_path / "state.json"
    # PID of a process that has exited: the hosts of this state are gone.
    dead = subprocess.Popen(["true"])
    dead.wait()
    state.write_text(json.dumps({"status": "running", "hosts": [
        {"name": "ct200-h1", "index": 1, "nspawn_pid": dead.pid, "leader_pid": dead.pid}]}))
    res = run_fleet(state)
    assert res.returncode == 1
    assert NOT_RUNNING in res.stderr and "ct200-h1" in res.stderr


def test_inventory_refuses_a_fleet_still_booting(tmp_path):
    state = tmp_path / "state.json"
    state.write_text(json.dumps({"status": "starting", "hosts": [{"name": "h", "leader_pid": 1}]}))
    res = run_fleet(state)
    assert res.returncode == 1 and "'starting'" in res.stderr


def test_inventory_fails_through_ansible_too(tmp_path):
    """ansible-playbook must stop, not run against an empty inventory."""
    playbook = tmp_path / "p.yml"
    playbook.write_text("- hosts: ct200\n  gather_facts: false\n  tasks:\n"
                        "    - ansible.builtin.ping:\n")
    res = subprocess.run([os.path.join(VENV_BIN, "ansible-playbook"), "-i",
                          str(REPO / "inventories" / "sandbox"), str(playbook)],
                         env=venv_env(CT200_SANDBOX_STATE=str(tmp_path / "none.json"),
                                      ANSIBLE_CONFIG=str(REPO / "ansible.cfg")),
                         cwd=REPO, capture_output=True, text=True, timeout=120, check=False)
    assert res.returncode != 0
    assert NOT_RUNNING in res.stdout + res.stderr


def test_inventory_maps_state_to_nsenter_hostvars(tmp_path):
    """Output shape, with a live process named 'systemd' standing in for a
    host's init (the slow tests use real hosts)."""
    fake_init = tmp_path / "systemd"
    shutil.copy("/bin/sleep", fake_init)
    proc = subprocess.Popen([str(fake_init), "60"])
    try:
        state = tmp_path / "state.json"
        state.write_text(json.dumps({"status": "running", "hosts": [
            {"name": "t-1", "index": 1, "nspawn_pid": 0, "leader_pid": proc.pid},
            {"name": "t-2", "index": 2, "nspawn_pid": 0, "leader_pid": proc.pid}]}))
        for _unused in range(50):  # comm is set at exec
            if Path(f"/proc/{proc.pid}/comm").read_text().strip() == "systemd":
                break
            time.sleep(0.05)
        res = run_fleet(state)
        assert res.returncode == 0, res.stderr
        inv = json.loads(res.stdout)
        assert inv["ct200"]["hosts"] == ["t-1", "t-2"]
        assert inv["ct200"]["vars"]["ansible_connection"] == "ct200.sandbox.nsenter"
        assert inv["ct200"]["vars"]["ansible_python_interpreter"] == "/usr/bin/python3"
        assert inv["_meta"]["hostvars"]["t-2"] == {"ansible_nsenter_pid": proc.pid,
                                                   "ct200_sandbox_index": 2}
        host = run_fleet(state, "--host", "t-1")
        assert json.loads(host.stdout)["ansible_nsenter_pid"] == proc.pid
    finally:
        proc.kill()
        proc.wait()


# ------------------------------------------------------------------ slow --

def _require_sandbox_prereqs():
    if os.geteuid() != 0:
        pytest.skip("the sandbox fleet needs root")
    if not (ROOTFS / "lib/systemd/systemd").exists() or not shutil.which("systemd-nspawn"):
        pytest.fail(f"no rootfs at {ROOTFS} or no systemd-nspawn: run tests/support/sandbox/build-rootfs.sh")


def _leftovers(names):
    left = [str(REGISTRY / f"{n}.json") for n in names if (REGISTRY / f"{n}.json").exists()]
    left += [str(d / n) for d in CGROUP_DIRS for n in names if (d / n).exists()]
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
                stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
            except OSError:
                continue
            if stat != "Z" and any(a.decode(errors="replace") in {f"--machine={n}" for n in names}
                                   for a in argv):
                left.append(f"process {pid}")
    return left


class _Hello(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802
        body = b"hello from the controller"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.mark.slow
def test_fleet_up_reach_loopback_inventory_and_down(tmp_path):
    _require_sandbox_prereqs()
    state = tmp_path / "state.json"
    names = ["ct200-pytest-1", "ct200-pytest-2"]
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Hello)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/"
    try:
        up = subprocess.run([str(SANDBOX), "up", "2", "--name", "ct200-pytest", "--state", str(state),
                             "--bind", f"{tmp_path}:/srv/wheelhouse:ro"],
                            capture_output=True, text=True, timeout=180, check=False)
        assert up.returncode == 0, up.stderr
        data = json.loads(up.stdout)
        assert [h["name"] for h in data["hosts"]] == names
        status = subprocess.run([str(SANDBOX), "status", "--json", "--state", str(state)],
                                capture_output=True, text=True, timeout=60, check=False)
        assert status.returncode == 0
        assert {h["state"] for h in json.loads(status.stdout)["hosts"]} == {"running"}

        (tmp_path / "wheel.txt").write_text("from the bind mount")
        for host in names:
            out = subprocess.run([str(SANDBOX), "exec", "--state", str(state), host, "--", "sh", "-c",
                                  f"hostname; curl -fsS {url}; echo; cat /srv/wheelhouse/wheel.txt; "
                                  "echo; touch /srv/wheelhouse/x 2>&1 || echo read-only"],
                                 capture_output=True, text=True, timeout=60, check=False)
            assert out.returncode == 0, out.stderr
            assert out.stdout.splitlines()[:3] == [host, "hello from the controller",
                                                   "from the bind mount"], out.stdout
            assert "Read-only file system" in out.stdout

        inv = run_fleet(state)
        assert inv.returncode == 0, inv.stderr
        assert json.loads(inv.stdout)["ct200"]["hosts"] == names
        ping = subprocess.run([os.path.join(VENV_BIN, "ansible"), "ct200", "-i", str(FLEET), "-m",
                               "ansible.builtin.command", "-a", "hostname"],
                              env=venv_env(CT200_SANDBOX_STATE=str(state),
                                           ANSIBLE_CONFIG=str(REPO / "ansible.cfg")),
                              cwd=REPO, capture_output=True, text=True, timeout=120, check=False)
        assert ping.returncode == 0, ping.stdout + ping.stderr
        for host in names:
            assert f"{host} | CHANGED | rc=0 >>\n{host}" in ping.stdout
    finally:
        down = subprocess.run([str(SANDBOX), "down", "--state", str(state)],
                              capture_output=True, text=True, timeout=120, check=False)
        server.shutdown()
    assert down.returncode == 0, down.stderr
    assert _leftovers(names) == []
    assert not state.exists()
    # The machine's loopback still works after the hosts' systemd shut down.
    server2 = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Hello)
    threading.Thread(target=server2.handle_request, daemon=True).start()
    got = subprocess.run(["curl", "-fsS", f"http://127.0.0.1:{server2.server_address[1]}/"],
                         capture_output=True, text=True, timeout=30, check=False)
    server2.server_close()
    assert got.stdout == "hello from the controller"


@pytest.mark.slow
def test_molecule_sandbox_smoke_scenario():
    _require_sandbox_prereqs()
    env = venv_env()
    env.pop("ANSIBLE_CONFIG", None)  # molecule writes its own
    res = subprocess.run([os.path.join(VENV_BIN, "molecule"), "test", "-s", "sandbox_smoke"],
                         cwd=REPO, env=env, capture_output=True, text=True, timeout=540, check=False)
    tail = (res.stdout + res.stderr)[-4000:]
    assert res.returncode == 0, tail
    assert "successful=8" in res.stdout + res.stderr, tail
    assert _leftovers(["sbx-smoke-1", "sbx-smoke-2"]) == []
