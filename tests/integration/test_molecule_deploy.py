# SPDX-License-Identifier: Apache-2.0
"""Molecule `deploy` scenario (the whole deploy_kimi.yml on a bare sandbox host, idempotence on):
the runtime is installed through the role, the host serves and answers a completion, the second
converge changes nothing and verify finds the unit active and enabled on the installed SGLang.
The scenario runs once, in the served_host fixture (tests/integration/conftest.py)."""

import json

import pytest

from test_deploy_preflight import REPO

pytestmark = pytest.mark.slow


def test_deploy_scenario_serves_a_bare_host_and_is_idempotent(served_host):
    scenario = served_host[1]
    converge = scenario["converge"]
    assert "Preflight | one table for the fleet" in converge
    assert "Install | pip install SGLang 0.5.23" in converge
    assert "/v1/chat/completions answered in" in converge
    recap = converge.split("PLAY RECAP")[-1]
    assert "changed=0" not in recap.split("rt-deploy-1", 1)[1].split("\n", 1)[0], recap
    for step in ("converge", "idempotence", "verify"):
        assert "[deploy > %s] Executed: Successful" % step in scenario[step], (step, scenario[step][-3000:])
    assert "Assert the host serves from the installed runtime" in scenario["verify"]
    # the preflight's report lands in the scenario's directory, never in the checkout
    report = json.loads((served_host[0].parent / "preflight.json").read_text())
    assert report["ok"] is True and [h["host"] for h in report["hosts"]] == ["rt-deploy-1"]
    assert not (REPO / "ct200-preflight.json").exists()
