# SPDX-License-Identifier: Apache-2.0
"""The preflight report counts the Hub bytes once per site when deploy_kimi.yml fans the weights out:
the seed's bytes come from the Hub, every other host's from its peers (table and JSON).

Runs the report play of playbooks/preflight.yml for real (ansible-playbook --start-at-task, on
localhost only, through the ct200.deploy.site_plan action) over an inventory whose hosts already
carry the results the gather play registers: no host is contacted, no Hub is asked."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from ansible_collections.ct200.deploy.plugins.module_utils.site_plan import site_layout

REPO = Path(__file__).resolve().parents[2]
GB = 10**9
LACKS = {"fanout2-a": 600 * GB, "fanout2-b": 600 * GB, "fanout2-c": 0}  # the third host is complete already
RUNTIME = {"gpu_count": 8, "gpus": [{"name": "RTX", "memory_gib": 96, "numa_node": 0}] * 8, "gpu_numa": [0] * 8,
           "numa_nodes": 1, "driver_version": "580.95.05", "cuda_driver_version": "13.0", "nvcc_version": "12.9",
           "no_gpu_standin": False, "installed_version": "0.5.23", "pinned_version": "0.5.23", "installable": True,
           "source": "index", "dflash": True, "ddtree": None, "failed_checks": []}
HUB = {"commits": {"o/target": "c" * 40}, "listings": {}, "fetch": ["o/target"], "repos": ["o/target"],
       "access": {"auth": {"status": "ok", "user": "u", "fingerprint": "sha256:aaaaaaaaaaaa"},
                  "repos": [{"repo_id": "o/target", "access": "granted"}], "denied": []}, "plan_ready": True}


def registered(bytes_to_fetch, layout):
    """What the gather play leaves on a host that lacks BYTES_TO_FETCH (ct200_site: its first task's layout)."""
    plan = {"results": [{"item": {"repo_id": "o/target"}, "commit": "c" * 40, "bytes_to_download": bytes_to_fetch}]}
    return {"ct200_site": {"layout": layout}, "sglang_runtime_preflight": RUNTIME, "ct200_site_token": {"problem": None}, "ct200_hub": HUB,
            "ct200_hub_token_query": {"fingerprint": "sha256:aaaaaaaaaaaa"}, "ct200_preflight_plan": plan,
            "ct200_preflight_disk": {"filesystems": [{"free_bytes": 2000 * GB}]},
            "ct200_preflight_fit": {"fit": {"pool_tokens": 1000, "context_length": 262144}}}


def report(tmp_path, group_vars, *extra):
    layout = site_layout(list(LACKS), None, group_vars.get("fanout_enabled"), group_vars.get("fanout_seed"))
    inventory = {"all": {"children": {"ct200": {
        "hosts": dict((h, dict(registered(n, layout), ansible_connection="local")) for h, n in LACKS.items()),
        "vars": group_vars}}}}
    (tmp_path / "inventory.yml").write_text(yaml.safe_dump(inventory))
    out = tmp_path / "preflight.json"
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env["PATH"]
    proc = subprocess.run(
        ["ansible-playbook", "playbooks/preflight.yml", "-i", str(tmp_path / "inventory.yml"),
         "--start-at-task", "Preflight | Controller | the fleet report (rows, fan-out, table, JSON)",
         "-e", "ct200_preflight_json=%s" % out, *extra],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    return json.loads(out.read_text()), proc.stdout


@pytest.mark.parametrize("group_vars,extra,seed", [({}, (), "fanout2-a"),
                                                   ({"fanout_seed": "fanout2-b"}, (), "fanout2-b")])
def test_fanout_counts_the_hub_bytes_once_on_the_seed(tmp_path, group_vars, extra, seed):
    data, out = report(tmp_path, group_vars, *extra)
    rows = dict((r["host"], r) for r in data["hosts"])
    assert data["site"] == {"fanout": True, "seed": seed, "hub_bytes": LACKS[seed],
                            "peer_bytes": sum(LACKS.values()) - LACKS[seed], "hosts": 3, "site_hosts": 3,
                            "slice": False, "extra_hub_copies": 0}
    for host, lacks in LACKS.items():
        from_hub = host == seed
        assert (rows[host]["fetch_from"], rows[host]["hub_bytes"], rows[host]["peer_bytes"]) == (
            ("hub", lacks, 0) if from_hub else ("peers", 0, lacks)), host
    assert "%s | " % seed in out and "| 600.0 hub / 2000.0 |" in out
    assert "the seed %s fetches 600.00 GB from the Hub, once for the site" % seed in out


def test_without_fanout_every_host_counts_its_own_hub_bytes(tmp_path):
    data, out = report(tmp_path, {"fanout_enabled": False})
    assert data["site"] == {"fanout": False, "seed": None, "hub_bytes": sum(LACKS.values()), "peer_bytes": 0,
                            "hosts": 3, "site_hosts": 3, "slice": False, "extra_hub_copies": 0}
    assert all(r["fetch_from"] == "hub" and r["hub_bytes"] == LACKS[r["host"]] for r in data["hosts"])
    assert "no fan-out: every host fetches from the Hub, 1200.00 GB in all" in out
