# SPDX-License-Identifier: Apache-2.0
"""The weight_peer role on a real systemd sandbox host: nginx-light installed with apt from Debian's
packages (local flat repository), served read-only, idempotent, removed by state=absent."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import sandbox_up

from tests.fanout.netns_site import apt_repo

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]
SANDBOX = str(REPO / "tests" / "support" / "sandbox" / "sandbox.sh")
PLAY = "tests/fanout/weight_peer_play.yml"
# another checkout running this test at the same time on this machine sets its own name
HOST = os.environ.get("CT200_FANOUT_PEER_HOST", "fanout-peer")


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def host(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("needs root (systemd-nspawn)")
    repo = apt_repo()  # nginx-light from Debian, in the shared local apt repository
    state = REPO / ".cache" / "sandbox" / ("%s.json" % HOST)
    state.parent.mkdir(parents=True, exist_ok=True)
    with sandbox_up.hosts(HOST, state, ["%s:/srv/fo-apt:ro" % repo]):
        yield state


def playbook(state, *extra):
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), CT200_SANDBOX_STATE=str(state),
               ANSIBLE_NOCOLOR="1")
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env["PATH"]
    proc = subprocess.run(["ansible-playbook", PLAY, "-i", "inventories/sandbox", *extra], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=900, check=False)
    return proc.returncode, proc.stdout + proc.stderr


def get(url):
    try:
        with urllib.request.urlopen(url, timeout=10) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, b""
    except OSError:
        return None, b""


def recap_changed(out):
    line = [ln for ln in out.splitlines() if ln.startswith(HOST) and "changed=" in ln][-1]
    return int(line.split("changed=")[1].split()[0])


def test_role_installs_serves_is_idempotent_and_removes(host):
    port = free_port()
    rc, out = playbook(host, "-e", "fo_port=%d" % port)
    assert rc == 0, out[-4000:]
    base = "http://127.0.0.1:%d" % port
    assert get(base + "/m/model-1.safetensors") == (200, b"verified")
    assert get(base + "/m/.ct200/manifest.json")[0] == 404
    assert get(base + "/m/")[0] in (403, 404)
    # the server this run started runs the new unit and configuration: no restart, no reload on top
    restart = out.split("TASK [ct200.deploy.weight_peer : Restart on a new unit]")[1].split("TASK [")[0]
    assert "skipping: [%s]" % HOST in restart, restart
    assert "RUNNING HANDLER [ct200.deploy.weight_peer : Reload" not in out or "skipping: [%s]" % HOST in \
        out.split("RUNNING HANDLER [ct200.deploy.weight_peer : Reload")[1].split("TASK [")[0], out[-3000:]

    rc, out = playbook(host, "-e", "fo_port=%d" % port, "--skip-tags", "prepare")
    assert rc == 0, out[-4000:]
    assert recap_changed(out) == 0, out[-3000:]
    # a configuration change while it serves: the running server reloads it (a server that run started needs not)
    two = '{"weight_peer_models": [{"name": "m", "path": "/srv/fo-model"}, {"name": "n", "path": "/srv/fo-model"}]}'
    rc, out = playbook(host, "-e", "fo_port=%d" % port, "-e", two, "--skip-tags", "prepare")
    assert rc == 0, out[-4000:]
    assert "RUNNING HANDLER [ct200.deploy.weight_peer : Reload the weight_peer server]" in out, out[-3000:]
    assert get(base + "/n/model-1.safetensors") == (200, b"verified")

    rc, out = playbook(host, "-e", "fo_port=%d" % port, "-e", "fo_state=absent", "--skip-tags", "prepare")
    assert rc == 0, out[-4000:]
    assert get(base + "/m/model-1.safetensors")[0] is None  # nothing listens any more
    unit = subprocess.run([SANDBOX, "exec", "--state", str(host), HOST, "--", "test", "-e",
                           "/etc/systemd/system/ct200-weight-peer.service"], capture_output=True, timeout=60,
                          check=False)
    assert unit.returncode != 0
    rc, out = playbook(host, "-e", "fo_port=%d" % port, "-e", "fo_state=absent", "--skip-tags", "prepare")
    assert rc == 0 and recap_changed(out) == 0, out[-3000:]
