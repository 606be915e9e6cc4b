# SPDX-License-Identifier: Apache-2.0
"""The model_weights role's sub-tags carry its prefix and each runs alone: `--tags model_weights_download`
plans first (the download reads the plan; it used to read a variable only the plan task set), and
`--tags model_weights_plan` moves no byte. Read from ansible-playbook --list-tasks of deploy_kimi.yml
(no host is contacted), ~15 s."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
ROLE = "ct200.deploy.model_weights : "


def listed(tag):
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_INVENTORY_UNPARSED_FAILED="false")
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env["PATH"]
    proc = subprocess.run(["ansible-playbook", "deploy_kimi.yml", "-i", "inventories/ct200", "--list-tasks", "--tags", tag],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    tasks = [line.strip().split("\tTAGS: ")[0] for line in proc.stdout.splitlines() if "\tTAGS: " in line]
    return [t[len(ROLE):] for t in tasks if t.startswith(ROLE)], tasks


@pytest.mark.parametrize("tag", ["model_weights_download", "model_weights_plan"])
def test_each_sub_tag_runs_alone_with_what_it_needs(tag):
    role_tasks, every = listed(tag)
    assert any(t.startswith("Preflight | ") for t in every), "the site preflight (host order, seed) must run first"
    plan = [t for t in role_tasks if t.startswith("Plan | ")]
    download = [t for t in role_tasks if t.startswith("Download | ")]
    assert len(plan) >= 5, role_tasks
    if tag == "model_weights_download":
        assert any("wait, printing one progress line" in t for t in download), role_tasks
    else:
        assert download == [], download
    assert "Result | commits and directories for the next roles" in role_tasks


def test_every_task_of_the_role_carries_a_prefixed_tag():
    import yaml

    for path in (REPO / "roles" / "model_weights" / "tasks").glob("*.yml"):
        for task in yaml.safe_load(path.read_text()):
            tags = task.get("tags") or []
            if path.name == "main.yml":
                assert "model_weights" in tags and all(t in ("model_weights", "always", "preflight")
                                                       or t.startswith("model_weights_") for t in tags), task["name"]
            else:  # imported with its tags (plan.yml, download.yml) or included with apply (serve.yml)
                assert all(t.startswith("model_weights") for t in tags), task["name"]
