# SPDX-License-Identifier: Apache-2.0
"""rotate_hf_token.yml over SSH on the 8-host fleet, with failures injected.

Failure on host k (first, middle, last of the inventory): its token directory
made read-only, or its sshd stopped right after the new token landed there.
Every host must end with a whole working token (the old or the new one, never
empty or partial), the run must name host k and fail, and the rollout must stop
(hosts of later batches keep the old token).  No token string in any output.
The per-host report (``ct200_report_json``) must agree with what the hosts hold.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import threading
import time
from pathlib import Path

import pytest

from localhub.personas import token_for

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
ROTATE = REPO / "rotate_hf_token.yml"
VERIFY = REPO / "playbooks" / "verify_access.yml"
TOKEN_DIR = "/root/.cache/huggingface"
TOKEN_FILE = f"{TOKEN_DIR}/token"
OLD, NEW, REFUSED = "granted", "granted_write", "never_requested"
DRAFTER = "z-lab/Kimi-K2.6-DFlash"  # the gated repository REFUSED's user never asked access to
POSITIONS = {"first": 0, "middle": 3, "last": -1}


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def token_file(tmp: Path, persona: str) -> str:
    path = tmp / f"{persona}.token"
    path.write_text(token_for(persona) + "\n")
    path.chmod(0o600)
    return str(path)


@pytest.fixture(scope="module")
def tokens(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("fleet-tokens")
    return {p: token_file(tmp, p) for p in (OLD, NEW, REFUSED)}


def rotation_env(tokens, current=OLD) -> dict:
    """The inventory's current token comes from a file whose path is exported."""
    return {"CT200_HF_TOKEN_FILE": tokens[current]}


def rotation_args(tokens, report: Path, nxt=NEW) -> tuple[str, ...]:
    """The pending token travels as a file path, the report is written as JSON."""
    return ("-e", f"hf_token_new_file={tokens[nxt]}", "-e", f"ct200_report_json={report}")


def fingerprint(persona: str) -> str:
    return "sha256:" + sha(token_for(persona))[:12]


def token_state(fleet) -> dict[str, str]:
    """Per host: 'old', 'new', 'missing' or 'other:<sha>' of the token file's
    exact bytes (a partial or empty file is 'other')."""
    known = {sha(token_for(OLD)): "old", sha(token_for(NEW)): "new",
             sha(token_for(OLD) + "\n"): "old", sha(token_for(NEW) + "\n"): "new"}
    out = {}
    for host in fleet.hosts:
        res = fleet.exec(host, f"test -f {TOKEN_FILE} && sha256sum {TOKEN_FILE} || echo missing")
        digest = res.stdout.split()[0] if res.returncode == 0 else "missing"
        out[host] = known.get(digest, "missing" if digest == "missing" else f"other:{digest[:12]}")
    return out


def reset_to_old(fleet) -> None:
    """Test setup, not the product path: every host holds the old token and no
    backups, whatever an earlier case left behind."""
    for host in fleet.hosts:
        res = fleet.exec(host, f"mkdir -p {TOKEN_DIR}; rm -f {TOKEN_DIR}/token.* {TOKEN_DIR}/.token*; umask 077; "
                               f"cat > {TOKEN_FILE}.reset && mv {TOKEN_FILE}.reset {TOKEN_FILE}",
                         input=token_for(OLD) + "\n")
        assert res.returncode == 0, res.stderr
    assert set(token_state(fleet).values()) == {"old"}


def assert_no_token_in(out: str) -> None:
    for persona in (OLD, NEW, REFUSED):
        assert token_for(persona) not in out, f"token of {persona} leaked into the output"


def read_report(path: Path, fleet) -> tuple[dict, dict[str, dict]]:
    report = json.loads(path.read_text())
    by_host = {h["host"]: h for h in report["hosts"]}
    assert sorted(by_host) == sorted(fleet.hosts), report
    return report, by_host


def assert_report_matches_hosts(by_host: dict, state: dict[str, str]) -> None:
    """Every host holds a whole token (old or new) and the report says which."""
    assert set(state.values()) <= {"old", "new"}, state
    for host, held in state.items():
        assert by_host[host]["new"] == fingerprint(OLD if held == "old" else NEW), (host, by_host[host], held)
        if by_host[host]["status"] == "ok":
            assert held == "new", (host, by_host[host])
        if by_host[host]["status"] == "skipped":
            assert held == "old", (host, by_host[host])


def assert_stopped_at(fleet, out: str, by_host: dict, failed_host: str, statuses: set[str]) -> None:
    """Host k is reported with its failure, named in the final message; hosts
    before it rotated; the rollout stopped after host k's batch."""
    assert by_host[failed_host]["status"] in statuses, by_host[failed_host]
    assert re.search(rf"token rotation stopped: .*\b{re.escape(failed_host)}=({'|'.join(statuses)})\b", out, re.S), \
        out[-3000:]
    k = fleet.hosts.index(failed_host)
    assert all(by_host[h]["status"] == "ok" for h in fleet.hosts[:k]), by_host
    later = [by_host[h]["status"] for h in fleet.hosts[k + 1:]]
    # Host k's batch-mates may finish; every host of a later batch is skipped.
    if later:
        assert later[-1] == "skipped" and set(later) <= {"ok", "skipped"}, by_host
    recap = re.search(rf"^{re.escape(failed_host)}\s+:.*$", out, re.M)
    assert recap, out[-2000:]


@pytest.fixture(scope="module")
def fleet_with_old_token(ssh_fleet, tokens):
    """Every host gets the old token the production way once (verify_access)."""
    run = ssh_fleet.run_playbook(VERIFY, env=rotation_env(tokens))
    assert run.rc == 0, run.out[-4000:]
    assert_no_token_in(run.out)
    assert set(token_state(ssh_fleet).values()) == {"old"}
    return ssh_fleet


