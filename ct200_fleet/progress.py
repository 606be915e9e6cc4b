# SPDX-License-Identifier: Apache-2.0
"""Per-host progress from ansible-runner events, and the end-of-run summary per host.

Only fields Ansible has already censored for ``no_log`` tasks are read (status,
task name, ``msg``, ``changed``, and ``ansible_facts`` the playbooks publish for
this command: ``ct200_token_fingerprint``, ``ct200_sglang_units``, ``ct200_fanout``),
never task arguments.  The progress lines the ``hf_download_wait`` action prints
(``[host] label: ...``, one per download and round; for the site fan-out with the
source and the verified bytes) arrive as ``verbose`` events of that task and are
printed as they come.
"""

from __future__ import annotations

import dataclasses
import sys

from ansible_collections.ct200.deploy.plugins.module_utils.redact import redact

RESULT_EVENTS = {
    "runner_on_ok": "ok",
    "runner_on_failed": "failed",
    "runner_on_unreachable": "unreachable",
    "runner_on_skipped": "skipped",
}
# Roles validating their arguments: one line per role and host says nothing.
QUIET_ACTIONS = {"validate_argument_spec", "ansible.builtin.validate_argument_spec"}
FINGERPRINT_FACT = "ct200_token_fingerprint"
UNITS_FACT = "ct200_sglang_units"
FANOUT_FACT = "ct200_fanout"
# The action printing one progress line per download and round (the model_weights role, fan-out or not).
PROGRESS_ACTIONS = {"ct200.deploy.hf_download_wait", "hf_download_wait"}
SOURCE_KINDS = ("parent", "peer", "seed", "hub")
MSG_WIDTH = 160


@dataclasses.dataclass
class HostSummary:
    host: str
    status: str = "not run"  # ok | failed | unreachable | not run
    ok: int = 0
    changed: int = 0
    failures: int = 0
    unreachable: int = 0
    rescued: int = 0
    failed_task: str | None = None
    message: str | None = None
    fingerprint: str | None = None
    units: dict | None = None
    extra: dict = dataclasses.field(default_factory=dict)

    def as_dict(self) -> dict:
        data = dataclasses.asdict(self)
        data.update(data.pop("extra"))
        return data


def _one_line(text, width: int | None = MSG_WIDTH) -> str:
    text = " ".join(str(text).split())
    return text if width is None or len(text) <= width else text[:width - 3] + "..."


class FleetProgress:
    """runner ``event_handler``: prints ``host: task -> status`` as results arrive, keeps per-host state."""

    def __init__(self, out=None, verbose_skips=False):
        self.out = out or sys.stdout
        self.verbose_skips = verbose_skips
        self.hosts: dict[str, HostSummary] = {}
        self.processed: set[str] = set()

    def host(self, name: str) -> HostSummary:
        if name not in self.hosts:
            self.hosts[name] = HostSummary(name)
        return self.hosts[name]

    def __call__(self, event: dict) -> bool:
        kind = event.get("event")
        data = event.get("event_data") or {}
        if kind == "playbook_on_play_start":
            self._print("== %s" % (data.get("name") or data.get("pattern") or "play"))
        elif kind in RESULT_EVENTS:
            self._on_result(RESULT_EVENTS[kind], data)
        elif kind == "playbook_on_stats":
            self._on_stats(data)
        elif kind == "verbose" and data.get("task_action") in PROGRESS_ACTIONS:
            self._on_progress_lines(event.get("stdout") or "")
        return True  # keep runner's own job_events record

    def _print(self, line: str) -> None:
        print(redact(line), file=self.out, flush=True)  # the one redaction, whatever a host's result quoted

    def _on_result(self, status: str, data: dict) -> None:
        name = data.get("host")
        if not name:
            return
        res = data.get("res") if isinstance(data.get("res"), dict) else {}
        host = self.host(name)
        facts = res.get("ansible_facts") if isinstance(res.get("ansible_facts"), dict) else {}
        if isinstance(facts.get(FINGERPRINT_FACT), str):
            host.fingerprint = facts[FINGERPRINT_FACT]
        if isinstance(facts.get(UNITS_FACT), dict):
            host.units = facts[UNITS_FACT]
        if isinstance(facts.get(FANOUT_FACT), dict):
            host.extra["fanout"] = fanout_result(facts[FANOUT_FACT])
            self._print("%s: fan-out %s" % (name, fanout_text(host.extra["fanout"])))
        if status == "ok" and res.get("changed"):
            status = "changed"
        ignored = bool(data.get("ignore_errors"))
        if status in ("failed", "unreachable") and not ignored:
            host.failed_task = data.get("task")
            # whole: a failure's cause and fix (e.g. both fingerprints of a token drift and the
            # promotion step) come last; the table shortens it, the JSON summary keeps it
            host.message = _one_line(res.get("msg", ""), width=None) or None
        if status == "skipped" and not self.verbose_skips or status == "ok" and data.get("task_action") in QUIET_ACTIONS:
            return
        line = "%s: %s -> %s" % (name, data.get("task"), status + (" (ignored)" if ignored else ""))
        if status in ("failed", "unreachable") and res.get("msg"):
            line += ": " + _one_line(res["msg"], width=None)
        self._print(line)

    def _on_progress_lines(self, text: str) -> None:
        """``[host] host target: 1.20/4.00 GB ..., from parent h1 | verified ...``: printed, and kept per host."""
        for line in text.splitlines():
            line = line.strip()
            if not line.startswith("[") or "] " not in line:
                continue
            name, rest = line[1:].split("] ", 1)
            self.host(name).extra["last_progress"] = _one_line(rest, 300)
            self._print("%s: %s" % (name, _one_line(rest, 300)))

    def _on_stats(self, data: dict) -> None:
        counts = {key: data.get(key) or {} for key in ("ok", "changed", "failures", "dark", "rescued", "processed")}
        names = set().union(*(counts[k].keys() for k in counts))
        self.processed |= names
        for name in names:
            host = self.host(name)
            host.ok = counts["ok"].get(name, 0)
            host.changed = counts["changed"].get(name, 0)
            host.failures = counts["failures"].get(name, 0)
            host.unreachable = counts["dark"].get(name, 0)
            host.rescued = counts["rescued"].get(name, 0)

    def finish(self, inventory_hosts=()) -> list[HostSummary]:
        """Final status per host; inventory hosts the run never reached are 'not run'."""
        for name in inventory_hosts:
            self.host(name)
        for host in self.hosts.values():
            host.status = _final_status(host, self.processed)
        return [self.hosts[name] for name in sorted(self.hosts)]


