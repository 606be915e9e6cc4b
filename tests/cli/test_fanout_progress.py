# SPDX-License-Identifier: Apache-2.0
"""`ct200 deploy` during the site fan-out: per-host progress lines (source, verified bytes) as the
hf_download_wait action prints them, and the per-host fan-out result in the summary table and JSON.

The events are as ansible-runner 2.4 delivers them (recorded from a run of the real action and
set_fact on a local host, trimmed to the fields the handler reads); the fact is the one the model_weights
role publishes (site_plan.fanout_result).  The last test runs `ct200 deploy`
through ansible-runner on localhost hosts with a stand-in play (tests/cli/playbooks/fanout_progress.yml)
that uses the real wait action.  No fleet."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import yaml

from ansible_collections.ct200.deploy.plugins.module_utils import fanout
from ansible_collections.ct200.deploy.plugins.module_utils.hf_progress import format_line
from ansible_collections.ct200.deploy.plugins.module_utils.site_plan import fanout_result, site_layout
from ct200_fleet.fleet import RunOutcome
from ct200_fleet.progress import FleetProgress, table

REPO = Path(__file__).resolve().parents[2]
WAIT_TASK = "Download | wait, printing one progress line per repository every poll interval"
PUBLISH_TASK = "Download | publish this host's fan-out result"
MB4 = 4 * 2**20
REPOS = [{"name": "target", "repo_id": "fo/site"}, {"name": "drafter", "repo_id": "fo/draft"}]


def progress_event(stdout):
    """A line the action printed (Display, relayed to the controller): a 'verbose' event without host."""
    return {"event": "verbose", "stdout": stdout,
            "event_data": {"host": None, "task": WAIT_TASK, "task_action": "ct200.deploy.hf_download_wait",
                           "resolved_action": "ct200.deploy.hf_download_wait"}}


def fact_event(host, fact):
    return {"event": "runner_on_ok", "stdout": "ok: [%s]" % host,
            "event_data": {"host": host, "task": PUBLISH_TASK, "task_action": "ansible.builtin.set_fact",
                           "res": {"ansible_facts": {"ct200_fanout": fact}, "changed": False}}}


def stats(hosts):
    data = {"ok": dict.fromkeys(hosts, 9), "changed": {}, "failures": {}, "dark": {}, "rescued": {},
            "processed": dict.fromkeys(hosts, 1)}
    return {"event": "playbook_on_stats", "event_data": data}


def published_fact(host, seed, jobs):
    """ct200_fanout as the model_weights role publishes it (ct200.deploy.site_plan stage=fanout_result)
    from the wait task's job results."""
    layout = site_layout(["h0", "h1", "h2", "h3"], None, seed=seed)
    return fanout_result(host, layout, REPOS, jobs)


def peer_job(repo_id, by_kind, fallbacks=0, files=12):
    """A finished hf_fanout_fetch job as async_status returns it."""
    return {"finished": 1, "changed": True, "repo_id": repo_id, "files": files, "bytes_total": files * MB4,
            "bytes_by_kind": by_kind, "fallbacks": [{"path": "x", "source": "seed h0", "after": ["parent h1: down"]}]
            * fallbacks, "rejected": []}


def test_progress_doc_line_names_the_source_and_the_verified_bytes(tmp_path):
    """The fetcher's own progress document, formatted by the line the action prints."""
    data = b"A" * 4096
    files = {"model-00001.safetensors": {"size": len(data), "oid": __import__("hashlib").sha256(data).hexdigest(),
                                         "lfs": True}}
    sources = fanout.peer_sources([{"name": h, "url": "http://127.0.0.1:9/fo"} for h in ("h0", "h1", "h2", "h3")],
                                  "h3", fanout=2)
    fetcher = fanout.Fetcher(str(tmp_path / "m"), "fo/site", "c" * 40, files, sources, peer_wait=0)
    fetcher.preview()  # the plan: one file of 4096 bytes to fetch
    fetcher.by_source = {"h1": 3000, "h0": 1096}
    doc = fetcher.progress_doc("running")
    assert doc["bytes_by_kind"] == {"parent": 3000, "peer": 0, "seed": 1096, "hub": 0}
    assert doc["fetching_from"] == [] and doc["bytes_verified"] == 0
    line = format_line("h3 target", doc)
    assert line.endswith(", from - | verified 0.00 GB | by source: parent 0.00 GB, seed 0.00 GB"), line
    res = fetcher.result()
    assert res["bytes_by_kind"]["parent"] == 3000 and res["repo_id"] == "fo/site"
    # an hf_download progress document (the seed's) keeps its line as it was
    assert "from" not in format_line("h0 target", dict(doc, bytes_by_kind=None))


