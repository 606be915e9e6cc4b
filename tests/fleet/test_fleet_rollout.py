# SPDX-License-Identifier: Apache-2.0
"""Releases on the SSH fleet (issue 13 items 3, 4, 6): playbooks/rollout.yml and rollback.yml on a
served fleet, one deploy shared by every test here (``served_fleet``), in this order:

1. a clean rollout of a drafter revision (a LocalHub commit), its controller SIGKILLed while the
   canary restarts, then a re-run that converges: every host records the new release as current
   and the adopted one as previous, never more hosts out of service than the batch;
2. the same rollout again: changed=0;
3. a bad release caught at the canary for each gate (never ready, acceptance 1.0, throughput -30 %):
   the canary is back on its previous release and serves, no other host was restarted, the message
   names host, gate, measured value, cause and fix;
4. a gate failure on the middle host and on the last host (a standin.json ``hosts`` override);
5. ``ct200 rollback --limit`` of one host;
6. garbage collection keeping exactly current + previous (when ct200.deploy.release_gc is there);
7. a rollout of an SGLang version (a second wheelhouse, its own venv), then ``ct200 rollback`` of the fleet.

A bad release is a Hub commit of the drafter with a new standin.json (the stand-in's behaviour
file), as in the field: no test switch in the product.
"""
from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy_kimi.yml"
ROLLOUT = REPO / "playbooks" / "rollout.yml"
ROLLBACK = REPO / "playbooks" / "rollback.yml"
STANDIN = REPO / "tests" / "support" / "sglang_standin" / "sglang_standin.py"
DRAFTER = "z-lab/Kimi-K2.6-DFlash"
UNIT = "sglang@kimi.service"
UNIT_PATH = "/etc/systemd/system/" + UNIT
PROFILE = {"ANSIBLE_CALLBACKS_ENABLED": "ansible.posix.profile_tasks"}
RECAP = re.compile(r"^(\S+)\s+: ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", re.M)


class Served:
    """served_fleet (tests/fleet/conftest.py: the fleet after one full deploy_kimi.yml) with the rollout's runs."""

    def __init__(self, fleet):
        self.fleet = fleet
        self.session = fleet.session
        self.hosts = fleet.hosts
        self.env = dict(fleet.env)

    def run_playbook(self, path, extra=None, limit=None, timeout=900):
        args = ("-e", json.dumps(extra)) if extra else ()
        run = self.fleet.run_playbook(path, limit=limit, args=args, timeout=timeout, env=PROFILE)
        logs = os.environ.get("CT200_ROLLOUT_LOGS")  # where to keep each run's output (per-task times)
        if logs:
            os.makedirs(logs, exist_ok=True)
            with open(os.path.join(logs, "%d-%s.log" % (time.time(), Path(path).stem)), "w") as handle:
                handle.write(run.out)
        return run

    def popen_playbook(self, path, extra=None):
        args = ("-e", "@%s" % self.fleet.extra_vars_file) + (("-e", json.dumps(extra)) if extra else ())
        return self.session.popen_playbook(path, env=self.env, args=args)

    def port(self, host):
        return self.fleet.port(host)

    def rollback(self, limit=None, json_path=None, timeout=900):
        """``ct200 rollback`` of the fleet (or LIMIT) as an operator runs it: (completed process, seconds)."""
        argv = [sys.executable, "-m", "ct200_fleet", "rollback", "-i", str(REPO / "inventories" / "sandbox")]
        argv += ["--limit", limit] if limit else []
        argv += ["--json", str(json_path)] if json_path else []
        t0 = time.monotonic()
        proc = subprocess.run(argv, cwd=REPO, env=self.session.fleet.env(self.session.env(self.env)),
                              capture_output=True, text=True, timeout=timeout, check=False)
        return proc, time.monotonic() - t0


