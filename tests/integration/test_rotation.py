# SPDX-License-Identifier: Apache-2.0
"""Token as one source of truth on the session's 3-host sandbox fleet (token_fleet, issue 9 items 1-3).

One fleet walks the life of a token: install; no-op verify_access runs whose Hub calls do not
depend on the fleet size; a rotation whose test fails on the last host (restored, what it added
removed); a clean rotation in its batches, then in check mode; promotion (with its 0600 backup);
the deploy after it (new token kept); a token changed by hand (drift check names that host; force
puts the inventory's token back). After every step each host holds a whole, working token, and no
token string appears in any output.

The SSH fleet proves the other steps of the life on 8 hosts (tests/fleet): a refused new token
changes no host (test_fleet_rotation.py, test_a_refused_new_token_changes_no_host), a read-only
token directory on the first, middle or last host stops the rollout with that host's old token
intact (test_read_only_token_dir_on_host_k_stops_the_rollout), and the deploy before promotion
reports drift on every host and rewrites nothing (test_fleet_cli.py,
test_deploy_before_promotion_reports_drift_per_host_and_changes_nothing).
"""

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from localhub.personas import token_for

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]
SANDBOX = str(REPO / "tests" / "support" / "sandbox" / "sandbox.sh")
HOSTS = ("token-1", "token-2", "token-3")
TOKEN_PATH = "/root/.cache/huggingface/token"
PERSONAS = ("granted", "granted_write", "granted_fine_grained", "never_requested")


def fp(persona):
    return "sha256:" + hashlib.sha256(token_for(persona).encode()).hexdigest()[:12]


class Fleet:
    """ansible-playbook against the fleet, the current token in a controller file (the inventory's source
    of truth, as the sandbox inventory reads it), pending tokens in files passed by path."""

    def __init__(self, state, hub, tmp_path):
        self.state, self.hub, self.tmp = state, hub, tmp_path
        self.current_file = self.token_file("current", "granted")
        self.outputs = []

    def token_file(self, name, persona):
        p = self.tmp / ("token-" + name)
        p.write_text(token_for(persona) + "\n")
        p.chmod(0o600)
        return p

    def play(self, name, *extra, inventories=()):
        env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), CT200_SANDBOX_STATE=str(self.state),
                   CT200_HF_ENDPOINT=self.hub.url, ANSIBLE_NOCOLOR="1", CT200_HF_TOKEN_FILE=str(self.current_file))
        env.pop("CT200_HF_TOKEN_NEXT_FILE", None)
        env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env["PATH"]
        inv = ["-i", "inventories/sandbox"] + [a for i in inventories for a in ("-i", str(i))]
        proc = subprocess.run(["ansible-playbook", name, *inv, *extra], cwd=REPO, env=env, capture_output=True,
                              text=True, timeout=900, check=False)
        out = proc.stdout + proc.stderr
        self.outputs.append(out)
        return proc.returncode, out

    def rotate(self, persona, *extra, **kw):
        report = self.tmp / ("report-%d.json" % len(self.outputs))
        rc, out = self.play("rotate_hf_token.yml", "-e", "hf_token_new_file=%s" % self.token_file("new", persona),
                            "-e", "ct200_report_json=%s" % report, *extra, **kw)
        return rc, out, (json.loads(report.read_text()) if report.exists() else None)

    def exec(self, host, *argv):
        return subprocess.run([SANDBOX, "exec", "--state", str(self.state), host, "--", *argv],
                              capture_output=True, text=True, timeout=60, check=False)

    def host_tokens(self):
        """host -> fingerprint of its whole token file, checked to be one persona's token (never empty/partial)."""
        known = {token_for(p) + "\n": fp(p) for p in PERSONAS}
        out = {}
        for host in HOSTS:
            r = self.exec(host, "cat", TOKEN_PATH)
            assert r.returncode == 0 and r.stdout in known, "%s: token file missing, empty or partial" % host
            out[host] = known[r.stdout]
        return out


def recap(out):
    return {line.split()[0]: line for line in out.splitlines() if line.startswith(HOSTS)}


def statuses(report):
    return {h["host"]: (h["status"], h["old"], h["new"]) for h in report["hosts"]}


