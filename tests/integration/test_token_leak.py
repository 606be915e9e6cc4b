# SPDX-License-Identifier: Apache-2.0
"""No token anywhere but the token file: -vvv --diff output, ansible-runner artifacts,
process argv on the controller and the host, every file on the host, the host's journal.

Runs the real verify_access playbook (hf_client, hf_token, hf_gated_access roles) through
ansible-runner against a sandbox host to install a token, then rotate_hf_token.yml to a second
token (passed by file path, as the ct200 command does).
"""

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import ansible_runner
import pytest
import sandbox_up

from localhub.personas import token_for

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]


class ArgvWatcher(threading.Thread):
    """Samples /proc/*/cmdline (host and container processes alike) while the playbook runs."""

    def __init__(self, secrets):
        super().__init__(daemon=True)
        self.secrets = [s.encode() for s in secrets]
        self.hits = []
        self.samples = 0
        self.stop = threading.Event()

    def run(self):
        while not self.stop.is_set():
            for pid in os.listdir("/proc"):
                if not pid.isdigit():
                    continue
                try:
                    with open("/proc/%s/cmdline" % pid, "rb") as fh:
                        argv = fh.read()
                except OSError:
                    continue
                if any(s in argv for s in self.secrets):
                    self.hits.append(argv.replace(b"\0", b" ")[:200])
            self.samples += 1
            time.sleep(0.02)


@pytest.fixture
def sandbox_host(tmp_path):
    state = tmp_path / "sandbox.json"
    with sandbox_up.hosts("token-leak-1", state, ["%s:/srv/wheelhouse:ro" % (REPO / ".cache" / "wheelhouse")],
                          timeout=180) as booted:
        yield state, booted["hosts"][0]


def run_playbook(tmp_path, name, state, hub, token, playbook="playbooks/verify_access.yml", pending=None):
    private = tmp_path / ("runner-" + name)
    private.mkdir()
    token_file = tmp_path / ("token-" + name)
    token_file.write_text(token + "\n")
    token_file.chmod(0o600)
    extravars = {}
    if pending:
        pending_file = tmp_path / ("pending-" + name)
        pending_file.write_text(pending + "\n")
        pending_file.chmod(0o600)
        extravars["hf_token_new_file"] = str(pending_file)
    watcher = ArgvWatcher([token] + ([pending] if pending else []))
    watcher.start()
    try:
        result = ansible_runner.run(
            private_data_dir=str(private), playbook=str(REPO / playbook), extravars=extravars,
            inventory=str(REPO / "inventories" / "sandbox"), verbosity=3, cmdline="--diff",
            envvars={"ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "CT200_SANDBOX_STATE": str(state),
                     "CT200_HF_ENDPOINT": hub.url, "CT200_HF_TOKEN_FILE": str(token_file), "ANSIBLE_NOCOLOR": "1"},
            suppress_env_files=True, quiet=True)
    finally:
        watcher.stop.set()
        watcher.join()
    return result, private, watcher


def files_containing(root, needle):
    """Files below root holding needle (the controller-side token files are outside root)."""
    hits = []
    for dirpath, _unused, files in os.walk(root):
        for f in files:
            p = os.path.join(dirpath, f)
            try:
                with open(p, "rb") as fh:
                    if needle.encode() in fh.read():
                        hits.append(p)
            except OSError:
                pass
    return hits


def host_files_containing(state, host, needle):
    cmd = [str(REPO / "tests" / "support" / "sandbox" / "sandbox.sh"), "exec", "--state", str(state), host, "--",
           "grep", "-rlaF", "--exclude-dir=proc", "--exclude-dir=sys", "--exclude-dir=dev",
           "--exclude-dir=run", "--exclude-dir=srv", "--exclude-dir=work", "-e", needle, "/"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
    return sorted(line for line in out.stdout.splitlines() if line)


def test_no_token_leaks_anywhere(tmp_path, local_hub, sandbox_host, monkeypatch):
    monkeypatch.setenv("PATH", os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"])
    state, host = sandbox_host
    first, second = token_for("granted"), token_for("granted_write")

    res1, dir1, watch1 = run_playbook(tmp_path, "install", state, local_hub, first)
    out1 = res1.stdout.read()
    assert res1.rc == 0, out1[-4000:]
    res2, dir2, watch2 = run_playbook(tmp_path, "rotate", state, local_hub, first, playbook="rotate_hf_token.yml",
                                      pending=second)
    out2 = res2.stdout.read()
    assert res2.rc == 0, out2[-4000:]

    # The runs did what they claim (so the absence of leaks below means something).
    assert "<%s> ESTABLISH" in out1 or "ESTABLISH" in out1, "-vvv output expected"
    assert "ct200-granted" in out1 and "ct200-granted-write" in out2
    assert "--- before" in out2 or "changed: [" in out2
    assert watch1.samples > 10 and watch2.samples > 10

    for token in (first, second):
        assert token not in out1 and token not in out2, "token in -vvv --diff output"
        assert files_containing(dir1, token) == [] and files_containing(dir2, token) == [], \
            "token in ansible-runner artifacts"
    assert watch1.hits == [] and watch2.hits == [], "token in a process argv: %r" % (watch1.hits + watch2.hits)

    token_path = "/root/.cache/huggingface/token"
    current = host_files_containing(state, host["name"], second)
    assert current == [token_path], current
    previous = host_files_containing(state, host["name"], first)
    assert len(previous) == 1 and previous[0].startswith(token_path + "."), \
        "the old token may only survive in the 0600 backup of the token file: %r" % previous
    journal = subprocess.run([str(REPO / "tests" / "support" / "sandbox" / "sandbox.sh"), "exec", "--state", str(state), host["name"],
                              "--", "journalctl", "--no-pager", "-o", "cat"], capture_output=True, text=True,
                             timeout=60, check=False).stdout
    assert first not in journal and second not in journal
