# SPDX-License-Identifier: Apache-2.0
"""Every tag of deploy_kimi.yml runs alone on the served sandbox host: the phase tags (the preflight
carries them all) and every role sub-tag that `--list-tags` shows, each on its own. On a served host
each one is a no-op (changed=0, failed=0): a sub-tag alone computes the same unit, token file and
weights as the whole deploy, or it would change them. The first full run on the bare host installs
the runtime and serves; `--tags preflight` alone touches nothing after the preflight (regression: it
crashed on 'model_weights_plan'). The refusals of the sub-tags that cannot work alone are proven in
test_role_failures.py (hf_token_configure never installs an unvalidated token, sglang_service_run
without its unit). Cost: one deploy_kimi.yml run per listed tag, about 25 runs (the phase tags were
7 runs, 119 s on a quiet machine); the sub-tags skip the fleet preflight."""

import os
import re
import subprocess
import sys

import pytest

from test_deploy_preflight import REPO, SERVED_PORT, deploy, off_spec

pytestmark = pytest.mark.slow
PHASES = ["preflight", "sglang_runtime", "hf_token", "hf_gated_access", "model_weights", "sglang_service"]


def listed_tags():
    """Every tag `ansible-playbook deploy_kimi.yml --list-tags` names (play and task tags)."""
    # the production inventory: the tags do not depend on the hosts, and it needs no sandbox up
    out = subprocess.run([os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "deploy_kimi.yml",
                          "-i", "inventories/ct200", "--list-tags"],
                         cwd=REPO, capture_output=True, text=True, timeout=120, check=True).stdout
    tags = set()
    for group in re.findall(r"TAGS: \[([^\]]*)\]", out):
        tags.update(t.strip() for t in group.split(",") if t.strip())
    return tags


def test_listed_tags_are_phases_or_prefixed_by_their_role():
    roles = {p.name for p in (REPO / "roles").iterdir() if (p / "tasks").is_dir()}
    tags = listed_tags()
    assert set(PHASES) <= tags
    unprefixed = sorted(t for t in tags - set(PHASES) - roles - {"always", "fanout"}
                        if not any(t.startswith(role + "_") for role in roles))
    assert not unprefixed, "sub-tags without their role's prefix: %s" % unprefixed


def assert_noop(tag, rc, out):
    assert rc == 0, (tag, out[-3000:])
    recap = out.split("PLAY RECAP")[-1]
    assert "failed=0" in recap and "changed=0" in recap, (tag, recap)


def test_each_tag_runs_alone(served_host, local_hub, tmp_path):
    state, scenario = served_host
    assert "Install | pip install SGLang 0.5.23" in scenario["converge"]
    assert "/v1/chat/completions answered in" in scenario["converge"]
    # Back to the inventory's spec when another test reconfigured the shared host. This test runs first
    # on it (tests/conftest.py: RUN_FIRST), so it usually starts from the Molecule converge's spec.
    if off_spec(state).exists():
        rc, out = deploy(state, local_hub, tmp_path, *SERVED_PORT)
        assert rc == 0, out[-4000:]
        off_spec(state).unlink()
    for tag in PHASES:
        rc, out = deploy(state, local_hub, tmp_path, "--tags", tag, *SERVED_PORT)
        assert_noop(tag, rc, out)
        assert "Preflight | one table for the fleet" in out, tag
        if tag == "preflight":
            assert "Run | start kimi" not in out and "Download |" not in out
    failures = []
    for tag in sorted(listed_tags() - set(PHASES)):
        rc, out = deploy(state, local_hub, tmp_path, "--tags", tag, *SERVED_PORT)
        try:
            assert_noop(tag, rc, out)
        except AssertionError as exc:  # walk them all: one run names every tag that does not work alone
            failures.append(exc.args[0])
    assert not failures, failures
