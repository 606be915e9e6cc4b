# SPDX-License-Identifier: Apache-2.0
"""`ct200` through ansible-runner on localhost hosts: exit codes, per-host progress, summary table, JSON.

The hosts are aliases of this machine (connection local) plus one host that cannot be
reached; the playbook is the real `status` play or the test-only stand-in in playbooks/.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
STANDIN = Path(__file__).resolve().parent / "playbooks" / "standin_fleet.yml"
LOCAL = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable,
         "ct200_download_user": "nobody"}
GHOST = {"ansible_connection": "ssh", "ansible_host": "127.0.0.1", "ansible_port": 9,
         "ansible_ssh_common_args": "-o ConnectTimeout=5 -o BatchMode=yes"}


def inventory(tmp_path, hosts, **group_vars):
    path = tmp_path / "hosts.yml"
    path.write_text(yaml.safe_dump({"ct200": {"hosts": hosts, "vars": group_vars}}))
    return str(path)


def ct200(*argv, env=None):
    run_env = {k: v for k, v in os.environ.items() if k not in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")}
    run_env.update(PYTHONPATH=str(REPO), **(env or {}))
    proc = subprocess.run([sys.executable, "-m", "ct200_fleet", *argv], cwd=REPO, env=run_env,
                          capture_output=True, text=True, timeout=600, check=False)
    return proc.returncode, proc.stdout, proc.stderr


def table_rows(stdout):
    lines = stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("HOST "))
    rows = {}
    for line in lines[start + 1:]:
        if not line.strip() or line.startswith(("runner private", "FAILED", "not promoted", "promoted")):
            break
        cells = line.split()
        rows[cells[0]] = cells
    return rows


def test_all_hosts_ok_exits_zero_with_progress_table_and_json(tmp_path):
    inv = inventory(tmp_path, {"cli-a": LOCAL, "cli-b": LOCAL})
    summary = tmp_path / "summary.json"
    code, out, err = ct200("status", "-i", inv, "--json", str(summary), "--forks", "2")
    assert code == 0, out + err
    assert "cli-a: Status | fingerprint of the download user's token file -> ok" in out
    rows = table_rows(out)
    assert set(rows) == {"cli-a", "cli-b"} and all(r[1] == "ok" for r in rows.values()), out
    data = json.loads(summary.read_text())
    assert data["command"] == "status" and data["ok"] is True and data["rc"] == 0 and data["failed_hosts"] == []
    hosts = {h["host"]: h for h in data["hosts"]}
    assert set(hosts) == {"cli-a", "cli-b"}
    assert all(h["status"] == "ok" and h["changed"] == 0 and h["fingerprint"] == "none" for h in hosts.values())
    assert all(isinstance(h["units"], dict) for h in hosts.values())
    assert data["private_data_dir"] is None, "the temporary private data dir is removed unless asked"


def test_a_failing_host_exits_non_zero_and_is_named(tmp_path):
    inv = inventory(tmp_path, {"cli-a": LOCAL, "cli-b": LOCAL, "cli-c": LOCAL}, ct200_test_fail_host="cli-b")
    summary = tmp_path / "summary.json"
    code, out, err = ct200("preflight", "-i", inv, "--playbook", str(STANDIN), "--json", str(summary))
    assert code == 1, out + err
    assert "cli-b: Stand-in | injected failure -> failed: injected failure on cli-b" in out
    assert "cli-a: Stand-in | a change on every host -> changed" in out
    rows = table_rows(out)
    assert rows["cli-b"][1] == "failed" and rows["cli-a"][1] == "ok" and rows["cli-c"][1] == "ok"
    assert "injected" not in rows["cli-a"] and "Stand-in" in " ".join(rows["cli-b"])
    assert "FAILED: cli-b" in out
    data = json.loads(summary.read_text())
    assert data["ok"] is False and data["failed_hosts"] == ["cli-b"]
    hosts = {h["host"]: h for h in data["hosts"]}
    assert hosts["cli-b"]["failed_task"] == "Stand-in | injected failure"
    assert hosts["cli-b"]["message"] == "injected failure on cli-b"
    assert hosts["cli-c"]["changed"] == 1 and hosts["cli-a"]["fingerprint"].startswith("sha256:")
    # the report the playbook wrote (ct200_preflight_json) is merged per host
    assert data["report"]["hosts"][0]["check"] == "done"
    assert hosts["cli-c"]["report"] == {"host": "cli-c", "check": "done"}


def test_an_unreachable_host_exits_non_zero(tmp_path):
    inv = inventory(tmp_path, {"cli-a": LOCAL, "cli-ghost": GHOST})
    summary = tmp_path / "summary.json"
    code, out, err = ct200("status", "-i", inv, "--json", str(summary))
    assert code == 1, out + err
    assert "cli-ghost: Status | SGLang units -> unreachable" in out
    assert table_rows(out)["cli-ghost"][1] == "unreachable"
    data = json.loads(summary.read_text())
    assert data["failed_hosts"] == ["cli-ghost"]
    assert {h["host"]: h["status"] for h in data["hosts"]} == {"cli-a": "ok", "cli-ghost": "unreachable"}


def test_limit_and_hosts_never_reached(tmp_path):
    inv = inventory(tmp_path, {"cli-a": LOCAL, "cli-b": LOCAL, "cli-c": LOCAL})
    summary = tmp_path / "summary.json"
    code, out, err = ct200("status", "-i", inv, "--limit", "cli-a,cli-c", "--json", str(summary))
    assert code == 0, out + err
    assert {h["host"] for h in json.loads(summary.read_text())["hosts"]} == {"cli-a", "cli-c"}
    assert "cli-b" not in out


def test_no_matching_host_is_a_failure(tmp_path):
    inv = inventory(tmp_path, {"cli-a": LOCAL})
    code, out, err = ct200("status", "-i", inv, "--limit", "nothing-matches")
    assert code == 1, out + err
    assert "FAILED: ansible-playbook exited 1" in out and "no hosts to target" in out


def test_private_data_dir_is_kept_when_given(tmp_path):
    inv = inventory(tmp_path, {"cli-a": LOCAL})
    pdd = tmp_path / "pdd"
    code, out, err = ct200("status", "-i", inv, "--private-data-dir", str(pdd))
    assert code == 0, out + err
    artifacts = list((pdd / "artifacts").iterdir())
    assert len(artifacts) == 1 and "runner private data dir: %s" % pdd in out
    assert not (pdd / "env").exists(), "suppress_env_files: runner writes no env/ files"
    command = json.loads((artifacts[0] / "command").read_text())
    argv = command["command"]
    assert argv[0] == "ansible-playbook"
    # status passes only a controller path as an extra var (its report file): no value
    extra = json.loads(argv[argv.index("-e") + 1]) if "-e" in argv else {}
    assert set(extra) <= {"ct200_status_json"}, extra
    assert all(os.path.isabs(v) for v in extra.values()), extra


@pytest.mark.parametrize("forks", ["1", "3"])
def test_forks_reach_ansible(tmp_path, forks):
    inv = inventory(tmp_path, {"cli-a": LOCAL})
    pdd = tmp_path / "pdd"
    code, out, err = ct200("status", "-i", inv, "--forks", forks, "--private-data-dir", str(pdd))
    assert code == 0, out + err
    command = json.loads(next((pdd / "artifacts").iterdir()).joinpath("command").read_text())["command"]
    assert command[command.index("--forks") + 1] == forks


def test_status_fingerprint_is_the_collections_one(tmp_path):
    """`ct200 status` reads the fingerprint through hf_token state=query (it hashed the file with its
    own inline Python before): the same value as hf_auth.fingerprint, surrounding whitespace ignored."""
    from ansible_collections.ct200.deploy.plugins.module_utils.hf_auth import fingerprint
    from localhub.personas import token_for

    token_path = tmp_path / "token"
    token_path.write_text("  %s\n" % token_for("granted"))
    token_path.chmod(0o600)
    inv = inventory(tmp_path, {"cli-a": dict(LOCAL, rotate_token_path=str(token_path)), "cli-b": LOCAL})
    summary = tmp_path / "summary.json"
    code, out, err = ct200("status", "-i", inv, "--json", str(summary))
    assert code == 0, out + err
    hosts = {h["host"]: h for h in json.loads(summary.read_text())["hosts"]}
    assert hosts["cli-a"]["fingerprint"] == fingerprint(token_for("granted"))
    assert hosts["cli-b"]["fingerprint"] == "none"
    assert token_for("granted") not in out + err
