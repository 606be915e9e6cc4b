# SPDX-License-Identifier: Apache-2.0
"""deploy_kimi.yml on a bare sandbox host stops in the preflight, before any weight byte,
naming the cause and the fix, and leaves no unit enabled: when the SGLang runtime cannot be
installed (an empty wheelhouse) and when the host has too few GPUs (a fake nvidia-smi: the
GPU is the one thing mocked), a P2P matrix with CNS, no way to load nvidia_uvm at boot and a
/tmp remounted noexec (the fabric, health and boot checks, through the real playbook)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import sandbox_up

from localhub.personas import token_for
from moleculerun import keep_output

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]
SANDBOX = str(REPO / "tests" / "support" / "sandbox" / "sandbox.sh")
CACHE = REPO / ".cache"
# The bare host the Molecule deploy scenario takes to serving once for the suite
# (tests/integration/conftest.py), and the port its instance keeps (its scenario's index 41) while
# the hosts of other tests come and go in the same network namespace.
SERVED_HOST = "rt-deploy-1"
SERVED_PORT = ("-e", "ct200_sglang_port=30041")


def off_spec(state):
    """Marker beside the served host's state: a test deployed another spec there (test_phase_tags restores it)."""
    return Path(state).parent / "off-spec"


FAKE_SMI = """#!/bin/sh
# TEST ONLY: 4 GPUs, a good driver; P2P not supported between the sockets (the real driver's formats)
case "$1" in
  --query-gpu=index,name,uuid,*) for i in 0 1 2 3; do
      echo "$i, NVIDIA RTX PRO 6000 Blackwell Server Edition, GPU-$i, 97887, 0, 00000000:1$i:00.0, 580.95.05, 12.0, \
Enabled, Enabled, 0, No, 0x0000000000000001, 600.00"; done ;;
  topo) printf ' \t\033[4mGPU0\tGPU1\tGPU2\tGPU3\t\033[0m\n'
      printf ' GPU0\tX\tOK\tCNS\tCNS\t\n GPU1\tOK\tX\tCNS\tCNS\t\n GPU2\tCNS\tCNS\tX\tOK\t\n GPU3\tCNS\tCNS\tOK\tX\t\n' ;;
  -q) ;;
  --query-gpu=*) for i in 0 1 2 3; do
      echo "$i, NVIDIA RTX PRO 6000 Blackwell Server Edition, 97887, 00000000:1$i:00.0, 580.95.05"; done ;;
  *) echo "| Driver Version: 580.95.05    CUDA Version: 13.0 |" ;;
esac
"""


def bare_host(tmp_path, name, wheelhouse):
    for script, args in (("sglang-wheelhouse.sh", ["0.5.23"]),
                         ("local-apt-repo.sh", ["ninja-build", "numactl", "python3-apt"])):
        subprocess.run([str(REPO / "scripts" / script), *args], check=True, timeout=600, capture_output=True)
    fake = tmp_path / "fake-gpu"
    fake.mkdir()
    (fake / "nvidia-smi").write_text(FAKE_SMI)
    (fake / "nvidia-smi").chmod(0o755)
    disk = tmp_path / "disk"
    disk.mkdir()
    state = tmp_path / "fleet.json"
    binds = ["%s:/srv/wheelhouse:ro" % (CACHE / "wheelhouse"), "%s:/srv/sglang-wheelhouse:ro" % wheelhouse,
             "%s:/srv/apt-repo:ro" % (CACHE / "apt-repo"),
             "%s:/etc/apt/sources.list:ro" % (CACHE / "apt-repo" / "sources.list"),
             "%s:/srv/ct200-disk" % disk, "%s:/srv/fake-gpu:ro" % fake]
    sandbox_up.up(name, state, binds, timeout=180)
    return state


def sandbox_env(state, hub, tmp_path):
    """The environment of a playbook run against the sandbox hosts of STATE and HUB (a granted token's file)."""
    token = tmp_path / "token"
    token.write_text(token_for("granted") + "\n")
    token.chmod(0o600)
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), CT200_SANDBOX_STATE=str(state),
               CT200_HF_ENDPOINT=hub.url, CT200_HF_TOKEN_FILE=str(token), ANSIBLE_NOCOLOR="1")
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env["PATH"]
    return env