def test_deploy_prints_fanout_progress_per_host_and_summarizes_it():
    hosts = ["h0", "h1", "h3"]
    seed_fact = published_fact("h0", "h0", [
        {"finished": 1, "changed": True, "repo_id": "fo/site", "files": 12, "bytes_total": 12 * MB4,
         "bytes_downloaded": 12 * MB4},
        {"finished": 1, "changed": False, "repo_id": "fo/draft", "files": 3, "bytes_total": 3 * MB4,
         "bytes_downloaded": 0}])
    h1_fact = published_fact("h1", "h0", [peer_job("fo/site", {"parent": 0, "peer": 0, "seed": 12 * MB4, "hub": 0}),
                                          peer_job("fo/draft", {"seed": 3 * MB4}, files=3)])
    h3_fact = published_fact("h3", "h0", [
        peer_job("fo/site", {"parent": 10 * MB4, "peer": 0, "seed": 2 * MB4, "hub": 0}, fallbacks=2),
        {"finished": 1, "failed": True, "msg": "no source could deliver x.safetensors verified (parent h1: down)"}])
    events = [
        {"event": "playbook_on_play_start", "event_data": {"name": "Fan out model weights across the site"}},
        progress_event("[h3] h3 target: 0.02/0.05 GB (41.7 %), 11 MB/s, ETA 3s, files 5/12, from parent h1 | "
                       "verified 0.02 GB | by source: parent 0.02 GB"),
        progress_event("[h0] h0 target (seed, from the Hub): 0.03/0.05 GB (60.0 %), 5 MB/s, ETA 4s, files 7/12"),
        progress_event("[h3] h3 target: finished"),
        {"event": "verbose", "stdout": "[WARNING]: unrelated", "event_data": {"task_action": "ansible.builtin.debug"}},
        fact_event("h0", seed_fact), fact_event("h1", h1_fact), fact_event("h3", h3_fact),
        stats(hosts),
    ]
    progress = FleetProgress(out=io.StringIO())
    for event in events:
        progress(event)
    lines = progress.out.getvalue().splitlines()
    assert lines[1:4] == [
        "h3: h3 target: 0.02/0.05 GB (41.7 %), 11 MB/s, ETA 3s, files 5/12, from parent h1 | verified 0.02 GB | "
        "by source: parent 0.02 GB",
        "h0: h0 target (seed, from the Hub): 0.03/0.05 GB (60.0 %), 5 MB/s, ETA 4s, files 7/12",
        "h3: h3 target: finished"]
    assert "unrelated" not in progress.out.getvalue()
    assert "h0: fan-out seed: target from hub 50.3 MB, 12 files verified; drafter nothing fetched, 3 files verified" in lines
    assert ("h3: fan-out peer: target from parent 41.9 MB + seed 8.4 MB, 12 files verified, 2 fallbacks; "
            "drafter nothing fetched, NOT verified: no source could deliver x.safetensors verified (parent h1: down)"
            in lines)

    summary = progress.finish(hosts)
    outcome = RunOutcome(rc=0, runner_status="successful", hosts=summary, report=None, artifact_dir="/x")
    by_name = {h.host: h.as_dict() for h in outcome.hosts}
    assert by_name["h0"]["fanout"]["repos"][0]["bytes_by_kind"] == {"hub": 12 * MB4}
    assert by_name["h1"]["fanout"]["repos"][0]["bytes_by_kind"] == {"seed": 12 * MB4}
    h3 = by_name["h3"]["fanout"]
    assert (h3["role"], h3["seed"], h3["verified"]) == ("peer", "h0", False)
    assert h3["repos"][0] == {"name": "target", "repo_id": "fo/site", "verified": True, "files": 12,
                              "bytes_total": 12 * MB4, "bytes_by_kind": {"parent": 10 * MB4, "seed": 2 * MB4},
                              "fallbacks": 2, "rejected": 0, "msg": None}
    assert h3["repos"][1]["name"] == "drafter" and h3["repos"][1]["verified"] is False
    assert by_name["h3"]["last_progress"] == "h3 target: finished"
    json.dumps(by_name)  # the summary JSON `ct200 deploy --json` writes

    text = table(outcome.hosts).splitlines()
    assert text[0].split()[-1] == "FAN-OUT"
    assert text[1].startswith("h0") and "seed: target from hub 50.3 MB, 12 files verified" in text[1]
    assert "peer: target from parent 41.9 MB + seed 8.4 MB" in text[3] and "NOT verified" in text[3]


