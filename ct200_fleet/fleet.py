# SPDX-License-Identifier: Apache-2.0
"""Runner glue: one playbook run through ansible-runner's Python API, without secrets in its files.

What ansible-runner records, and why each is safe here (ansible_runner 2.4 source):

* ``env/envvars``, ``env/extravars``, ``env/cmdline``...: written by ``dump_artifacts`` unless
  ``suppress_env_files=True``, which is always passed.
* ``artifacts/<id>/command``: the ansible-playbook argv (extra vars included) *and the whole
  environment* of this process. Extra vars carry only file paths; the CLI refuses to start
  while a token is in the environment (secret.refuse_token_in_environment).
* ``artifacts/<id>/job_events/*.json`` and ``stdout``: what the callback sees; tasks that
  touch the token are ``no_log`` and task arguments are not displayed
  (``ANSIBLE_DISPLAY_ARGS_TO_STDOUT=False``).
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys

import ansible_runner

from ct200_fleet import COLLECTION
from ct200_fleet.progress import FleetProgress, HostSummary

# Every ct200 playbook targets this group.
HOST_PATTERN = "ct200"
# Host verdicts (Ansible's, and those of the rotation, drift and preflight reports) that are
# not a failure; anything else (failed, unreachable, restored, drift, missing, refused...) is.
GOOD_STATUSES = frozenset({"ok", "in_sync", "would_rotate"})
NEUTRAL_STATUSES = frozenset({"skipped", "not run"})


@dataclasses.dataclass
class RunOutcome:
    rc: int
    runner_status: str
    hosts: list[HostSummary]
    report: dict | None
    artifact_dir: str
    stdout_tail: list[str] = dataclasses.field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.rc == 0 and self.runner_status == "successful" and not self.failed_hosts and any(
            h.status in GOOD_STATUSES for h in self.hosts)  # a run that matched no host did nothing

    @property
    def failed_hosts(self) -> list[str]:
        return [h.host for h in self.hosts if h.status not in GOOD_STATUSES | NEUTRAL_STATUSES]


def runner_envvars() -> dict:
    """Only settings, never secrets: these end up in artifacts/<id>/command with the rest of os.environ."""
    bindir = os.path.dirname(sys.executable)
    env = {
        "ANSIBLE_DISPLAY_ARGS_TO_STDOUT": "False",
        "ANSIBLE_NOCOLOR": "1",
        # ansible-playbook from the same venv as this command, activated or not
        "PATH": bindir + os.pathsep + os.environ.get("PATH", ""),
    }
    if COLLECTION.checkout:
        env["ANSIBLE_CONFIG"] = str(COLLECTION.config)
    else:
        # the copy this command found first, whatever the operator's configuration lists after it
        search = [str(COLLECTION.collections_dir)] + [
            p for p in os.environ.get("ANSIBLE_COLLECTIONS_PATH", "").split(os.pathsep) if p]
        env["ANSIBLE_COLLECTIONS_PATH"] = os.pathsep.join(dict.fromkeys(search))
    return env


def project_dir() -> str:
    """ansible-playbook's working directory: the checkout (its ansible.cfg and relative paths), or,
    installed, the operator's own directory, as for an ansible-playbook typed there."""
    return str(COLLECTION.root) if COLLECTION.checkout else os.getcwd()


def inventory_hosts(inventory: str, limit: str | None) -> list[str]:
    """Hosts the playbook is meant for, so hosts a stopped rollout never reached show as 'not run'."""
    argv = [os.path.join(os.path.dirname(sys.executable), "ansible"), HOST_PATTERN, "--list-hosts",
            "-i", inventory] + (["--limit", limit] if limit else [])
    env = dict(os.environ, **runner_envvars())
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=project_dir(), timeout=300,
                              check=False)
    except (OSError, subprocess.TimeoutExpired):
        return []
    if proc.returncode != 0:
        return []
    lines = [line.strip() for line in proc.stdout.splitlines()]
    return [line for line in lines if line and not line.startswith("hosts (")]