def test_clean_rotation_reaches_every_host(fleet_with_old_token, tokens, tmp_path):
    fleet = fleet_with_old_token
    reset_to_old(fleet)
    report = tmp_path / "report.json"
    run = fleet.run_playbook(ROTATE, env=rotation_env(tokens), args=rotation_args(tokens, report))
    assert run.rc == 0, run.out[-4000:]
    assert_no_token_in(run.out + report.read_text())
    state = token_state(fleet)
    assert set(state.values()) == {"new"}
    summary, by_host = read_report(report, fleet)
    assert summary["result"] == "ok" and {h["status"] for h in by_host.values()} == {"ok"}
    assert all(h["old"] == fingerprint(OLD) for h in by_host.values())
    assert_report_matches_hosts(by_host, state)
    print(f"\nclean rotation of {len(fleet.hosts)} hosts over SSH: {run.seconds:.1f}s")


def test_a_refused_new_token_changes_no_host(fleet_with_old_token, tokens, tmp_path):
    fleet = fleet_with_old_token
    reset_to_old(fleet)
    report = tmp_path / "report.json"
    run = fleet.run_playbook(ROTATE, env=rotation_env(tokens), args=rotation_args(tokens, report, nxt=REFUSED))
    assert run.rc != 0 and "new token refused, no host was changed" in run.out, run.out[-3000:]
    assert DRAFTER in run.out, "the refusal names the repository the new token cannot read"
    assert_no_token_in(run.out + report.read_text())
    state = token_state(fleet)
    assert set(state.values()) == {"old"}
    _summary, by_host = read_report(report, fleet)
    assert {h["status"] for h in by_host.values()} == {"skipped"}
    assert_report_matches_hosts(by_host, state)


@pytest.mark.parametrize("position", list(POSITIONS))
def test_read_only_token_dir_on_host_k_stops_the_rollout(fleet_with_old_token, tokens, position, tmp_path):
    fleet = fleet_with_old_token
    reset_to_old(fleet)
    failed_host = fleet.hosts[POSITIONS[position]]
    report = tmp_path / "report.json"
    ro = fleet.exec(failed_host, f"mount --bind {TOKEN_DIR} {TOKEN_DIR} && mount -o remount,bind,ro {TOKEN_DIR}")
    assert ro.returncode == 0, ro.stderr
    try:
        run = fleet.run_playbook(ROTATE, env=rotation_env(tokens), args=rotation_args(tokens, report))
    finally:
        umount = fleet.exec(failed_host, f"umount {TOKEN_DIR}")
    assert umount.returncode == 0, umount.stderr
    assert run.rc != 0, run.out[-4000:]
    assert_no_token_in(run.out + report.read_text())
    state = token_state(fleet)
    assert state[failed_host] == "old", state
    _summary, by_host = read_report(report, fleet)
    assert_report_matches_hosts(by_host, state)
    assert_stopped_at(fleet, run.out, by_host, failed_host, {"failed", "restored"})
    if by_host[failed_host]["status"] == "failed":
        assert "Read-only file system" in by_host[failed_host]["message"], by_host[failed_host]
    print(f"\nread-only token dir on {failed_host} ({position}): {run.seconds:.1f}s")


def stop_sshd_when_token_changes(fleet, host: str, proc, timeout: float = 600) -> dict:
    """Watch HOST's token file (through its init's root) and stop its sshd as
    soon as the new file has been renamed into place: the worst moment, the
    host then holds the new token and can neither verify nor roll back."""
    path = f"/proc/{fleet.leader_pid(host)}/root{TOKEN_FILE}"
    before = os.stat(path).st_ino
    outcome = {"stopped": False}

    def watch():
        deadline = time.monotonic() + timeout
        while proc.poll() is None and time.monotonic() < deadline:
            try:
                changed = os.stat(path).st_ino != before
            except FileNotFoundError:
                changed = False
            if changed:
                fleet.stop_sshd(host)
                outcome["stopped"] = True
                return
            time.sleep(0.02)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    outcome["thread"] = thread
    return outcome


def test_sshd_stopped_mid_run_on_host_k_stops_the_rollout(fleet_with_old_token, tokens, tmp_path):
    fleet = fleet_with_old_token
    reset_to_old(fleet)
    failed_host = fleet.hosts[POSITIONS["middle"]]
    report = tmp_path / "report.json"
    started = time.monotonic()
    proc = fleet.popen_playbook(ROTATE, env=rotation_env(tokens), args=rotation_args(tokens, report))
    watcher = {}
    try:
        watcher = stop_sshd_when_token_changes(fleet, failed_host, proc)
        out, _unused = proc.communicate(timeout=900)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
        if "thread" in watcher:
            watcher["thread"].join(timeout=30)
        fleet.start_sshd(failed_host)
    seconds = time.monotonic() - started
    assert watcher["stopped"], "the new token never reached the host: nothing was injected"
    assert proc.returncode != 0, out[-4000:]
    assert_no_token_in(out + report.read_text())
    state = token_state(fleet)
    # Its sshd died after the rename: the new file is whole; nothing could restore the old one.
    assert state[failed_host] == "new", state
    _summary, by_host = read_report(report, fleet)
    assert_stopped_at(fleet, out, by_host, failed_host, {"unreachable"})
    # The report cannot know what an unreachable host holds: it says so instead.
    assert "the old or the new one" in by_host[failed_host]["message"], by_host[failed_host]
    assert_report_matches_hosts({h: r for h, r in by_host.items() if h != failed_host},
                                {h: v for h, v in state.items() if h != failed_host})
    print(f"\nsshd stopped mid-run on {failed_host}: {seconds:.1f}s")