def test_no_fanout_column_when_no_fanout_ran():
    progress = FleetProgress(out=io.StringIO())
    progress(stats(["h1"]))
    assert table(progress.finish(["h1"])).splitlines()[0].split() == ["HOST", "STATUS", "CHANGED", "FAILED", "TASK",
                                                                      "TOKEN"]


def test_ct200_deploy_through_ansible_runner_prints_and_summarizes_the_fanout(tmp_path):
    """The same path for real: ansible-runner events of the real wait action and set_fact (localhost hosts)."""
    doc = {"state": "running", "updated": time.time(), "bytes_total": 12 * MB4, "bytes_done": 5 * MB4,
           "rate": 11e6, "files_done": 5, "files_total": 12, "eta_seconds": 3, "fetching_from": ["parent cli-a"],
           "bytes_verified": 5 * MB4, "bytes_by_kind": {"parent": 4 * MB4, "peer": 0, "seed": MB4, "hub": 0}}
    progress_file = tmp_path / "progress.json"
    progress_file.write_text(json.dumps(doc))
    local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    seed_repo = {"name": "target", "repo_id": "fo/site", "verified": True, "files": 12, "bytes_total": 12 * MB4,
                 "bytes_by_kind": {"hub": 12 * MB4}, "fallbacks": 0, "rejected": 0, "msg": None}
    peer_repo = {"name": "target", "repo_id": "fo/site", "verified": True, "files": 12, "bytes_total": 12 * MB4,
                 "bytes_by_kind": {"parent": 12 * MB4, "peer": 0, "seed": 0, "hub": 0}, "fallbacks": 1,
                 "rejected": 0, "msg": None}
    facts = {"cli-a": {"seed": "cli-a", "role": "seed", "repos": [seed_repo], "verified": True},
             "cli-b": {"seed": "cli-a", "role": "peer", "repos": [peer_repo], "verified": True}}
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(yaml.safe_dump({"ct200": {"hosts": {"cli-a": local, "cli-b": local}, "vars": {
        "ct200_test_progress_file": str(progress_file), "ct200_test_fanout": facts}}}))
    summary = tmp_path / "summary.json"
    env = {k: v for k, v in os.environ.items() if k not in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")}
    env["PYTHONPATH"] = str(REPO)
    proc = subprocess.run([sys.executable, "-m", "ct200_fleet", "deploy", "-i", str(inventory), "--playbook",
                           str(REPO / "tests" / "cli" / "playbooks" / "fanout_progress.yml"), "--json", str(summary)],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for host in ("cli-a", "cli-b"):
        assert ("%s: %s target: 0.02/0.05 GB (41.7 %%), 11 MB/s, ETA 3s, files 5/12, from parent cli-a | "
                "verified 0.02 GB | by source: parent 0.02 GB, seed 0.00 GB" % (host, host)) in proc.stdout
        assert "%s: %s target: finished" % (host, host) in proc.stdout
    assert "cli-b: fan-out peer: target from parent 50.3 MB, 12 files verified, 1 fallbacks" in proc.stdout
    table_lines = proc.stdout[proc.stdout.index("HOST "):].splitlines()
    assert table_lines[0].split()[-1] == "FAN-OUT" and "seed: target from hub 50.3 MB" in table_lines[1]
    hosts = dict((h["host"], h) for h in json.loads(summary.read_text())["hosts"])
    assert hosts["cli-b"]["fanout"]["repos"][0]["bytes_by_kind"] == {"parent": 12 * MB4}
    assert hosts["cli-a"]["fanout"]["role"] == "seed" and hosts["cli-a"]["fanout"]["verified"] is True
