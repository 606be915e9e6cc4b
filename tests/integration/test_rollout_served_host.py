# SPDX-License-Identifier: Apache-2.0
"""Releases on the shared served host, in the suite (issue 13): playbooks/rollout.yml and rollback.yml on a
real systemd host that deploy_kimi.yml served. The 8-host fault scenarios (tests/fleet/test_fleet_rollout.py)
need a served fleet and run with CT200_FLEET_SCENARIOS=1; these prove the same path on one host, in order:

1. right after a deploy, a rollout that changes nothing is a no-op: changed=0 (the deploy recorded the
   release it serves, with its decode throughput);
2. a bad drafter revision (acceptance 1.0) fails the canary's acceptance gate, and the host is back on its
   previous release, restarted and serving, with nothing recorded;
3. a good drafter revision is switched to and recorded (current -> previous), its figures measured;
4. rollback.yml returns the host to the release it served before.

A bad release is a Hub commit of the drafter with a new standin.json, as in the field. The commits go to a Hub
of this module's own (the same default repositories give the same commits as the suite's local_hub), so the
suite's shared Hub keeps its main."""

import json
import os
import re
import subprocess
import sys

import pytest
from localhub import LocalHub
from localhub.personas import token_for

from test_deploy_preflight import REPO, SERVED_PORT, deploy, off_spec, on_host
from test_deploy_preflight import SERVED_HOST as HOST

pytestmark = pytest.mark.slow
DRAFTER = "z-lab/Kimi-K2.6-DFlash"
RELEASES = "/var/lib/ct200/releases"
UNIT = "sglang@kimi.service"
RECAP = re.compile(r"^(\S+)\s+: ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", re.M)


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    with LocalHub(tmp_path_factory.mktemp("rollout-hub")) as own:
        yield own


@pytest.fixture(scope="module")
def host(served_host, hub, tmp_path_factory):
    """The served host on the inventory's spec, deployed from this module's Hub."""
    state = served_host[0]
    tmp = tmp_path_factory.mktemp("rollout-deploy")
    rc, out = deploy(state, hub, tmp, *SERVED_PORT)
    assert rc == 0, out[-4000:]
    off_spec(state).unlink(missing_ok=True)
    return state


def play(state, hub, tmp_path, playbook, *extra):
    """ansible-playbook PLAYBOOK on the served host (the rollout's own inventory variables only)."""
    token = tmp_path / "token"
    token.write_text(token_for("granted") + "\n")
    token.chmod(0o600)
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), CT200_SANDBOX_STATE=str(state),
               CT200_HF_ENDPOINT=hub.url, CT200_HF_TOKEN_FILE=str(token), ANSIBLE_NOCOLOR="1")
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env["PATH"]
    proc = subprocess.run(["ansible-playbook", str(REPO / "playbooks" / playbook), "-i", "inventories/sandbox",
                           "-e", "ct200_preflight_json=%s" % (tmp_path / "preflight.json"), *SERVED_PORT, *extra],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=900, check=False)
    return proc.returncode, proc.stdout + proc.stderr


def sh(state, cmd):
    res = on_host(state, HOST, "sh", "-c", cmd)
    assert res.returncode == 0, (cmd, res.stderr)
    return res.stdout


def releases(state):
    """state.json, and the record of its current and previous release."""
    st = json.loads(sh(state, "cat %s/state.json" % RELEASES))
    return st, {k: json.loads(sh(state, "cat %s/%s.json" % (RELEASES, st[k]))) if st.get(k) else None
                for k in ("current", "previous")}


def started_at(state):
    return sh(state, "systemctl show -p ExecMainStartTimestampMonotonic --value %s" % UNIT).strip()


def serves(state):
    code = sh(state, "curl -s -o /dev/null -w '%{http_code}' --max-time 5 http://127.0.0.1:30041/health_generate "
                     "|| true").strip()
    return code == "200"


def commit_drafter(hub, behaviour, note):
    files = {"README.md": ("# Kimi-K2.6-DFlash (ct200 local Hub stand-in)\n\nrevision: %s\n" % note).encode(),
             "standin.json": json.dumps(behaviour).encode()}
    return hub.commit(DRAFTER, files, note)


def test_a_rollout_right_after_a_deploy_changes_nothing(host, hub, tmp_path):
    st, recs = releases(host)
    assert recs["current"]["measured"]["decode_tok_s"] > 30, recs["current"]  # the deploy measured its baseline
    unit_before, started = sh(host, "cat /etc/systemd/system/%s" % UNIT), started_at(host)
    rc, out = play(host, hub, tmp_path, "rollout.yml")
    assert rc == 0, out[-6000:]
    rows = {m.group(1): int(m.group(3)) for m in RECAP.finditer(out)}
    assert rows.get(HOST) == 0, (rows, out[-3000:])
    assert releases(host)[0] == st and started_at(host) == started
    assert sh(host, "cat /etc/systemd/system/%s" % UNIT) == unit_before


def test_a_bad_drafter_fails_the_acceptance_gate_and_the_host_is_back(host, hub, tmp_path):
    st, recs = releases(host)
    unit_before, started = sh(host, "cat /etc/systemd/system/%s" % UNIT), started_at(host)
    commit_drafter(hub, {"accept_length": 1.0}, "bad drafter: acceptance 1.0")
    rc, out = play(host, hub, tmp_path, "rollout.yml")
    assert rc != 0, out[-6000:]
    msg = next((line for line in out.splitlines() if "%s: gate acceptance failed" % HOST in line), None)
    assert msg, out[-6000:]
    assert "measured 1.0" in msg and "Cause:" in msg and "Fix:" in msg and "back on its previous release" in msg, msg
    assert releases(host)[0] == st                                         # nothing recorded
    assert sh(host, "cat /etc/systemd/system/%s" % UNIT) == unit_before    # its previous release's unit
    assert started_at(host) != started and serves(host)                    # restarted on it, serving


def test_a_good_drafter_is_switched_recorded_and_rolled_back(host, hub, tmp_path):
    st, recs = releases(host)
    unit_before = sh(host, "cat /etc/systemd/system/%s" % UNIT)
    good = commit_drafter(hub, {"accept_length": 3.0, "decode_tok_s": 40.0}, "good drafter")
    rc, out = play(host, hub, tmp_path, "rollout.yml")
    assert rc == 0, out[-6000:]
    new_st, new = releases(host)
    assert new_st["previous"] == st["current"] and new_st["current"] != st["current"], new_st
    assert new["current"]["drafter"]["commit"] == good and new["previous"]["drafter"]["commit"] != good
    assert new["current"]["measured"]["accept_length"] == 3.0 and new["current"]["measured"]["decode_tok_s"] > 30
    assert new["current"]["drafter"]["dir"] in sh(host, "cat /etc/systemd/system/%s" % UNIT) and serves(host)

    rc, out = play(host, hub, tmp_path, "rollback.yml")
    assert rc == 0, out[-6000:]
    back_st, _ = releases(host)
    assert back_st["current"] == st["current"] and back_st["previous"] == new_st["current"], back_st
    assert sh(host, "cat /etc/systemd/system/%s" % UNIT) == unit_before and serves(host)
