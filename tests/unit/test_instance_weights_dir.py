# SPDX-License-Identifier: Apache-2.0
"""The weights directory an instance serves (playbooks/vars/kimi_instance.yml's ct200_target_dir/ct200_draft_dir):
decided in site_plan.instance_dir, used through the filter ct200.deploy.instance_weights_dir."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from ansible_collections.ct200.deploy.plugins.filter.site import FilterModule
from ansible_collections.ct200.deploy.plugins.module_utils.site_plan import instance_dir

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
C1 = "c" * 40


def test_the_weights_roles_result_wins_then_the_resolved_snapshot_then_a_named_gap():
    staged = {"target": "/m/org/t/snapshots/" + "a" * 40}
    assert instance_dir(staged, "target", "/m", "org/t", {"org/t": C1}) == staged["target"]
    assert instance_dir(staged, "drafter", "/m/", "org/d", {"org/d": C1}) == "/m/org/d/snapshots/" + C1
    assert instance_dir({"target": ""}, "target", "/m", "org/t", {}) == "/m/org/t/snapshots/unresolved-commit"
    assert instance_dir(None, "target", "/m", "org/t", None) == "/m/org/t/snapshots/unresolved-commit"
    assert FilterModule().filters()["instance_weights_dir"]({}, "target", "/m", "org/t", {"org/t": C1}).endswith(C1)


def test_the_vars_file_renders_through_the_filter():
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_STDOUT_CALLBACK="json", ANSIBLE_LOAD_CALLBACK_PLUGINS="1", ANSIBLE_INVENTORY_UNPARSED_FAILED="false")
    extra = json.dumps({"ct200_models_dir": "/models", "ct200_target_repo": "org/t", "ct200_draft_repo": "org/d",
                        "ct200_sglang_port": 30000, "ct200_hub": {"commits": {"org/t": C1}},
                        "model_weights_dirs": {"drafter": "/models/org/d/snapshots/" + "d" * 40}})
    res = subprocess.run([os.path.join(os.path.dirname(sys.executable), "ansible"), "localhost", "-c", "local",
                          "-i", "localhost,", "-m", "ansible.builtin.debug", "-a", "msg={{ [ct200_target_dir, ct200_draft_dir] }}",
                          "-e", "@" + os.path.join(REPO, "playbooks", "vars", "kimi_instance.yml"), "-e", extra],
                         cwd=REPO, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert res.returncode == 0, res.stdout + res.stderr
    msg = json.loads(res.stdout)["plays"][0]["tasks"][0]["hosts"]["localhost"]["msg"]
    assert msg == ["/models/org/t/snapshots/" + C1, "/models/org/d/snapshots/" + "d" * 40]
