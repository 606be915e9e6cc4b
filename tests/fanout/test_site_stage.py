# SPDX-License-Identifier: Apache-2.0
"""The model_weights role's own site task (roles/model_weights/tasks/plan.yml) through the real
ct200.deploy.site_plan action on three local hosts: inventory order, the seed, every host's peers
from its weight_peer_listen_address (IPv6 in brackets), and no fan-out when nothing is to be fetched.
No host is contacted (~20 s)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
HOSTS = {"w3": "10.9.0.3", "w1": "fd00::1", "w2": "10.9.0.2"}  # inventory order w3, w1, w2
REPOS = [{"name": "target", "repo_id": "o/t", "local_dir": "/m/o/t"}]


def site_task():
    tasks = yaml.safe_load((REPO / "roles" / "model_weights" / "tasks" / "plan.yml").read_text())
    return next(t for t in tasks if (t.get("ct200.deploy.site_plan") or {}).get("stage") == "site")


def run_site(tmp_path, **role_vars):
    task = dict(site_task())
    out = tmp_path / "site.json"
    play = [{"name": "site", "hosts": "all", "gather_facts": False, "vars": dict({
        "model_weights_repos": REPOS, "model_weights_fanout_degree": 2}, **role_vars), "tasks": [
            task, {"name": "write", "ansible.builtin.copy": {"content": "{{ model_weights_layout | to_json }}",
                                                             "dest": str(out), "mode": "0644"},
                   "run_once": True, "delegate_to": "localhost"}]}]
    (tmp_path / "play.yml").write_text(yaml.safe_dump(play, sort_keys=False))
    inventory = {"all": {"hosts": dict((h, {"ansible_connection": "local", "ansible_python_interpreter": sys.executable,
                                            "weight_peer_listen_address": a}) for h, a in HOSTS.items())}}
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump(inventory, sort_keys=False))
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env["PATH"]
    proc = subprocess.run(["ansible-playbook", str(tmp_path / "play.yml"), "-i", str(tmp_path / "hosts.yml")],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False)
    return proc, (json.loads(out.read_text()) if out.exists() else None)


def test_site_layout_and_peers_in_inventory_order(tmp_path):
    proc, got = run_site(tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert got["layout"] == {"hosts": ["w3", "w1", "w2"], "fanout": True, "seed": "w3", "pinned": False, "degree": 2,
                             "site_hosts": 3, "slice": False, "extra_hub_copies": 0}
    assert got["fan_out"] is True and got["addresses"] == HOSTS
    assert got["peers"]["target"] == [{"name": "w3", "url": "http://10.9.0.3:8790/target"},
                                      {"name": "w1", "url": "http://[fd00::1]:8790/target"},
                                      {"name": "w2", "url": "http://10.9.0.2:8790/target"}]
    assert got["models"] == [{"name": "target", "path": "/m/o/t"}]


def test_the_preflight_layout_is_kept_and_nothing_to_fetch_means_no_fanout(tmp_path):
    preflight = {"hosts": ["w3", "w1", "w2"], "fanout": True, "seed": "w2", "pinned": True, "degree": 1}
    proc, got = run_site(tmp_path, model_weights_site=preflight, model_weights_fetch=[])
    assert proc.returncode == 0, proc.stdout[-3000:]
    whole_site = {"site_hosts": 3, "slice": False, "extra_hub_copies": 0}
    assert got["layout"] == dict(preflight, **whole_site) and got["seed"] == "w2" and got["fan_out"] is False


@pytest.mark.parametrize("role_vars,cause", [({"model_weights_fanout_seed": "w9"}, "fanout_seed 'w9' is not a host of the site"),
                                             ({"model_weights_fanout_degree": 0}, "fanout_degree must be an integer >= 1")])
def test_a_bad_setting_fails_with_its_cause_and_fix(tmp_path, role_vars, cause):
    proc, _out = run_site(tmp_path, **role_vars)
    assert proc.returncode != 0 and cause in proc.stdout, proc.stdout[-3000:]
