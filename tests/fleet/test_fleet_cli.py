# SPDX-License-Identifier: Apache-2.0
"""The `ct200` command on the 8-host SSH fleet (issue 9): rotation, drift, promotion, deploy.

In order, on the shared ``ssh_fleet`` (every host holding the inventory's current token first):

1. ``ct200 rotate-token --token-stdin -vvv`` rotates every host over SSH; neither the old nor the
   new token, raw or encoded, is in any file of ansible-runner's private data dir, the command's
   stdout/stderr or its JSON summary; every host holds the new token's fingerprint.
2. ``ct200 deploy --tags hf_token`` (the real deploy_kimi.yml, preflight included) before
   promotion: every host is reported with drift (both fingerprints, the promotion named) and no
   token file is touched.
3. ``ct200 promote-token``, then the same deploy: every host keeps the new token, no drift,
   nothing changed.

The hosts are put back on the old token at the end, as test_fleet_rotation.py expects them.
"""
from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
import subprocess
import sys
import urllib.parse
from pathlib import Path

import pytest

from localhub.personas import token_for
from modhelper import shm_secrets, shm_secrets_left

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
VERIFY = REPO / "playbooks" / "verify_access.yml"
TOKEN_DIR = "/root/.cache/huggingface"
TOKEN_FILE = f"{TOKEN_DIR}/token"
OLD, NEW = "granted", "granted_write"


def fingerprint(persona: str) -> str:
    return "sha256:" + hashlib.sha256(token_for(persona).encode()).hexdigest()[:12]


def secret_file(directory: Path, name: str, persona: str) -> Path:
    path = directory / name
    path.write_text(token_for(persona) + "\n")
    path.chmod(0o600)
    return path


def leak_forms(token: str) -> set[bytes]:
    """The token as it could sit in a file: raw, URL-encoded, hex, and base64 (standard and
    URL-safe) at each of the three alignments, trimmed to the part that does not depend on
    the bytes around it."""
    raw = token.encode()
    forms = {raw, urllib.parse.quote(token).encode(), urllib.parse.quote_plus(token).encode(), binascii.hexlify(raw)}
    for shift in range(3):
        for encode in (base64.b64encode, base64.urlsafe_b64encode):
            forms.add(encode(b"\0" * shift + raw + b"\n")[4 if shift else 0:-4])
    return forms


def leaks(blobs: dict[str, bytes]) -> list[str]:
    """Names of the blobs holding either token in any form."""
    forms = leak_forms(token_for(OLD)) | leak_forms(token_for(NEW))
    return sorted(name for name, data in blobs.items() if any(form in data for form in forms))


def tree(root: Path) -> dict[str, bytes]:
    return {str(path.relative_to(root)): path.read_bytes() for path in root.rglob("*") if path.is_file()}


def host_tokens(fleet) -> dict[str, tuple[str | None, str]]:
    """Per host: (fingerprint of the token file, its inode) read through the host's init, not SSH."""
    out = {}
    for host in fleet.hosts:
        res = fleet.exec(host, f"stat -c %i {TOKEN_FILE} && cat {TOKEN_FILE}")
        lines = res.stdout.splitlines() if res.returncode == 0 else []
        token = lines[1].strip() if len(lines) > 1 else ""
        out[host] = ("sha256:" + hashlib.sha256(token.encode()).hexdigest()[:12] if token else None,
                     lines[0] if lines else "")
    return out


def fingerprints(fleet) -> dict[str, str | None]:
    return {host: fp for host, (fp, _inode) in host_tokens(fleet).items()}


def backups(fleet) -> dict[str, str]:
    return {h: fleet.exec(h, f"ls -A {TOKEN_DIR} | grep -v '^token$' || true").stdout.strip() for h in fleet.hosts}


def reset_to_old(fleet) -> None:
    """Test cleanup, not the product path: the old token, no backups."""
    for host in fleet.hosts:
        res = fleet.exec(host, f"mkdir -p {TOKEN_DIR}; rm -rf {TOKEN_DIR}/token.* {TOKEN_DIR}/.token* "
                               f"; umask 077; cat > {TOKEN_FILE}.reset && "
                               f"mv {TOKEN_FILE}.reset {TOKEN_FILE}", input=token_for(OLD) + "\n")
        assert res.returncode == 0, res.stderr


