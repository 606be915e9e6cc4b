# SPDX-License-Identifier: Apache-2.0
"""deploy_kimi fans the weights out when the group has more than one host (fanout_enabled switches it) and
something is to be fetched: one weights path, the model_weights role, reading the layout the preflight
decided (ct200_site) and its fetch list (ct200_hub.fetch); the switch itself is site_plan's."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from ansible_collections.ct200.deploy.plugins.module_utils.site_plan import fans_out_now, site_layout

REPO = Path(__file__).resolve().parents[2]
PLAYS = yaml.safe_load((REPO / "playbooks" / "deploy_kimi.yml").read_text())


def weights_play():
    return next(play for play in PLAYS if any(
        (role.get("role") if isinstance(role, dict) else role) == "ct200.deploy.model_weights"
        for role in play.get("roles", [])))


def test_one_weights_path_after_access_reading_the_preflight_decisions():
    names = [play.get("ansible.builtin.import_playbook") or play.get("name") for play in PLAYS]
    assert "fanout_weights.yml" not in names
    assert names.index("verify_access.yml") < names.index(weights_play()["name"])
    role_vars = weights_play()["roles"][0]["vars"]
    assert "ct200_site.layout" in role_vars["model_weights_site"]
    assert "ct200_hub.fetch" in role_vars["model_weights_fetch"]
    preflight = yaml.safe_load((REPO / "playbooks" / "preflight.yml").read_text())[0]["tasks"]
    site = next(t for t in preflight if (t.get("ct200.deploy.site_plan") or {}).get("stage") == "site")
    assert site["register"] == "ct200_site" and site["run_once"] is True
    assert "fanout_enabled" in site["ct200.deploy.site_plan"]["enabled"]
    assert "fanout_seed" in site["ct200.deploy.site_plan"]["seed"]


@pytest.mark.parametrize("hosts,switch,fetch,expected", [
    (["a"], None, None, False),
    (["a", "b"], None, None, True),
    (["a", "b"], False, None, False),
    (["a", "b"], "false", None, False),
    (["a"], True, None, True),
    (["a", "b"], None, ["moonshotai/Kimi-K2.6"], True),
    (["a", "b"], None, [], False),
])
def test_fanout_switch(hosts, switch, fetch, expected):
    """Fan out when enabled (default: more than one host) and something is to be fetched (unknown: yes)."""
    assert fans_out_now(site_layout(hosts, None, switch), fetch) is expected
