# SPDX-License-Identifier: Apache-2.0
"""Summary per host from runner events and the playbooks' own reports (no Ansible run)."""

import io

from ct200_fleet.fleet import RunOutcome, merge_report
from ct200_fleet.progress import FleetProgress, table


def result(kind, host, task, **res):
    return {"event": kind, "event_data": {"host": host, "task": task, "res": res}}


def stats(**per_kind):
    return {"event": "playbook_on_stats", "event_data": per_kind}


def feed(events, targets):
    progress = FleetProgress(out=io.StringIO())
    for event in events:
        progress(event)
    return progress, progress.finish(targets)


def test_rotation_report_names_the_restored_host_not_the_run_once_failure():
    """rotate_hf_token.yml fails once (run_once) on the first host; the report says which host broke."""
    hosts = ["h1", "h2", "h3", "h4"]
    events = [
        result("runner_on_ok", "h1", "Set | install the new token", changed=True),
        result("runner_on_ok", "h2", "Set | install the new token", changed=True),
        result("runner_on_failed", "h1", "Report | fail when the token was refused or any host did not rotate",
               msg="token rotation stopped: h2=restored"),
        stats(ok={"h1": 5, "h2": 5, "h3": 2, "h4": 2}, changed={"h1": 1, "h2": 2},
              failures={"h1": 1}, dark={}, rescued={}, processed={h: 1 for h in hosts}),
    ]
    progress, summary = feed(events, hosts)
    report = {"pending_fingerprint": "sha256:bbbbbbbbbbbb", "result": "failed", "hosts": [
        {"host": "h1", "old": "sha256:aaaaaaaaaaaa", "new": "sha256:bbbbbbbbbbbb", "status": "ok", "message": "rotated"},
        {"host": "h2", "old": "sha256:aaaaaaaaaaaa", "new": "sha256:aaaaaaaaaaaa", "status": "restored",
         "message": "test failed and the previous token was restored: permission denied"},
        {"host": "h3", "old": "sha256:aaaaaaaaaaaa", "new": "sha256:aaaaaaaaaaaa", "status": "skipped",
         "message": "rollout stopped before this host"},
        {"host": "h4", "old": None, "new": None, "status": "unreachable", "message": "host unreachable"},
    ]}
    merged = {h.host: h for h in merge_report(summary, report, hosts)}
    outcome = RunOutcome(rc=2, runner_status="failed", hosts=list(merged.values()), report=report, artifact_dir="/x")
    statuses = {name: h.status for name, h in merged.items()}
    assert statuses == {"h1": "ok", "h2": "restored", "h3": "skipped", "h4": "unreachable"}
    assert outcome.failed_hosts == ["h2", "h4"] and not outcome.ok
    assert merged["h1"].failed_task is None, "h1 carries only the run_once report failure"
    assert merged["h1"].fingerprint == "sha256:aaaaaaaaaaaa -> sha256:bbbbbbbbbbbb"
    assert merged["h2"].fingerprint == "sha256:aaaaaaaaaaaa"
    assert "permission denied" in merged["h2"].message
    text = table(list(merged.values()))
    assert "restored" in text.splitlines()[2] and "permission denied" in text.splitlines()[2]


def test_drift_report_and_preflight_rows():
    drift = {"hosts": [{"host": "h1", "fingerprint": "sha256:aaaaaaaaaaaa", "status": "in_sync", "message": ""},
                       {"host": "h2", "fingerprint": "sha256:cccccccccccc", "status": "drift", "message": ""}]}
    _progress, summary = feed([stats(ok={"h1": 3, "h2": 3}, failures={"h1": 1})], ["h1", "h2"])
    merged = {h.host: h for h in merge_report(summary, drift, ["h1", "h2"])}
    assert (merged["h1"].status, merged["h2"].status) == ("in_sync", "drift")
    assert RunOutcome(2, "failed", list(merged.values()), drift, "/x").failed_hosts == ["h2"]

    preflight = {"hosts": [
        {"host": "h1", "reachable": True, "failed_checks": [], "token": {"fingerprint": "sha256:aaaaaaaaaaaa"}},
        {"host": "h2", "reachable": True, "failed_checks": [{"check": "gpus", "cause": "2 of 8", "fix": "..."}]},
        {"host": "h3", "reachable": False, "failed_checks": [{"check": "unreachable"}]},
    ]}
    _progress, summary = feed([stats(ok={"h1": 9, "h2": 9, "localhost": 3}, failures={"localhost": 1},
                                     dark={"h3": 1})], ["h1", "h2", "h3"])
    merged = {h.host: h for h in merge_report(summary, preflight, ["h1", "h2", "h3"])}
    assert set(merged) == {"h1", "h2", "h3"}, "the controller's report play is not a fleet host"
    assert {n: h.status for n, h in merged.items()} == {"h1": "ok", "h2": "refused", "h3": "unreachable"}
    assert merged["h1"].fingerprint == "sha256:aaaaaaaaaaaa" and merged["h2"].message == "failed checks: gpus"


def test_progress_lines_and_recap_without_report():
    events = [
        {"event": "playbook_on_play_start", "event_data": {"name": "Fleet status"}},
        result("runner_on_ok", "h1", "A task", changed=False),
        result("runner_on_ok", "h1", "Changes", changed=True),
        {"event": "runner_on_failed",
         "event_data": {"host": "h2", "task": "Ignored", "ignore_errors": True, "res": {"msg": "meh"}}},
        result("runner_on_failed", "h2", "Breaks", msg="boom\nsecond line"),
        result("runner_on_unreachable", "h3", "A task", msg="ssh: connect refused"),
        result("runner_on_skipped", "h1", "Skipped"),
        {"event": "runner_on_ok", "event_data": {"host": "h1", "task": "Validating arguments",
                                                 "task_action": "validate_argument_spec", "res": {}}},
        stats(ok={"h1": 2, "h2": 1}, changed={"h1": 1}, failures={"h2": 1}, dark={"h3": 1}),
    ]
    progress, summary = feed(events, ["h1", "h2", "h3", "h4"])
    lines = progress.out.getvalue().splitlines()
    assert lines == ["== Fleet status", "h1: A task -> ok", "h1: Changes -> changed", "h2: Ignored -> failed (ignored): meh",
                     "h2: Breaks -> failed: boom second line", "h3: A task -> unreachable: ssh: connect refused"]
    by_name = {h.host: h for h in summary}
    assert {n: h.status for n, h in by_name.items()} == {"h1": "ok", "h2": "failed", "h3": "unreachable",
                                                         "h4": "not run"}
    assert by_name["h2"].failed_task == "Breaks" and by_name["h1"].changed == 1
