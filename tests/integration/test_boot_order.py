# SPDX-License-Identifier: Apache-2.0
"""Issue 15 items 1, 3, 4 on one sandbox host that keeps its disk (sandbox.sh up --persist):

* the sglang_service role with the SGLang stand-in on a fake driver tree (tests/integration/boot:
  a fake nvidia-modprobe is the only thing that creates the /dev/nvidia-uvm stand-in, /dev is a fresh
  tmpfs at every boot, and the stand-in refuses to start while the node is absent, as cuInit fails);
* a drafter that accepts nothing (a planted avg_spec_accept_length of 1.0) fails the readiness;
* the good run's owed restart checks that no process of the stopped unit holds a GPU, and the check
  names the stand-in's PID while it runs (the fake nvidia-smi lists every running stand-in);
* with the node removed, a restart of the unit alone fails (the check is live), and then
  ``systemctl reboot`` inside the host: it boots again from its disk and the instance comes back
  healthy with no operator step, started once, after the uvm loader and nvidia-persistenced.

A host of its own rather than the shared served host: that one keeps its writes in RAM and the tests
after it need it as it is. Cost: about 60-90 s on an idle machine (three playbook runs, one reboot)."""

import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import sandbox_up

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]
SANDBOX = str(REPO / "tests" / "support" / "sandbox" / "sandbox.sh")
VENV = REPO / ".cache" / "sglang-venv-0.5.23"
HOST = "boot-order-1"
UNIT = "sglang@kimi.service"
TARGET = "/srv/models/Kimi K2.6"  # a space: RequiresMountsFor= quoting on a real systemd
DRAFT = "/srv/models/Kimi-K2.6-DFlash"
sys.path.insert(0, str(REPO / "tests" / "sglang"))
import models  # noqa: E402  pylint: disable=wrong-import-position


def free_port():
    with socket.socket() as sock:
        sock.bind(("0.0.0.0", 0))
        return sock.getsockname()[1]


def status_of(url):
    try:
        with urllib.request.urlopen(url, timeout=10) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as exc:
        return exc.code, b""
    except OSError:
        return None, b""


@pytest.fixture
def boot_host(tmp_path):
    if not (VENV / "bin" / "python").exists():
        pytest.skip("no SGLang parse venv: run scripts/sglang-parse-venv.sh 0.5.23")
    model_dir = tmp_path / "models"
    models.kimi(model_dir, "Kimi K2.6")
    models.kimi_draft(model_dir)
    state = tmp_path / "boot.json"
    binds = ["%s:/opt/ct200-sglang-venv:ro" % VENV.resolve(),
             "%s:/opt/ct200-standin:ro" % (REPO / "tests" / "support" / "sglang_standin"),
             "%s:/srv/models:ro" % model_dir]
    with sandbox_up.hosts(HOST, state, binds, extra=("--persist", "--timeout", "240")):
        yield state


def ansible(state, *argv, tool="ansible-playbook"):
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), CT200_SANDBOX_STATE=str(state),
               ANSIBLE_NOCOLOR="1", ANSIBLE_INVENTORY_UNPARSED_FAILED="1")
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env["PATH"]
    proc = subprocess.run([os.path.join(os.path.dirname(sys.executable), tool), "-i", "inventories/sandbox", *argv],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=900, check=False)
    return proc.returncode, proc.stdout + proc.stderr


def deploy(state, port, accept_length):
    return ansible(state, "tests/integration/boot/fake-driver.yml", "-e", json.dumps({
        "boot_test_target": TARGET, "boot_test_draft": DRAFT, "boot_test_port": port,
        "boot_test_accept_length": accept_length}))


def on_host(state, *cmd):
    return subprocess.run([SANDBOX, "exec", "--state", str(state), HOST, "--", *cmd], capture_output=True, text=True,
                          timeout=60, check=False).stdout.strip()


def show(state, *props):
    out = on_host(state, "systemctl", "show", UNIT, *["--property=%s" % p for p in props])
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def wait_healthy(port, seconds):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if status_of("http://127.0.0.1:%d/health_generate" % port)[0] == 200:
            return True
        time.sleep(1)
    return False


