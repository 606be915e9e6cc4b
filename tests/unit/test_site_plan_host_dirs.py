# SPDX-License-Identifier: Apache-2.0
"""The preflight's fetch stage (ct200.deploy.site_plan stage=fetch, run_once) reads each host's own
ct200_models_dir from its host vars, as playbooks/preflight.yml calls it.
The action plugin contacts no host, so two local hosts cost one ansible-playbook run and no module."""

import json
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
PREFLIGHT = yaml.safe_load((REPO / "playbooks" / "preflight.yml").read_text())


def _fetch_task():
    task = next(t for t in PREFLIGHT[0]["tasks"] if (t.get("ct200.deploy.site_plan") or {}).get("stage") == "fetch")
    return dict(task["ct200.deploy.site_plan"])


def _run(tmp_path, hosts):
    args = dict(_fetch_task(), fingerprint="sha256:x", commits={"o/t": "c" * 40}, repos=["o/t"],
                layout={"fanout": False, "hosts": sorted(hosts), "seed": None})
    play = [{"hosts": "ct200", "gather_facts": False, "tasks": [
        {"ct200.deploy.site_plan": args, "run_once": True, "register": "fetch"},
        {"ansible.builtin.copy": {"content": "{{ fetch.hosts | to_json }}", "dest": str(tmp_path / "out.json")},
         "delegate_to": "localhost", "run_once": True}]}]
    (tmp_path / "play.yml").write_text(yaml.safe_dump(play))
    inventory = {"ct200": {"hosts": dict((h, dict(v, ansible_connection="local", ansible_python_interpreter=sys.executable,
                                                  ct200_hub_probe={"results": []})) for h, v in hosts.items())}}
    (tmp_path / "inv.yml").write_text(yaml.safe_dump(inventory))
    return subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), str(tmp_path / "play.yml"),
                           "-i", str(tmp_path / "inv.yml")], cwd=REPO, capture_output=True, text=True, timeout=120,
                          env={"PATH": "/usr/bin:/bin", "ANSIBLE_CONFIG": str(REPO / "ansible.cfg")}, check=False)


def test_the_fetch_stage_takes_each_hosts_own_dirs(tmp_path):
    proc = _run(tmp_path, {"h1": {"ct200_models_dir": "/srv/a/models"}, "h2": {"ct200_models_dir": "/srv/b/models"}})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    hosts = json.loads((tmp_path / "out.json").read_text())
    # without fan-out each host fetches the configs into its own snapshot, not into the first host's
    assert hosts["h1"]["config_dirs"] == {"o/t": "/srv/a/models/o/t/snapshots/" + "c" * 40}
    assert hosts["h2"]["config_dirs"] == {"o/t": "/srv/b/models/o/t/snapshots/" + "c" * 40}
    assert hosts["h2"]["config_fetch"] == ["o/t"] and hosts["h2"]["fit_host"] == "h2"


def test_a_host_without_a_models_dir_is_named_with_the_fix(tmp_path):
    proc = _run(tmp_path, {"h1": {"ct200_models_dir": "/srv/a/models"}, "h2": {"ct200_models_dir": "models"}})
    assert proc.returncode != 0
    assert "h2: ct200_models_dir is 'models', not an absolute path; fix: set ct200_models_dir" in proc.stdout
