"""rotate_hf_token.yml on a 3-host sandbox fleet: verify-before-swap, canary, idempotence."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from localhub.personas import token_for

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]
SANDBOX = str(REPO / "scripts" / "sandbox.sh")


@pytest.fixture
def fleet(tmp_path):
    state = tmp_path / "fleet.json"
    up = subprocess.run([SANDBOX, "up", "--names", "rot-1,rot-2,rot-3", "--state", str(state), "--recreate",
                         "--bind", "%s:/srv/wheelhouse:ro" % (REPO / ".cache" / "wheelhouse")],
                        capture_output=True, text=True, timeout=180, check=False)
    assert up.returncode == 0, up.stderr
    yield state
    subprocess.run([SANDBOX, "down", "--state", str(state)], timeout=120, check=False)


def playbook(name, state, hub, tmp_path, current, nxt, *extra):
    files = {}
    for key, persona in (("CT200_HF_TOKEN_FILE", current), ("CT200_HF_TOKEN_NEXT_FILE", nxt)):
        p = tmp_path / key
        p.write_text(token_for(persona) + "\n")
        p.chmod(0o600)
        files[key] = str(p)
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), CT200_SANDBOX_STATE=str(state),
               CT200_HF_ENDPOINT=hub.url, ANSIBLE_NOCOLOR="1", **files)
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env["PATH"]
    proc = subprocess.run(["ansible-playbook", name, "-i", "inventories/sandbox", *extra], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=600, check=False)
    return proc.returncode, proc.stdout + proc.stderr


def fingerprints(state):
    out = {}
    for host in ("rot-1", "rot-2", "rot-3"):
        r = subprocess.run([SANDBOX, "exec", "--state", str(state), host, "--", "sha256sum",
                            "/root/.cache/huggingface/token"], capture_output=True, text=True, timeout=60, check=False)
        out[host] = r.stdout.split()[0] if r.returncode == 0 else None
    return out


def test_rotation(fleet, local_hub, tmp_path):
    rc, out = playbook("playbooks/verify_access.yml", fleet, local_hub, tmp_path, "granted", "granted")
    assert rc == 0, out[-3000:]
    installed = fingerprints(fleet)
    assert len(set(installed.values())) == 1 and None not in installed.values()

    # A new token whose user never requested the drafter: refused on the controller, no host touched.
    rc, out = playbook("rotate_hf_token.yml", fleet, local_hub, tmp_path, "granted", "never_requested")
    assert rc != 0 and "new token refused, no host was changed" in out and "z-lab/Kimi-K2.6-DFlash" in out
    assert fingerprints(fleet) == installed

    # A good token: canary first, then the rest; every host ends with it.
    rc, out = playbook("rotate_hf_token.yml", fleet, local_hub, tmp_path, "granted", "granted_write")
    assert rc == 0, out[-3000:]
    rotated = fingerprints(fleet)
    assert set(rotated.values()) != set(installed.values()) and len(set(rotated.values())) == 1
    plays = out.split("PLAY [Roll the new token out, canary first]")
    # serial [1, "25%"] over 3 hosts: the canary alone, then batches of max(1, 25 %) = 1 host.
    assert len(plays) == 4, "three batches expected"
    canary = plays[1].split("PLAY RECAP")[0]
    assert "rot-1" in canary and "rot-2" not in canary and "rot-3" not in canary

    # Re-run in check mode: nothing left to change anywhere.
    rc, out = playbook("rotate_hf_token.yml", fleet, local_hub, tmp_path, "granted", "granted_write", "--check")
    assert rc == 0, out[-3000:]
    recap = [line for line in out.splitlines() if line.startswith("rot-")]
    assert recap and all("changed=0" in line for line in recap), recap
    for p in ("granted", "never_requested", "granted_write"):
        assert token_for(p) not in out
