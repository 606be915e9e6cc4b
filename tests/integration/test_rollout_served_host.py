# SPDX-License-Identifier: Apache-2.0
"""Releases on the shared served host, in the suite (issue 13): playbooks/rollout.yml and rollback.yml on a
real systemd host that deploy_kimi.yml served. The 8-host fault scenarios (tests/fleet/test_fleet_rollout.py)
need a served fleet and run with CT200_FLEET_SCENARIOS=1; these prove the same path on one host, in order:

1. right after a deploy, a rollout that changes nothing is a no-op: changed=0 (the deploy recorded the
   release it serves, with its decode throughput); with the records gone (a host deployed before deploys
   recorded), the rollout adopts the same release and measures it, restarting nothing;
2. a bad drafter revision (acceptance 1.0; decode -30 %) fails the canary's acceptance (throughput) gate, and
   the host is back on its previous release, restarted and serving, with nothing recorded;
3. a good drafter revision is switched to and recorded (current -> previous), its figures measured; garbage
   collection keeps the drafter snapshots of current and previous only;
4. rollback.yml returns the host to the release it served before.

A bad release is a Hub commit of the drafter with a new standin.json, as in the field. The commits go to a Hub
of this module's own (the same default repositories give the same commits as the suite's local_hub), so the
suite's shared Hub keeps its main."""

import json
import re

import pytest
from localhub import LocalHub

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
    """The served host on the inventory's spec (tests/conftest.py runs these right after the tag walk, which
    leaves it there; else a deploy from this module's Hub puts it back)."""
    state = served_host[0]
    if off_spec(state).exists():
        rc, out = deploy(state, hub, tmp_path_factory.mktemp("rollout-deploy"), *SERVED_PORT)
        assert rc == 0, out[-4000:]
        off_spec(state).unlink()
    return state


def play(state, hub, tmp_path, playbook, *extra):
    """ansible-playbook playbooks/PLAYBOOK on the served host (the port its instance keeps)."""
    return deploy(state, hub, tmp_path, *SERVED_PORT, *extra, playbook=str(REPO / "playbooks" / playbook))


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

    # a host deployed before deploys recorded releases: the rollout adopts what it serves (the same release id,
    # read from the installed unit and env file) and measures its baseline, restarting nothing
    sh(host, "rm -rf %s" % RELEASES)
    rc, out = play(host, hub, tmp_path, "rollout.yml")
    assert rc == 0, out[-6000:]
    adopted, recs = releases(host)
    assert adopted["current"] == st["current"] and adopted["previous"] is None, adopted
    assert recs["current"]["measured"]["decode_tok_s"] > 30 and started_at(host) == started


@pytest.mark.parametrize("gate,behaviour,measured", [
    ("acceptance", {"accept_length": 1.0}, "measured 1.0"),
    ("throughput", {"decode_tok_s": 28.0}, "measured 2"),   # -30 % of the deployed 40 tok/s: about 28
    # exits at start: the role's run path fails, and what its rescue kept (the health wait's exit) names the gate
    ("health_generate", {"crash_on_start": True}, "measured the process exited (Result=exit-code"),
])
def test_a_bad_drafter_fails_its_gate_and_the_host_is_back(host, hub, tmp_path, gate, behaviour, measured):
    st, recs = releases(host)
    unit_before, started = sh(host, "cat /etc/systemd/system/%s" % UNIT), started_at(host)
    commit_drafter(hub, behaviour, "bad drafter: " + gate)
    rc, out = play(host, hub, tmp_path, "rollout.yml")
    assert rc != 0, out[-6000:]
    msg = next((line for line in out.splitlines() if "%s: gate %s failed" % (HOST, gate) in line), None)
    assert msg, out[-6000:]
    assert measured in msg and "Cause:" in msg and "Fix:" in msg and "back on its previous release" in msg, msg
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
    # the rollout completed: garbage collection kept the drafter snapshots of current and previous, no other
    # (the bad drafters' snapshots, staged and never served, are gone)
    kept = {new[k]["drafter"]["dir"] for k in ("current", "previous")}
    snaps = set(sh(host, "ls -d /models/%s/snapshots/*/" % DRAFTER).split())
    assert {p.rstrip("/") for p in snaps} == kept, (snaps, kept)

    rc, out = play(host, hub, tmp_path, "rollback.yml")
    assert rc == 0, out[-6000:]
    back_st = releases(host)[0]
    assert back_st["current"] == st["current"] and back_st["previous"] == new_st["current"], back_st
    assert sh(host, "cat /etc/systemd/system/%s" % UNIT) == unit_before and serves(host)
