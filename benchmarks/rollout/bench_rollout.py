#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Rollout benchmark (issue 13 item 7): playbooks/rollout.yml and rollback.yml on the 8-host SSH fleet.

    python benchmarks/rollout/bench_rollout.py --quick --json /tmp/rollout.json

One fleet (tests/support/netlab.py: 8 sandbox hosts with sshd, each in its own network namespace, the
local Hub in one of its own), one full deploy_kimi.yml (not timed), then in ONE run:

* ``rollout_1_s``: a drafter revision (a LocalHub commit) rolled out to one host (--limit);
* ``rollout_8_s``: the next revision to all 8 hosts, batches [1, 25%] -> ``rollout_8_over_1``;
  ``max_unavailable_observed``: the most hosts whose /health_generate did not answer 200 at one time
  (polled every 0.5 s from the controller during that rollout; the batch is 2);
* ``bad_release_hosts_touched``: a drafter revision whose acceptance is 1.0: hosts whose unit was
  restarted (the canary, which the gate caught and moved back) -- goal 1;
* ``rollback_seconds``: ``ct200 rollback`` of the whole fleet (back to the previous release);
* ``revision_bump_hub_bytes_over_changed``: the file bytes the fleet's Hub sent while the bad release was staged on
  all 8 hosts (every host holding the previous commit; the commit changes README.md and standin.json) / the bytes of
  the changed files; per path in ``revision_bump_fleet``. ``revision_bump_mixed_fleet``: the same for the 8-host
  rollout, whose previous commits differ (hosts[0] took the one-host commit); ``revision_bump_local_*``:
  benchmarks/rollout/revision_bump.py (one host, a local Hub, one changed config.json);
* ``all_verified``: every host served the 8-host rollout's release with its gate figures recorded, the
  bad release left every host on that release, and the rollback put every host on its previous one.

Where ``total_s`` goes (the goal is 10 minutes for the whole command): ``fleet_up_s``, ``deploy_s``,
``rollout_1_s``, ``rollout_8_s``, ``bad_release_s``, ``rollback_seconds``, ``teardown_s`` and
``revision_bump_local_s``; what they leave is the checks between the phases.
``machine_busy_cpu_s`` (and ``machine_busy_cores``, over ``total_s``): every process's CPU from /proc/stat,
the sandbox hosts' included, which ``time`` does not see (tests/support/machine_cpu.py).

Ratios only, nothing fails on time. ``--quick`` is this sequence once.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO), str(REPO / "tests" / "support"), str(REPO / "tests" / "fleet"), str(REPO / "collections")]

import netlab  # noqa: E402
from machine_cpu import MachineCpu  # noqa: E402
from conftest import (APT_REPO, FLEET_SIZE, PREFIX, ROOTFS, SERVED_VARS, SGLANG_WHEELHOUSE, SHARED,  # noqa: E402
                      SHARED_MOUNT, STATE, WHEELHOUSE, FleetSession, ServedFleet, start_hub_in_namespace)
from localhub.personas import token_for  # noqa: E402
import test_fleet_rollout as t  # noqa: E402