def standin_bridge(served) -> None:
    """Until the SGLang wheelhouse is rebuilt with this checkout's stand-in (its stamp carries the source's hash:
    scripts/sglang-wheelhouse.sh), the venv the hosts share gets it copied in and each unit is restarted. Test
    infrastructure only; a no-op once the wheel carries this source."""
    source = STANDIN.read_text()
    session, host = served.session, served.hosts[0]
    res = session.exec(host, "ls /srv/ct200-shared/sglang/*/lib/python3*/site-packages/ct200_sglang_standin.py")
    assert res.returncode == 0, res.stderr
    restart = False
    for path in res.stdout.split():
        if session.exec(host, "cat %s" % path).stdout != source:
            sh(session, host, "cat > %s.new && mv %s.new %s" % (path, path, path), input=source)
            restart = True
    if restart:
        for h in served.hosts:
            sh(session, h, "systemctl restart %s" % UNIT)
    for h in served.hosts:
        wait_serving(served, h)


@pytest.fixture(scope="module")
def served(served_fleet):
    served = Served(served_fleet)
    standin_bridge(served)
    return served


def sh(session, host, cmd, input=None):
    res = session.exec(host, cmd, input=input)
    assert res.returncode == 0, (host, cmd, res.stderr)
    return res.stdout


def port_of(session, host) -> int:
    return 30000 + session.hosts.index(host) + 1  # inventories/sandbox: 30000 + ct200_sandbox_index


def health(session, host, timeout=3.0) -> int:
    """/health_generate of HOST's instance, asked on the host (it listens on loopback)."""
    res = session.exec(host, "curl -s -o /dev/null -w '%%{http_code}' --max-time %s "
                             "http://127.0.0.1:%d/health_generate || true" % (timeout, port_of(session, host)))
    return int(res.stdout.strip()) if res.stdout.strip().isdigit() else 0


def wait_serving(served, host, timeout=120):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if health(served.session, host) == 200:
            return
        time.sleep(1)
    raise AssertionError("%s does not serve after %ss" % (host, timeout))


def started_at(session, host) -> str:
    """When the unit's main process started (a restart changes it)."""
    return sh(session, host, "systemctl show -p ExecMainStartTimestampMonotonic --value %s" % UNIT).strip()


def snapshot(served) -> dict:
    s = served.session
    return {h: {"state": s.release_state(h), "started": started_at(s, h), "unit": sh(s, h, "cat %s" % UNIT_PATH)}
            for h in served.hosts}


def recap(out: str) -> dict:
    return {m.group(1): {"ok": int(m.group(2)), "changed": int(m.group(3)), "unreachable": int(m.group(4)),
                         "failed": int(m.group(5))} for m in RECAP.finditer(out)}


def commit_drafter(served, behaviour: dict | None, note: str) -> str:
    """A drafter revision (a Hub commit moving main): a new standin.json, or only its README changed."""
    files = {"README.md": ("# Kimi-K2.6-DFlash (ct200 local Hub stand-in)\n\nrevision: %s\n" % note).encode()}
    files["standin.json"] = json.dumps(behaviour or {}).encode()
    return served.session.hub.commit(DRAFTER, files, note)


