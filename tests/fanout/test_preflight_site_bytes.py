# SPDX-License-Identifier: Apache-2.0
"""The preflight report counts the Hub bytes once per site when deploy_kimi.yml fans the weights out:
the seed's bytes come from the Hub, every other host's from its peers (table and JSON).

Runs the report play of playbooks/preflight.yml for real (ansible-playbook --start-at-task, on
localhost only) over an inventory whose hosts already carry their preflight rows, as the gather
play leaves them: no host is contacted, no Hub is asked."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
GB = 10**9
LACKS = {"fanout2-a": 600 * GB, "fanout2-b": 600 * GB, "fanout2-c": 0}  # the third host is complete already


def row(host, bytes_to_fetch):
    return {"host": host, "reachable": True, "failed_checks": [], "bytes_to_fetch": bytes_to_fetch,
            "free_bytes": 2000 * GB, "fit": None, "access": {}, "commits": {"o/target": "c" * 40},
            "token": {"user": "u", "fingerprint": "sha256:aaaaaaaaaaaa"},
            "gpus": {"count": 8, "model": ["RTX"], "memory_gib": 96, "numa": [0] * 8, "driver": "580.95.05",
                     "cuda": "13.0", "standin": False},
            "sglang": {"installed": "0.5.23", "pinned": "0.5.23", "installable": True, "dflash": True, "ddtree": None}}


def report(tmp_path, group_vars, *extra):
    inventory = {"all": {"children": {"ct200": {
        "hosts": dict((h, {"ansible_connection": "local", "ct200_preflight": row(h, n)}) for h, n in LACKS.items()),
        "vars": group_vars}}}}
    (tmp_path / "inventory.yml").write_text(yaml.safe_dump(inventory))
    out = tmp_path / "preflight.json"
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env["PATH"]
    proc = subprocess.run(
        ["ansible-playbook", "playbooks/preflight.yml", "-i", str(tmp_path / "inventory.yml"),
         "--start-at-task", "Preflight | one table for the fleet", "-e", "ct200_preflight_json=%s" % out, *extra],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    return json.loads(out.read_text()), proc.stdout


@pytest.mark.parametrize("group_vars,extra,seed", [({}, (), "fanout2-a"),
                                                   ({"fanout_seed": "fanout2-b"}, (), "fanout2-b")])
def test_fanout_counts_the_hub_bytes_once_on_the_seed(tmp_path, group_vars, extra, seed):
    data, out = report(tmp_path, group_vars, *extra)
    rows = dict((r["host"], r) for r in data["hosts"])
    assert data["site"] == {"fanout": True, "seed": seed, "hub_bytes": LACKS[seed],
                            "peer_bytes": sum(LACKS.values()) - LACKS[seed]}
    for host, lacks in LACKS.items():
        from_hub = host == seed
        assert (rows[host]["fetch_from"], rows[host]["hub_bytes"], rows[host]["peer_bytes"]) == (
            ("hub", lacks, 0) if from_hub else ("peers", 0, lacks)), host
    assert "%s | " % seed in out and "| 600.0 hub / 2000.0 |" in out
    assert "the seed %s fetches 600.00 GB from the Hub, once for the site" % seed in out


def test_without_fanout_every_host_counts_its_own_hub_bytes(tmp_path):
    data, out = report(tmp_path, {}, "-e", "fanout_enabled=false")
    assert data["site"] == {"fanout": False, "seed": None, "hub_bytes": sum(LACKS.values()), "peer_bytes": 0}
    assert all(r["fetch_from"] == "hub" and r["hub_bytes"] == LACKS[r["host"]] for r in data["hosts"])
    assert "no fan-out: every host fetches from the Hub, 1200.00 GB in all" in out