def _final_status(host: HostSummary, processed: set) -> str:
    if host.unreachable:
        return "unreachable"
    if host.failures:
        return "failed"
    if host.host not in processed:  # no recap for it: never reached, or the run died
        return "failed" if host.failed_task else "not run"
    return "ok"


def _count(value) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def fanout_result(fact: dict) -> dict:
    """The ``ct200_fanout`` fact (the model_weights role publishes it, decided by site_plan.fanout_result)
    as the summary keeps it: per repository its bytes by kind of source, fallbacks, rejected sources and
    whether every file is verified. The fact is read, type-checked and shortened, never decided again."""
    repos = []
    for repo in fact.get("repos") or []:
        if not isinstance(repo, dict):
            continue
        by_kind = repo.get("bytes_by_kind") if isinstance(repo.get("bytes_by_kind"), dict) else {}
        repos.append({
            "name": str(repo.get("name") or repo.get("repo_id") or "?"), "repo_id": repo.get("repo_id"),
            "verified": repo.get("verified") is True, "files": _count(repo.get("files")),
            "bytes_total": _count(repo.get("bytes_total")),
            "bytes_by_kind": dict((k, _count(by_kind.get(k))) for k in SOURCE_KINDS if _count(by_kind.get(k))),
            "fallbacks": _count(repo.get("fallbacks")), "rejected": _count(repo.get("rejected")),
            "msg": _one_line(repo["msg"]) if repo.get("msg") else None})
    return {"role": fact.get("role"), "seed": fact.get("seed"), "repos": repos, "verified": fact.get("verified") is True}


def _mb(count: int) -> str:
    return "%.1f MB" % (count / 1e6)


def fanout_text(fanout: dict | None) -> str:
    """``target 48.0 MB from parent 40.0 MB + seed 8.0 MB, 12 files verified, 1 fallback; drafter ...``"""
    if not fanout:
        return "-"
    parts = []
    for repo in fanout["repos"]:
        sources = " + ".join("%s %s" % (kind, _mb(count)) for kind, count in repo["bytes_by_kind"].items())
        text = "%s %s" % (repo["name"], ("from " + sources) if sources else "nothing fetched")
        text += (", %d files verified" % repo["files"]) if repo["verified"] else ", NOT verified: %s" % (
            repo["msg"] or "failed")
        for what in ("fallbacks", "rejected"):
            if repo[what]:
                text += ", %d %s" % (repo[what], what)
        parts.append(text)
    return "%s: %s" % (fanout.get("role") or "?", "; ".join(parts) or "no repository")


def table(hosts: list[HostSummary]) -> str:
    """Plain-text summary: host, status, changed, failed task, token fingerprint (and the fan-out, when one ran)."""
    header = ("HOST", "STATUS", "CHANGED", "FAILED TASK", "TOKEN")
    rows = [(h.host, h.status, str(h.changed), _one_line(h.failed_task or h.message or "-", 70),
             h.fingerprint or "-") for h in hosts]
    if any(h.extra.get("fanout") for h in hosts):
        header += ("FAN-OUT",)
        rows = [row + (fanout_text(h.extra.get("fanout")),) for row, h in zip(rows, hosts)]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    fmt = "  ".join("%%-%ds" % w for w in widths)
    return "\n".join((fmt % row).rstrip() for row in [header, *rows])