class Cli:
    """`ct200` (python -m ct200_fleet) against the SSH fleet's inventory; the inventory's
    current token is the file ``current`` (CT200_HF_TOKEN_FILE), as an operator's would be."""

    def __init__(self, fleet, workdir: Path):
        self.fleet, self.workdir = fleet, workdir
        self.current = secret_file(workdir, "current-token", OLD)
        # PWD: where a playbook would drop a report nobody asked for (the preflight's default)
        env = fleet.fleet.env(fleet.env({"CT200_HF_TOKEN_FILE": str(self.current), "PWD": str(workdir)}))
        self.env = {k: v for k, v in env.items() if k not in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_API_TOKEN")}

    def __call__(self, *argv: str, stdin: str | None = None) -> tuple[int, str, str, dict]:
        summary = self.workdir / "summary.json"
        summary.unlink(missing_ok=True)
        proc = subprocess.run([sys.executable, "-m", "ct200_fleet", *argv, "-i", str(REPO / "inventories" / "sandbox"),
                               "--json", str(summary)],
                              cwd=REPO, env=self.env, input=stdin, capture_output=True, text=True, timeout=1200,
                              check=False)
        data = json.loads(summary.read_text()) if summary.exists() else {}
        blobs = {"stdout": proc.stdout.encode(), "stderr": proc.stderr.encode(),
                 "summary": summary.read_bytes() if summary.exists() else b""}
        assert leaks(blobs) == [], "a token in ct200's output or JSON summary"
        return proc.returncode, proc.stdout, proc.stderr, data


@pytest.fixture(scope="module")
def cli(ssh_fleet, tmp_path_factory):
    """Every host holds the old token, installed the production way; put back at the end."""
    ct200 = Cli(ssh_fleet, tmp_path_factory.mktemp("fleet-cli"))
    try:
        reset_to_old(ssh_fleet)
        run = ssh_fleet.run_playbook(VERIFY, env={"CT200_HF_TOKEN_FILE": str(ct200.current)})
        assert run.rc == 0, run.out[-4000:]
        assert set(fingerprints(ssh_fleet).values()) == {fingerprint(OLD)}
        yield ct200
    finally:
        reset_to_old(ssh_fleet)


@pytest.fixture(scope="module")
def rotated(cli, tmp_path_factory):
    """`ct200 rotate-token` over SSH, the new token on standard input, at -vvv, artifacts kept."""
    pdd = tmp_path_factory.mktemp("fleet-cli-runner") / "pdd"
    shm_before = shm_secrets()
    code, out, err, summary = cli("rotate-token", "--token-stdin", "-vvv", "--private-data-dir", str(pdd),
                                  stdin=token_for(NEW) + "\n")
    return {"code": code, "out": out, "err": err, "summary": summary, "pdd": pdd, "shm_before": shm_before}


def test_rotate_token_over_ssh_leaves_no_secret_and_every_host_rotated(cli, rotated):
    fleet, pdd, summary = cli.fleet, rotated["pdd"], rotated["summary"]
    assert rotated["code"] == 0, (rotated["out"] + rotated["err"])[-5000:]
    assert fingerprints(fleet) == dict.fromkeys(fleet.hosts, fingerprint(NEW))
    assert {h["host"]: h["status"] for h in summary["hosts"]} == dict.fromkeys(fleet.hosts, "ok")
    assert {h["fingerprint"] for h in summary["hosts"]} == {"%s -> %s" % (fingerprint(OLD), fingerprint(NEW))}
    assert summary["report"]["pending_fingerprint"] == fingerprint(NEW)

    # What is grepped is really there: the command line, every event, -vvv output of SSH connections.
    artifacts = list((pdd / "artifacts").iterdir())
    assert len(artifacts) == 1, artifacts
    artifact = artifacts[0]
    assert (artifact / "command").is_file() and len(list((artifact / "job_events").iterdir())) > 8 * 5
    stdout = (artifact / "stdout").read_text()
    assert all(f"<{fleet.addresses[h]}> ESTABLISH SSH CONNECTION FOR USER: root" in stdout for h in fleet.hosts)
    command = json.loads((artifact / "command").read_text())
    token_path = json.loads(command["command"][command["command"].index("-e") + 1])["hf_token_new_file"]
    assert os.path.commonpath([token_path, str(pdd)]) != str(pdd), "the token file lives outside the pdd"

    assert not (pdd / "env").exists(), "suppress_env_files: no env/envvars, env/extravars, env/cmdline"
    assert leaks(tree(pdd)) == [], "a token in ansible-runner's private data dir"
    assert not os.path.exists(os.path.dirname(token_path)), "the temporary token file is removed"
    assert shm_secrets_left(rotated["shm_before"]) == [], "a temporary token directory is left in /dev/shm"


def test_deploy_before_promotion_reports_drift_per_host_and_changes_nothing(cli, rotated):
    fleet = cli.fleet
    before = host_tokens(fleet)
    assert {fp for fp, _inode in before.values()} == {fingerprint(NEW)}, "needs the rotation above"
    backups_before = backups(fleet)
    code, out, err, summary = cli("deploy", "--tags", "hf_token")
    assert code == 1, (out + err)[-5000:]
    rows = {h["host"]: h for h in summary["hosts"]}
    assert sorted(rows) == sorted(fleet.hosts)
    for host, row in rows.items():
        assert row["status"] == "failed", row
        assert "token drift on this host" in row["message"], row
        assert fingerprint(NEW) in row["message"] and fingerprint(OLD) in row["message"], row
        assert "promote_hf_token.yml" in row["message"], row
    assert summary["failed_hosts"] == sorted(fleet.hosts)
    assert host_tokens(fleet) == before, "a token file was rewritten"
    assert backups(fleet) == backups_before


def test_deploy_after_promotion_keeps_the_new_token_everywhere(cli, rotated):
    fleet = cli.fleet
    before = host_tokens(fleet)
    assert {fp for fp, _inode in before.values()} == {fingerprint(NEW)}, "needs the rotation above"
    code, out, err, summary = cli("promote-token", "--token-stdin", "--current-token-file", str(cli.current),
                                  stdin=token_for(NEW) + "\n")
    assert code == 0, (out + err)[-5000:]
    assert summary["promotion"]["ok"] and summary["promotion"]["method"] == "promote_hf_token.yml"
    assert cli.current.read_text().strip() == token_for(NEW), "the inventory's current token is the new one"

    code, out, err, summary = cli("deploy", "--tags", "hf_token")
    assert code == 0, (out + err)[-5000:]
    assert "drift" not in out
    rows = {h["host"]: h for h in summary["hosts"]}
    assert {h: r["status"] for h, r in rows.items()} == dict.fromkeys(fleet.hosts, "ok")
    assert host_tokens(fleet) == before, "every host keeps its token file as the rotation left it"
    assert not (cli.workdir / "ct200-preflight.json").exists(), "the preflight report belongs in the pdd"

    # The fleet-wide drift check agrees, without the Hub.
    code, out, err, summary = cli("drift")
    assert code == 0, (out + err)[-5000:]
    assert {h["host"]: h["status"] for h in summary["hosts"]} == dict.fromkeys(fleet.hosts, "in_sync")