def revision_bump():
    """The staging helper's revision-bump figure (Hub bytes of a one-small-file commit / its size), if present."""
    path = REPO / "benchmarks" / "rollout" / "revision_bump.py"
    if not path.is_file():
        return None, "benchmarks/rollout/revision_bump.py is not in this checkout"
    spec = importlib.util.spec_from_file_location("revision_bump", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for name in ("measure", "run", "main_figures"):
        if hasattr(module, name):
            value = getattr(module, name)()
            if isinstance(value, dict):
                return value.get("revision_bump_hub_bytes_over_changed"), "revision_bump.%s" % name
            return value, "revision_bump.%s" % name
    return None, "revision_bump.py has no measure()/run()"


def changed_bytes(hub, repo_id, before) -> int:
    """Bytes of the files main's commit holds that BEFORE (the repo as it was) lacks or holds with other content."""
    old = {path: f.sha256 for path, f in before.files.items()}
    return sum(f.size for path, f in hub.repo(repo_id).files.items() if old.get(path) != f.sha256)


def hub_figures(hub, changed: int) -> dict:
    """The Hub's file answers since its last reset_stats: bytes, and per path how often and how many bytes."""
    rows = [r for r in hub.requests_log() if r["kind"] in ("resolve_get", "cdn_get") and 200 <= r["status"] < 300]
    sent = sum(r["bytes_sent"] for r in rows)
    per_path: dict = {}
    for r in rows:
        entry = per_path.setdefault(r.get("path") or "?", {"answers": 0, "bytes": 0})
        entry["answers"] += 1
        entry["bytes"] += r["bytes_sent"]
    return {"hub_file_bytes": sent, "changed_bytes": changed, "per_path": per_path,
            "hub_bytes_over_changed": round(sent / changed, 4) if changed else None}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", maxsplit=1)[0])
    parser.add_argument("--quick", action="store_true", help="the sequence once (the only mode)")
    parser.add_argument("--json", metavar="FILE", help="write the figures as JSON")
    args = parser.parse_args(argv)
    out: dict = {"hosts": FLEET_SIZE, "quick": bool(args.quick)}
    t_start = time.monotonic()
    cpu = MachineCpu()
    binds = (f"{WHEELHOUSE}:/srv/wheelhouse:ro",) if WHEELHOUSE.is_dir() else ()
    binds += (f"{SGLANG_WHEELHOUSE}:/srv/sglang-wheelhouse:ro",) if SGLANG_WHEELHOUSE.is_dir() else ()
    binds += (f"{APT_REPO}:/srv/apt-repo:ro",) if APT_REPO.is_dir() else ()
    SHARED.mkdir(parents=True, exist_ok=True)
    binds += (f"{SHARED}:{SHARED_MOUNT}",)
    fleet = netlab.SshFleet(STATE, prefix=PREFIX, count=FLEET_SIZE, rootfs=ROOTFS, binds=binds,
                            link_rate=os.environ.get("CT200_FLEET_LINK_RATE", "1gbit"),
                            hub_rate=os.environ.get("CT200_FLEET_HUB_RATE", "400mbit"))
    hub = None
    verified = []
    try:
        t0 = time.monotonic()
        fleet.up()
        out["fleet_up_s"] = round(time.monotonic() - t0, 1)
        hub = start_hub_in_namespace(fleet, Path(tempfile.mkdtemp(prefix="bench-rollout-hub-")))
        session = FleetSession(fleet, hub)
        # served_fleet's steps (tests/fleet/conftest.py): local apt source, the shared venv once, the full deploy
        tmp = Path(tempfile.mkdtemp(prefix="bench-rollout-"))
        token = tmp / "token"
        token.write_text(token_for("granted") + "\n")
        token.chmod(0o600)
        extra = tmp / "served.yml"
        extra.write_text(SERVED_VARS)
        env = {"CT200_HF_TOKEN_FILE": str(token), "CT200_SERVED_PREFLIGHT": str(tmp / "preflight.json")}
        t0 = time.monotonic()
        run = session.run_playbook(REPO / "tests" / "fleet" / "served_prepare.yml", env=env)
        assert run.rc == 0, run.out[-4000:]
        lead = ServedFleet(session, extra, env, 0.0)
        run = lead.deploy(limit=session.hosts[0], args=("--tags", "sglang_runtime"))
        assert run.rc == 0, run.out[-4000:]
        run = lead.deploy(timeout=1800)
        assert run.rc == 0, run.out[-4000:]
        served = t.Served(lead)
        t.standin_bridge(served)
        out["deploy_s"] = round(time.monotonic() - t0, 1)
        hosts = served.hosts

        # one host, then all of them
        t.commit_drafter(served, {"decode_tok_s": 40.0}, "bench: one host")
        t0 = time.monotonic()
        run = served.run_playbook(t.ROLLOUT, extra=t.serial_extra(), limit=hosts[0])
        out["rollout_1_s"] = round(time.monotonic() - t0, 1)
        verified.append(run.rc == 0)
        before_bump = hub.repo(t.DRAFTER)
        good = t.commit_drafter(served, {"decode_tok_s": 40.0}, "bench: all hosts")
        changed = changed_bytes(hub, t.DRAFTER, before_bump)
        hub.reset_stats()
        with t.Availability(served) as avail:
            t0 = time.monotonic()
            run = served.run_playbook(t.ROLLOUT, extra=t.serial_extra())
            out["rollout_8_s"] = round(time.monotonic() - t0, 1)
        # this commit follows the one-host commit: hosts[0] holds that one, the others the deploy's, so the fleet's
        # Hub bytes here are reported beside the clean figure (below, every host on the same previous commit)
        out["revision_bump_mixed_fleet"] = hub_figures(hub, changed)
        out["rollout_8_over_1"] = round(out["rollout_8_s"] / out["rollout_1_s"], 3)
        out["max_unavailable_observed"] = avail.max_down
        verified.append(run.rc == 0)
        after = t.snapshot(served)
        for host in hosts:
            rec = session.release_record(host, after[host]["state"]["current"])
            verified.append(rec["drafter"]["commit"] == good and rec["measured"]["decode_tok_s"] is not None)

        # a bad release: caught at the canary
        before = t.snapshot(served)
        before_bump = hub.repo(t.DRAFTER)
        t.commit_drafter(served, {"accept_length": 1.0}, "bench: bad drafter")
        changed = changed_bytes(hub, t.DRAFTER, before_bump)
        hub.reset_stats()
        t0 = time.monotonic()
        run = served.run_playbook(t.ROLLOUT, extra=t.serial_extra())
        out["bad_release_s"] = round(time.monotonic() - t0, 1)
        # every host holds the previous commit and stages this one (the canary fails after the staging): what the
        # fleet's Hub sent for a commit that changed two small files, with the kept snapshot hard-linked and the fan-out
        bump = hub_figures(hub, changed)
        out["revision_bump_fleet"] = bump
        out["revision_bump_hub_bytes_over_changed"] = bump["hub_bytes_over_changed"]
        bad = t.snapshot(served)
        out["bad_release_hosts_touched"] = sum(bad[h]["started"] != before[h]["started"] for h in hosts)
        verified.append(run.rc != 0 and all(bad[h]["state"] == before[h]["state"] for h in hosts))
        verified.append(all(t.health(session, h) == 200 for h in hosts))

        # rollback of the fleet
        proc, seconds = served.rollback()
        out["rollback_seconds"] = round(seconds, 1)
        back = t.snapshot(served)
        verified.append(proc.returncode == 0)
        verified.append(all(back[h]["state"]["current"] == before[h]["state"]["previous"] for h in hosts))
        verified.append(all(t.health(session, h) == 200 for h in hosts))
    finally:
        t0 = time.monotonic()
        if hub is not None:
            hub.stop()
        fleet.down()
        out["teardown_s"] = round(time.monotonic() - t0, 1)
    # the staging helper's own figure (one host, a local Hub, one changed config.json), beside the fleet's
    t0 = time.monotonic()
    out["revision_bump_local_hub_bytes_over_changed"], out["revision_bump_local_source"] = revision_bump()
    out["revision_bump_local_s"] = round(time.monotonic() - t0, 1)
    out["all_verified"] = bool(verified) and all(verified)
    out["checks"] = verified
    out["total_s"] = round(time.monotonic() - t_start, 1)
    # the sandbox hosts' processes are outside this process tree: the machine's count, not getrusage's
    out.update(cpu.since(out["total_s"]))
    text = json.dumps(out, indent=2, sort_keys=True)
    print(text)
    if args.json:
        Path(args.json).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