def deploy(state, hub, tmp_path, *extra, playbook="deploy_kimi.yml"):
    """(rc, output) of PLAYBOOK (deploy_kimi.yml, or one of playbooks/) on the sandbox hosts of STATE."""
    proc = subprocess.run(["ansible-playbook", playbook, "-i", "inventories/sandbox",
                           "-e", "ct200_preflight_json=%s" % (tmp_path / "preflight.json"), *extra],
                          cwd=REPO, env=sandbox_env(state, hub, tmp_path), capture_output=True, text=True,
                          timeout=1200, check=False)
    keep_output("_".join(a for a in extra if not a.startswith("-"))[:80], proc.stdout + proc.stderr)
    return proc.returncode, proc.stdout + proc.stderr


def on_host(state, host, *cmd):
    return subprocess.run([SANDBOX, "exec", "--state", str(state), host, "--", *cmd],
                          capture_output=True, text=True, timeout=60, check=False)


def assert_stopped_before_weights(state, host, out, tmp_path):
    assert "Download | start every repository" not in out
    assert "Instance | unit (verified" not in out
    # the fit check's *.json may sit in the commit's snapshot (the weights download reuses them): no weight byte
    weights = on_host(state, host, "find", "/models", "-name", "*.safetensors")
    assert weights.stdout.strip() == "", weights.stdout
    assert on_host(state, host, "systemctl", "is-enabled", "sglang@kimi.service").stdout.strip() != "enabled"
    report = json.loads((tmp_path / "preflight.json").read_text())
    assert report["ok"] is False
    return {c["check"] for c in report["hosts"][0]["failed_checks"]}


@pytest.fixture
def down():
    states = []
    yield states.append
    for state in states:
        subprocess.run([SANDBOX, "down", "--state", str(state)], timeout=120, check=False)


def test_unreachable_wheelhouse_stops_in_preflight(tmp_path, local_hub, down):
    empty = tmp_path / "empty-wheelhouse"
    empty.mkdir()
    state = bare_host(tmp_path, "rt-p1", empty)
    down(state)
    rc, out = deploy(state, local_hub, tmp_path)
    assert rc != 0, out[-3000:]
    assert "[sglang_runtime] SGLang 0.5.23 is not installed" in out
    assert "fix: make wheelhouse /srv/sglang-wheelhouse reachable" in out
    assert assert_stopped_before_weights(state, "rt-p1", out, tmp_path) == {"sglang_runtime"}


def test_too_few_gpus_a_bad_fabric_and_a_noexec_tmp_stop_in_preflight(tmp_path, local_hub, down):
    state = bare_host(tmp_path, "rt-p2", CACHE / "sglang-wheelhouse-0.5.23-cpu")
    down(state)
    remount = on_host(state, "rt-p2", "mount", "-o", "remount,noexec", "/tmp")
    assert remount.returncode == 0, remount.stderr
    rc, out = deploy(state, local_hub, tmp_path, "-e", "sglang_runtime_nvidia_smi=/srv/fake-gpu/nvidia-smi",
                     "-e", "sglang_runtime_allow_no_gpu=false")
    assert rc != 0, out[-3000:]
    assert "[gpus] 4 GPU(s) found, the instances need 8 (tp x pp)" in out
    assert "[p2p] P2P reads are not available between GPU0-GPU2 CNS" in out and "NCCL_P2P_DISABLE=1" in out
    assert "[tmp_exec] /tmp is mounted noexec" in out
    assert "[nvidia_uvm_boot] nothing can create /dev/nvidia-uvm at boot" in out
    failed = assert_stopped_before_weights(state, "rt-p2", out, tmp_path)
    assert {"gpus", "p2p", "tmp_exec", "nvidia_uvm_boot"} <= failed
    health = {c["check"]: c for c in json.loads((tmp_path / "preflight.json").read_text())["hosts"][0]["health"]}
    assert health["compute_cap"]["ok"] and health["compute_cap"]["value"] == {"0": "12.0", "1": "12.0", "2": "12.0",
                                                                              "3": "12.0"}