def test_token_lifecycle_on_the_fleet(token_fleet, local_hub, tmp_path):
    f = Fleet(token_fleet, local_hub, tmp_path)
    granted, write, fine = fp("granted"), fp("granted_write"), fp("granted_fine_grained")

    # Install (force: the fleet is shared, another test may have left another token), then no-op runs:
    # the Hub sees the same calls for 3 hosts as for 1 (access is checked once, on the controller).
    rc, out = f.play("playbooks/verify_access.yml", "-e", "hf_token_force=true")
    assert rc == 0, out[-3000:]
    assert f.host_tokens() == dict.fromkeys(HOSTS, granted)
    calls = {}
    for label, limit in (("3", ()), ("1", ("--limit", "token-1"))):
        local_hub.reset_stats()
        rc, out = f.play("playbooks/verify_access.yml", *limit)
        assert rc == 0, out[-3000:]
        assert all("changed=0" in line for line in recap(out).values()), recap(out)
        calls[label] = local_hub.stats()["api"]
    assert calls["3"] == calls["1"] > 0, calls

    # The last host's test fails (the token lands where its download user does not read it):
    # restored, and the hosts before it keep the new token.
    misplaced = tmp_path / "misplaced.yml"
    misplaced.write_text("ct200:\n  hosts:\n    token-3:\n      rotate_token_path: /root/elsewhere/token\n")
    rc, out, report = f.rotate("granted_write", inventories=[misplaced])
    assert rc != 0 and "token-3=restored" in out
    assert statuses(report) == {"token-1": ("ok", granted, write), "token-2": ("ok", granted, write),
                                "token-3": ("restored", None, None)}
    assert f.exec("token-3", "test", "-e", "/root/elsewhere/token").returncode != 0, "restore removes what it added"
    assert f.host_tokens() == {"token-1": write, "token-2": write, "token-3": granted}

    # Clean rotation: canary first, then one host per batch; re-running changes nothing.
    rc, out, report = f.rotate("granted_write")
    assert rc == 0, out[-3000:]
    assert [s for s, _o, _n in statuses(report).values()] == ["ok"] * 3
    plays = out.split("PLAY [Set and test | roll the new token out, canary first]")
    assert len(plays) == 4, "three batches expected (serial [1, 25%] over 3 hosts)"
    assert "token-1" in plays[1].split("PLAY RECAP")[0] and "token-2" not in plays[1].split("PLAY [")[0]
    assert f.host_tokens() == dict.fromkeys(HOSTS, write)
    rc, out, report = f.rotate("granted_write", "--check")
    assert rc == 0, out[-3000:]
    assert all("changed=0" in line for line in recap(out).values()), recap(out)

    # Promotion: the pending token becomes the inventory's current one; deploys keep it.
    rc, out = f.play("playbooks/promote_hf_token.yml", "-e", "hf_token_new_file=%s" % (tmp_path / "token-new"),
                     "-e", "ct200_hf_token_file=%s" % f.current_file)
    assert rc == 0, out[-3000:]
    assert f.current_file.read_text().strip() == token_for("granted_write")
    backups = [p for p in os.listdir(tmp_path) if p.startswith("token-current.") and p.endswith(".bak")]
    assert len(backups) == 1 and (tmp_path / backups[0]).read_text().strip() == token_for("granted")
    assert oct((tmp_path / backups[0]).stat().st_mode & 0o777) == "0o600"
    rc, out = f.play("playbooks/verify_access.yml")
    assert rc == 0, out[-3000:]
    assert all("changed=0" in line for line in recap(out).values()), recap(out)
    assert f.host_tokens() == dict.fromkeys(HOSTS, write)

    # A token changed by hand on one host: the drift check names that host only and changes nothing;
    # the deploy refuses to overwrite it, force puts the inventory's token back.
    by_hand = "printf '%%s\\n' '%s' > %s" % (token_for("granted_fine_grained"), TOKEN_PATH)
    assert f.exec("token-3", "sh", "-c", by_hand).returncode == 0
    drift_json = tmp_path / "drift.json"
    rc, out = f.play("playbooks/token_drift.yml", "-e", "ct200_report_json=%s" % drift_json)
    drift = json.loads(drift_json.read_text())
    assert rc != 0 and drift["hosts_off"] == ["token-3"] and drift["expected_fingerprint"] == write
    drift_statuses = {h["host"]: h["status"] for h in drift["hosts"]}
    assert drift_statuses == {"token-1": "in_sync", "token-2": "in_sync", "token-3": "drift"}
    assert f.host_tokens()["token-3"] == fine
    rc, out = f.play("playbooks/verify_access.yml")
    assert rc != 0 and "token-3" in out and fine in out and f.host_tokens()["token-3"] == fine
    rc, out = f.play("playbooks/verify_access.yml", "-e", "hf_token_force=true")
    assert rc == 0, out[-3000:]
    assert f.host_tokens() == dict.fromkeys(HOSTS, write)

    for out in f.outputs:
        for persona in PERSONAS:
            assert token_for(persona) not in out, "token in playbook output"