def test_the_instance_survives_a_reboot_with_no_operator_step(boot_host):
    state, port = boot_host, free_port()
    started = time.monotonic()

    # A drafter that accepts nothing is not ready (item 3): the run fails and leaves the unit stopped.
    rc, out = deploy(state, port, "1.0")
    assert rc != 0, out[-4000:]
    assert "the drafter accepts 1.00 tokens per verify step on average" in out, out[-4000:]
    assert "Run | journal of kimi" in out

    rc, out = deploy(state, port, "3.5")
    assert rc == 0, out[-6000:]
    assert "drafter accepts 3.50 tokens per step" in out and "answered in content" in out
    assert "Run | no process of the stopped unit holds a GPU | kimi" in out  # the owed restart's check
    assert on_host(state, "stat", "-c", "%a", "/dev/nvidia-uvm") == "666"  # made by the loader unit
    props = show(state, "After", "Wants", "RequiresMountsFor", "TimeoutStopUSec")
    for unit in ("ct200-nvidia-uvm.service", "nvidia-persistenced.service"):
        assert unit in props["After"].split() and unit in props["Wants"].split(), props
    assert TARGET in props["RequiresMountsFor"] and DRAFT in props["RequiresMountsFor"], props
    assert props["TimeoutStopUSec"] == "15min", props

    # The GPU-release check sees the running stand-in as a process of the unit (item 4).
    rc, out = ansible(state, "ct200", "-m", "ct200.deploy.sglang_gpu_release", "-a", "unit=%s wait=0" % UNIT,
                      tool="ansible")
    pid = show(state, "MainPID")["MainPID"]
    assert rc != 0 and "still hold GPU memory: pid %s (81234 MiB)" % pid in out, out[-3000:]

    # The stand-in's check is live: without the node, a restart of the unit alone fails.
    on_host(state, "rm", "-f", "/dev/nvidia-uvm")
    on_host(state, "systemctl", "restart", "--no-block", UNIT)
    deadline = time.monotonic() + 60
    while "CUDA init failed: /dev/nvidia-uvm missing" not in on_host(state, "journalctl", "-u", UNIT, "-o", "cat"):
        assert time.monotonic() < deadline, on_host(state, "journalctl", "-u", UNIT, "-n", "20", "-o", "cat")
        time.sleep(1)
    assert status_of("http://127.0.0.1:%d/health_generate" % port)[0] != 200

    # systemctl reboot inside the host; it boots again from its disk. Nobody runs anything after it.
    reboot = subprocess.run([SANDBOX, "reboot", HOST, "--state", str(state), "--timeout", "240"],
                            capture_output=True, text=True, timeout=300, check=False)
    assert reboot.returncode == 0, reboot.stderr
    rebooted = time.monotonic()
    assert wait_healthy(port, 180), on_host(state, "journalctl", "-b", "-u", UNIT, "-n", "30", "-o", "cat")
    back = time.monotonic() - rebooted
    info = json.loads(status_of("http://127.0.0.1:%d/server_info" % port)[1])
    assert info["standin"] is True and info["speculative_algorithm"] == "DFLASH"
    props = show(state, "ActiveState", "NRestarts", "ExecMainStartTimestampMonotonic")
    assert props["ActiveState"] == "active" and props["NRestarts"] == "0", props  # right the first time
    boots = on_host(state, "cat", "/var/log/fake-nvidia-modprobe.log").splitlines()
    assert len({line.split()[0] for line in boots}) == 2, boots  # the loader ran in each boot
    assert boots[-1].split()[1:] == ["-u", "-c=0"]
    loaded = on_host(state, "systemctl", "show", "ct200-nvidia-uvm.service", "nvidia-persistenced.service",
                     "--property=ActiveEnterTimestampMonotonic").split()
    assert all(0 < int(t.split("=")[1]) <= int(props["ExecMainStartTimestampMonotonic"]) for t in loaded), loaded
    print("boot-order test: %.0f s in all; healthy %.1f s after the reboot returned" % (
        time.monotonic() - started, back))
