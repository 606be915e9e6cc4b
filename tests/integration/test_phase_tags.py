# SPDX-License-Identifier: Apache-2.0
"""Every phase tag of deploy_kimi.yml runs alone on a sandbox host (the preflight carries them
all), and the first full run on the bare host installs the runtime and serves; `--tags preflight`
alone touches nothing after the preflight (regression: it crashed on 'model_weights_plan')."""

import pytest

from test_deploy_preflight import SERVED_PORT, deploy

pytestmark = pytest.mark.slow
PHASES = ["preflight", "sglang_runtime", "hf_token", "hf_gated_access", "model_weights", "sglang_service"]


def test_each_phase_tag_runs_alone(served_host, local_hub, tmp_path):
    state, scenario = served_host
    assert "Install | pip install SGLang 0.5.23" in scenario["converge"]
    assert "/v1/chat/completions answered in" in scenario["converge"]
    # back to the inventory's spec (another test may have reconfigured the shared host)
    rc, out = deploy(state, local_hub, tmp_path, *SERVED_PORT)
    assert rc == 0, out[-4000:]
    for tag in PHASES:
        rc, out = deploy(state, local_hub, tmp_path, "--tags", tag, *SERVED_PORT)
        assert rc == 0, (tag, out[-3000:])
        assert "Preflight | one table for the fleet" in out, tag
        recap = out.split("PLAY RECAP")[-1]
        assert "changed=0" in recap and "failed=0" in recap, (tag, recap)
        if tag == "preflight":
            assert "Run | start kimi" not in out and "Download |" not in out