class Availability(object):
    """Each host polls its own /health_generate every 0.5 s while a rollout runs (a transient unit, so the
    poll does not depend on the controller); afterwards: the most hosts down at one time, and which ones."""

    POLL = ("while :; do c=$(curl -s -o /dev/null -w '%{http_code}' --max-time 1 http://127.0.0.1:PORT/health_generate); "
            "echo \"$(date +%s.%N) $c\" >> /run/ct200-avail.log; sleep 0.5; done")

    def __init__(self, served):
        self.served, self.max_down, self.down_hosts = served, 0, set()

    def __enter__(self):
        for host in self.served.hosts:
            poll = self.POLL.replace("PORT", str(port_of(self.served.session, host)))
            sh(self.served.session, host, "rm -f /run/ct200-avail.log; systemd-run --quiet --unit ct200-avail "
                                          "/bin/sh -c %s" % shlex.quote(poll))
        return self

    def __exit__(self, *exc):
        samples = {}
        for host in self.served.hosts:
            self.served.session.exec(host, "systemctl stop ct200-avail")
            out = self.served.session.exec(host, "cat /run/ct200-avail.log").stdout
            samples[host] = [(float(t), code == "200") for t, code in (line.split() for line in out.splitlines()
                                                                       if len(line.split()) == 2)]
        buckets = {}
        for host, rows in samples.items():
            for t, ok in rows:
                if not ok:
                    buckets.setdefault(int(t * 2), set()).add(host)
                    self.down_hosts.add(host)
        self.max_down = max((len(v) for v in buckets.values()), default=0)
        self.samples = sum(len(v) for v in samples.values())


def serial_extra():
    return {"ct200_rollout_serial": [1, "25%"]}


def popen_rollout(served):
    return served.popen_playbook(ROLLOUT, serial_extra())


