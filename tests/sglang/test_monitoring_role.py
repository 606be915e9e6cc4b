# SPDX-License-Identifier: Apache-2.0
"""The monitoring role on a real systemd sandbox host through playbooks/monitoring.yml: Debian's prometheus
installed with apt (local flat repository), the rules and config validated by promtool on the host, the
hardened unit running, a stand-in with a planted bad drafter scraped and CT200AcceptLengthLow firing;
a second run changes nothing; state=absent removes it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import sandbox_up

import models
import prometheus_bin
from conftest import kimi_params, plan, real_dialect, require_parse_venv
from test_standin import CHAT, call, free_port, start

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]
SANDBOX = str(REPO / "tests" / "support" / "sandbox" / "sandbox.sh")
PLAY = "tests/monitoring/monitoring_play.yml"
HOST = os.environ.get("CT200_MONITORING_HOST", os.environ.get("CT200_FLEET_PREFIX", "ct200") + "-mon")


@pytest.fixture(scope="module")
def host():
    if os.geteuid() != 0:
        pytest.skip("needs root (systemd-nspawn)")
    prometheus_bin.binary("promtool")  # the prometheus package is in the shared apt repository
    state = REPO / ".cache" / "sandbox" / ("%s.json" % HOST)
    state.parent.mkdir(parents=True, exist_ok=True)
    with sandbox_up.hosts(HOST, state, ["%s:/srv/mon-apt:ro" % prometheus_bin.APT_REPO]):
        yield state


@pytest.fixture(scope="module")
def bad_drafter(tmp_path_factory):
    """A stand-in on this machine's loopback whose drafter accepts nothing (standin.json accept_length 1.0)."""
    python = require_parse_venv("0.5.23")
    root = tmp_path_factory.mktemp("bad-drafter")
    mdir = {"kimi": models.kimi(root), "kimi_draft": models.kimi_draft(root)}
    Path(mdir["kimi_draft"], "standin.json").write_text(json.dumps({"accept_length": 1.0}))
    port = free_port()
    _spec, _resolved, argv = plan(kimi_params(mdir, port=port), real_dialect("0.5.23"))
    proc = start(python, argv, port)[0]
    try:
        assert call("http://127.0.0.1:%d/v1/chat/completions" % port, CHAT)[0] == 200
        yield port, free_port()
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def playbook(state, extra, *args):
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), CT200_SANDBOX_STATE=str(state),
               ANSIBLE_NOCOLOR="1")
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env["PATH"]
    proc = subprocess.run(["ansible-playbook", PLAY, "-i", "inventories/sandbox", "-e", json.dumps(extra), *args],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=900, check=False)
    return proc.returncode, proc.stdout + proc.stderr


def recap_changed(out):
    line = [ln for ln in out.splitlines() if ln.startswith(HOST) and "changed=" in ln][-1]
    return int(line.split("changed=")[1].split()[0])


def alerts(port):
    try:
        with urllib.request.urlopen("http://127.0.0.1:%d/api/v1/alerts" % port, timeout=5) as answer:
            return json.loads(answer.read())["data"]["alerts"]
    except OSError:
        return None


def test_role_scrapes_alerts_is_idempotent_and_removes(host, bad_drafter):
    standin_port, prom_port = bad_drafter
    extra = {"ct200_monitoring_host": HOST, "monitoring_port": prom_port, "monitoring_scrape_interval": "1s",
             "monitoring_scrape_timeout": "1s", "monitoring_evaluation_interval": "1s", "monitoring_accept_for": "5s",
             "monitoring_blackbox_port": free_port(),  # the sandbox shares the machine's ports
             "sglang_service_instances": [{"name": "kimi", "port": standin_port, "host": "127.0.0.1",
                                           "served_model_name": "kimi-k2.6", "speculative": {"algorithm": "dflash"}}]}
    rc, out = playbook(host, extra)
    assert rc == 0, out[-5000:]
    deadline, seen = time.monotonic() + 90, None
    while time.monotonic() < deadline:
        seen = alerts(prom_port)
        firing = [a for a in seen or [] if a["labels"]["alertname"] == "CT200AcceptLengthLow" and a["state"] == "firing"]
        if firing:
            break
        time.sleep(1)
    else:
        raise AssertionError(seen)
    assert firing[0]["labels"]["ct200_host"] == HOST and float(firing[0]["value"]) == 1.0
    unit = subprocess.run([SANDBOX, "exec", "--state", str(host), HOST, "--", "systemctl", "show", "-p",
                           "User,ProtectSystem,NoNewPrivileges", "ct200-prometheus"],
                          capture_output=True, text=True, timeout=60, check=False)
    assert "User=prometheus" in unit.stdout and "ProtectSystem=strict" in unit.stdout, unit.stdout + unit.stderr
    # the /health_generate probe: Debian's blackbox exporter in its own hardened unit, the stand-in's probe a success
    box = subprocess.run([SANDBOX, "exec", "--state", str(host), HOST, "--", "systemctl", "show", "-p",
                          "ActiveState,User,ProtectSystem", "ct200-blackbox"],
                         capture_output=True, text=True, timeout=60, check=False)
    assert "ActiveState=active" in box.stdout and "User=prometheus" in box.stdout, box.stdout + box.stderr
    with urllib.request.urlopen("http://127.0.0.1:%d/probe?module=http_2xx&target=http://127.0.0.1:%d/health_generate"
                                % (extra["monitoring_blackbox_port"], standin_port), timeout=30) as answer:
        assert "probe_success 1" in answer.read().decode()

    rc, out = playbook(host, extra, "--skip-tags", "prepare")
    assert rc == 0, out[-4000:]
    assert recap_changed(out) == 0, out[-3000:]

    rc, out = playbook(host, dict(extra, monitoring_state="absent"), "--skip-tags", "prepare")
    assert rc == 0, out[-4000:]
    assert alerts(prom_port) is None  # nothing listens any more
