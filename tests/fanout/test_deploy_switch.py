# SPDX-License-Identifier: Apache-2.0
"""deploy_kimi uses the site fan-out when the group has more than one host (fanout_enabled switches it),
after access is proven and before the weights play, for the same two repositories."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template

PLAYS = yaml.safe_load((Path(__file__).resolve().parents[2] / "playbooks" / "deploy_kimi.yml").read_text())


def fanout_entry():
    return next(i for i, play in enumerate(PLAYS) if play.get("ansible.builtin.import_playbook") == "fanout_weights.yml")


def test_fanout_runs_after_access_and_before_the_weights_play():
    index = fanout_entry()
    names = [play.get("ansible.builtin.import_playbook") or play.get("name") for play in PLAYS]
    assert names.index("verify_access.yml") < index
    weights = next(i for i, play in enumerate(PLAYS) if any(
        (role.get("role") if isinstance(role, dict) else role) == "ct200.deploy.model_weights"
        for role in play.get("roles", [])))
    assert index < weights
    repos = PLAYS[index]["vars"]["fanout_repos"]
    wanted = PLAYS[weights]["roles"][0]["vars"]["model_weights_repos"]
    assert [(r["repo_id"], r["local_dir"]) for r in repos] == [(r["repo_id"], r["local_dir"]) for r in wanted]


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
    """Every condition of the import must hold; an empty fetch list (nothing to download) skips it."""
    variables = {"groups": {"ct200": hosts}}
    if switch is not None:
        variables["fanout_enabled"] = switch
    if fetch is not None:
        variables["ct200_hub"] = {"fetch": fetch}
    templar = Templar(loader=DataLoader(), variables=variables)
    conditions = PLAYS[fanout_entry()]["when"]
    conditions = conditions if isinstance(conditions, list) else [conditions]
    results = [templar.evaluate_conditional(trust_as_template(c)) for c in conditions]
    assert all(results) is expected