# ---------------------------------------------------------------------------
def test_clean_drafter_rollout_survives_a_killed_controller_and_converges(served):
    s = served.session
    before = snapshot(served)
    good = commit_drafter(served, {"decode_tok_s": 40.0, "accept_length": 3.5}, "good drafter")

    proc = popen_rollout(served)
    lines, killed = [], False
    for line in proc.stdout:
        lines.append(line)
        if "Run | wait until healthy" in line:  # the canary's new unit is starting: the controller dies here
            proc.kill()
            killed = True
            break
    proc.wait(60)
    assert killed, "".join(lines)[-5000:]
    adopted = {h: s.release_state(h) for h in served.hosts}  # the first play recorded what every host served
    assert all(st.get("current") and st.get("previous") is None for st in adopted.values()), adopted
    assert all(sh(s, h, "cat %s" % UNIT_PATH) == before[h]["unit"] for h in served.hosts[1:]), "only the canary"

    with Availability(served) as avail:
        t0 = time.monotonic()
        run = served.run_playbook(ROLLOUT, extra=serial_extra())
        seconds = time.monotonic() - t0
    assert run.rc == 0, run.out[-6000:]
    after = snapshot(served)
    for host in served.hosts:
        st = after[host]["state"]
        assert st["previous"] == adopted[host]["current"] and st["current"] != st["previous"], st
        old = s.release_record(host, st["previous"])
        rec = s.release_record(host, st["current"])  # ids differ per host: each host's unit has its own port and GPUs
        assert rec["drafter"]["commit"] == good and old["drafter"]["commit"] != good, (rec, old)
        assert rec["target"]["commit"] == old["target"]["commit"] and rec["sglang_version"] == old["sglang_version"]
        assert rec["measured"]["decode_tok_s"] > 30 and rec["measured"]["accept_length"] == 3.5, rec
        assert old["measured"]["decode_tok_s"] > 30, old  # the baseline measured on the serving release
        assert rec["units"][UNIT_PATH] == after[host]["unit"]
        assert after[host]["started"] != before[host]["started"]
        assert health(s, host) == 200
    batch = max(1, len(served.hosts) // 4)
    assert avail.samples > 10 and avail.max_down <= batch, (avail.max_down, batch)
    print("clean rollout of %d hosts: %.0f s, at most %d down" % (len(served.hosts), seconds, avail.max_down))


def test_the_same_rollout_again_changes_nothing(served):
    before = snapshot(served)
    run = served.run_playbook(ROLLOUT, extra=serial_extra())
    assert run.rc == 0, run.out[-6000:]
    rows = recap(run.out)
    assert set(rows) >= set(served.hosts) and all(r["changed"] == 0 for r in rows.values()), rows
    assert snapshot(served) == before


@pytest.mark.parametrize("gate,behaviour,measured", [
    ("health_generate", {"never_ready": True}, "not 200"),
    ("acceptance", {"accept_length": 1.0}, "measured 1.0"),
    ("throughput", {"decode_tok_s": 28.0}, "measured 2"),   # -30 %: about 28 tok/s
])
def test_a_bad_release_is_caught_at_the_canary_and_the_canary_is_back(served, gate, behaviour, measured):
    s = served.session
    before = snapshot(served)
    commit_drafter(served, behaviour, "bad drafter: " + gate)
    with Availability(served) as avail:
        run = served.run_playbook(ROLLOUT, extra=serial_extra())
    assert run.rc != 0
    canary = served.hosts[0]
    msg = next((line for line in run.out.splitlines() if "%s: gate %s failed" % (canary, gate) in line), None)
    assert msg, run.out[-6000:]
    assert measured in msg and "Cause:" in msg and "Fix:" in msg and "back on its previous release" in msg, msg
    after = snapshot(served)
    assert after[canary]["state"] == before[canary]["state"]                   # never recorded
    assert after[canary]["unit"] == before[canary]["unit"]                     # its previous release's unit
    assert after[canary]["started"] != before[canary]["started"] and health(s, canary) == 200
    for host in served.hosts[1:]:
        assert after[host] == before[host], host                               # no other host touched
    assert avail.down_hosts <= {canary}, avail.down_hosts


@pytest.mark.parametrize("where", ["middle", "last"])
def test_a_gate_failure_on_the_middle_and_on_the_last_host(served, where):
    s = served.session
    hosts = served.hosts
    bad = hosts[len(hosts) // 2 - 1] if where == "middle" else hosts[-1]
    before = snapshot(served)
    commit_drafter(served, {"hosts": {bad: {"accept_length": 1.0}}}, "drafter bad on " + bad)
    run = served.run_playbook(ROLLOUT, extra=serial_extra())
    assert run.rc != 0
    assert "%s: gate acceptance failed, measured 1.0" % bad in run.out, run.out[-6000:]
    after = snapshot(served)
    assert after[bad]["state"] == before[bad]["state"] and after[bad]["unit"] == before[bad]["unit"]
    assert health(s, bad) == 200
    index = hosts.index(bad)
    batches, start = [], 0
    for size in [1] + [max(1, len(hosts) // 4)] * len(hosts):
        batches.append(hosts[start:start + size])
        start += size
        if start >= len(hosts):
            break
    batch = next(b for b in batches if bad in b)
    for host in hosts:
        if host in batch or hosts.index(host) < index:
            if host != bad:  # earlier hosts and the bad host's batch mates switched and passed
                assert after[host]["state"]["current"] != before[host]["state"]["current"], host
                assert after[host]["state"]["previous"] == before[host]["state"]["current"], host
        else:  # the batches after the failure were never started
            assert after[host] == before[host], host


def test_rollback_of_one_host_returns_it_to_its_previous_release(served, tmp_path):
    s = served.session
    host = served.hosts[0]
    before = snapshot(served)
    proc, seconds = served.rollback(limit=host, json_path=tmp_path / "rollback.json", timeout=600)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-6000:]
    after = snapshot(served)
    old = before[host]["state"]
    assert after[host]["state"] == dict(old, current=old["previous"], previous=old["current"])
    assert after[host]["unit"] == s.release_record(host, old["previous"])["units"][UNIT_PATH]
    assert after[host]["started"] != before[host]["started"] and health(s, host) == 200
    for other in served.hosts[1:]:
        assert after[other] == before[other]
    print("rollback of one host: %.1f s" % seconds)


def test_garbage_collection_keeps_current_and_previous(served):
    if not (REPO / "plugins" / "modules" / "release_gc.py").is_file():
        pytest.skip("ct200.deploy.release_gc (the stage helper's module) is not in this checkout")
    s = served.session
    commit_drafter(served, {"decode_tok_s": 41.0}, "good drafter again")
    run = served.run_playbook(ROLLOUT, extra=serial_extra())
    assert run.rc == 0, run.out[-6000:]
    for host in served.hosts:
        st = s.release_state(host)
        kept = {s.release_record(host, st[k])["drafter"]["dir"] for k in ("current", "previous")}
        snaps = set(sh(s, host, "ls -d /models/%s/snapshots/*/ 2>/dev/null || true" % DRAFTER).split())
        assert {p.rstrip("/") for p in snaps} == kept, (host, snaps, kept)


def server_version(session, host) -> str:
    """The SGLang version HOST's instance reports (/server_info; the stand-in reads it from the installed sglang)."""
    out = sh(session, host, "curl -s --max-time 10 http://127.0.0.1:%d/server_info" % port_of(session, host))
    return json.loads(out).get("version", "")


def test_an_sglang_version_rollout_then_a_fleet_rollback(served, tmp_path):
    """A new SGLang build (the second wheelhouse, 0.5.22) rolled out like any release: its own venv beside the
    serving one, every host switched and gated, the old venv kept; then ``ct200 rollback`` of the whole fleet
    goes back to the old venv with no install."""
    s = served.session
    host0 = served.hosts[0]
    version, wheelhouse, new_venv = (served.fleet.next_sglang[k] for k in ("version", "wheelhouse", "venv"))
    if s.exec(host0, "test -f %s/requirements.txt" % wheelhouse).returncode != 0:
        pytest.skip("the %s wheelhouse is not on the hosts (scripts/sglang-wheelhouse.sh %s could not build it)"
                    % (version, version))
    new = {"ct200_sglang_version": version, "sglang_runtime_wheelhouse": wheelhouse,
           "sglang_runtime_requirements": wheelhouse + "/requirements.txt"}
    before = snapshot(served)
    old_versions = {h: s.release_record(h, before[h]["state"]["current"])["sglang_version"] for h in served.hosts}
    assert len(set(old_versions.values())) == 1 and version not in old_versions.values(), old_versions
    # the hosts share one venv per version (served_fleet): the first host installs it, so eight do not at once
    first = served.fleet.deploy(limit=host0, args=("--tags", "sglang_runtime", "-e", json.dumps(new)))
    assert first.rc == 0, first.out[-6000:]
    assert all(started_at(s, h) == before[h]["started"] for h in served.hosts), "staging restarted nothing"

    with Availability(served) as avail:
        run = served.run_playbook(ROLLOUT, extra=dict(serial_extra(), **new))
    assert run.rc == 0, run.out[-6000:]
    after = snapshot(served)
    for host in served.hosts:
        st = after[host]["state"]
        rec, old = s.release_record(host, st["current"]), s.release_record(host, st["previous"])
        assert st["previous"] == before[host]["state"]["current"], st
        assert rec["sglang_version"] == version and rec["venv"] == new_venv, rec
        assert old["venv"] != new_venv and sh(s, host, "test -x %s/bin/python && echo kept" % old["venv"]).strip() == "kept"
        assert "%s/bin/python" % new_venv in after[host]["unit"]
        assert rec["drafter"]["commit"] == old["drafter"]["commit"] and rec["target"] == old["target"], (rec, old)
        assert health(s, host) == 200 and server_version(s, host) == version
    assert avail.max_down <= max(1, len(served.hosts) // 4), avail.max_down

    proc, seconds = served.rollback(json_path=tmp_path / "rollback.json")
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-6000:]
    back = snapshot(served)
    for host in served.hosts:
        st = back[host]["state"]
        assert st["current"] == before[host]["state"]["current"] and st["previous"] == after[host]["state"]["current"]
        assert back[host]["unit"] == before[host]["unit"], host
        assert health(s, host) == 200 and server_version(s, host) == old_versions[host]
    print("SGLang %s rollout of %d hosts: at most %d down; fleet rollback %.0f s"
          % (version, len(served.hosts), avail.max_down, seconds))