def read_report(path: str | None) -> dict | None:
    """The JSON report a playbook wrote on the controller (fingerprints only), if any."""
    if not path or not os.path.isfile(path):
        return None
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, ValueError):
        return {"error": "unreadable report %s" % path}
    return data if isinstance(data, dict) else {"value": data}


def report_rows(report: dict | None) -> dict[str, dict]:
    """Per-host rows of a playbook report: {"hosts": [{"host": name, ...}]} or {"hosts": {name: {...}}}."""
    hosts = (report or {}).get("hosts")
    if isinstance(hosts, dict):
        return {str(k): v for k, v in hosts.items() if isinstance(v, dict)}
    if isinstance(hosts, list):
        return {str(row.get("host")): row for row in hosts if isinstance(row, dict) and row.get("host")}
    return {}


def row_status(row: dict) -> str | None:
    """rotate/drift rows carry 'status'; preflight rows 'reachable' and 'failed_checks'."""
    if isinstance(row.get("status"), str):
        return row["status"]
    if row.get("reachable") is False:
        return "unreachable"
    if isinstance(row.get("failed_checks"), list):
        return "refused" if row["failed_checks"] else "ok"
    return None


def row_fingerprint(row: dict) -> str | None:
    old, new = row.get("old"), row.get("new")
    if isinstance(old, str) and isinstance(new, str) and old != new:
        return "%s -> %s" % (old, new)
    token = row.get("token") if isinstance(row.get("token"), dict) else {}
    for value in (row.get("fingerprint"), new, token.get("fingerprint")):
        if isinstance(value, str):
            return value
    return None


def row_message(row: dict) -> str | None:
    if row.get("message"):
        return str(row["message"])
    checks = [c.get("check") for c in row.get("failed_checks") or [] if isinstance(c, dict)]
    return "failed checks: " + ", ".join(map(str, checks)) if checks else None


def merge_report(hosts: list[HostSummary], report: dict | None, inventory: list[str]) -> list[HostSummary]:
    """The playbook's own per-host verdict wins over Ansible's recap: rotation and drift judge
    hosts with failed_when: false and fail once (run_once) at the end, on whichever host is first."""
    rows = report_rows(report)
    by_name = {h.host: h for h in hosts if not inventory or h.host in inventory or h.host in rows}
    for name, row in rows.items():
        host = by_name.setdefault(name, HostSummary(name))
        host.extra["report"] = row
        status = row_status(row)
        if status is not None:
            host.status = status
            host.message = row_message(row) if status not in GOOD_STATUSES else None
            if status in GOOD_STATUSES:
                host.failed_task = None
        host.fingerprint = row_fingerprint(row) or host.fingerprint
    return [by_name[name] for name in sorted(by_name)]


def run_playbook(playbook, *, inventory: str, private_data_dir: str, progress: FleetProgress,
                 limit: str | None = None, forks: int | None = None, extravars: dict | None = None,
                 cmdline: str | None = None, verbosity: int = 0, report_path: str | None = None,
                 tags: str | None = None) -> RunOutcome:
    result = ansible_runner.run(
        private_data_dir=private_data_dir,
        project_dir=project_dir(),
        playbook=str(playbook),
        inventory=inventory,
        limit=limit,
        forks=forks,
        extravars=extravars or None,
        cmdline=cmdline,
        verbosity=verbosity or None,
        tags=tags,
        envvars=runner_envvars(),
        suppress_env_files=True,
        quiet=True,
        event_handler=progress,
    )
    targets = inventory_hosts(inventory, limit)
    hosts = progress.finish(targets)
    report = read_report(report_path)
    return RunOutcome(rc=result.rc, runner_status=result.status, hosts=merge_report(hosts, report, targets),
                      report=report, artifact_dir=result.config.artifact_dir, stdout_tail=_tail(result))


def _tail(result, lines=6) -> list[str]:
    """The last lines ansible-playbook printed (its ERROR! when it stops before any host)."""
    try:
        text = result.stdout.read()
    except (OSError, AttributeError):
        return []
    return [line for line in text.splitlines() if line.strip()][-lines:]
