# SPDX-License-Identifier: Apache-2.0
"""sglang_service's instance options and run facts (plugins/module_utils/sglang_instance.py), the Python that
replaced the role's ``combine`` chains in task vars: the same merge order and the same decisions."""
from __future__ import annotations

import pytest

from ansible_collections.ct200.deploy.plugins.filter.sglang import FilterModule
from ansible_collections.ct200.deploy.plugins.module_utils import sglang_instance as si

FILTERS = FilterModule().filters()


def test_options_merge_base_then_set_optionals_then_defaults_then_the_item():
    merged = si.options({"name": "kimi", "port": 30001}, {"port": 30000, "stop_timeout": 90},
                        {"state": "started", "unit_dir": "/etc/systemd/system", "stop_timeout": 30},
                        {"launcher": "", "gpu_count": 8, "gpu_numa_nodes": [], "numa": None})
    assert merged == {"name": "kimi", "port": 30001, "stop_timeout": 90, "state": "started",
                      "unit_dir": "/etc/systemd/system", "gpu_count": 8}


def test_options_keep_a_zero_and_false_optional_and_do_not_merge_nested_keys():
    merged = si.options({"speculative": {"algorithm": "dflash"}}, {"speculative": {"draft_attention_backend": "x"}},
                        optional={"gpu_count": 0, "flag": False})
    assert merged == {"speculative": {"algorithm": "dflash"}, "gpu_count": 0, "flag": False}
    assert si.options({"name": "a"}) == {"name": "a"}


@pytest.mark.parametrize("listen,address", [
    ("127.0.0.1", "127.0.0.1"), ("0.0.0.0", "127.0.0.1"), ("", "127.0.0.1"), (None, "127.0.0.1"),
    ("::", "[::1]"), ("::1", "[::1]"), ("fd00::5", "[fd00::5]"), ("10.0.0.7", "10.0.0.7"),
])
def test_client_address(listen, address):
    assert si.client_address(listen) == address


def test_run_facts_of_a_loopback_dflash_instance():
    facts = si.run_facts({"name": "kimi", "state": "started", "port": 30001, "tp": 8, "target": "/m/t",
                          "speculative": {"algorithm": "dflash"}, "unit_dir": "/etc/systemd/system"},
                         "/var/lib/ct200-sglang")
    assert facts == {"state": "started", "unit": "sglang@kimi.service", "unit_dir": "/etc/systemd/system",
                     "base_url": "http://127.0.0.1:30001", "health_path": "/health_generate",
                     "served_model_name": "/m/t", "api_key": False, "health_timeout": 2400, "tp": 8,
                     "algorithm": "dflash", "speculative": True, "min_accept_length": 1.0,
                     "owed_flag": "/var/lib/ct200-sglang/kimi.restart-owed"}


def test_run_facts_beyond_loopback_want_an_api_key_unless_the_instance_says_no():
    beyond = {"name": "a", "host": "10.0.0.7", "served_model_name": "m"}
    assert si.run_facts(beyond, "/s")["api_key"] is True
    assert si.run_facts(dict(beyond, api_key="no"), "/s")["api_key"] is False
    assert si.run_facts({"name": "a", "api_key": "yes"}, "/s")["api_key"] is True
    assert si.run_facts(beyond, "/s")["base_url"] == "http://10.0.0.7:30000"


@pytest.mark.parametrize("role,start,budget", [(None, 600, 600), (None, None, 2), (30, 600, 30), ("45", 600, 45),
                                               (0, 600, 2), ("", 90, 90)])
def test_health_budget(role, start, budget):
    instance = {"name": "a"} if start is None else {"name": "a", "start_timeout": start}
    if start is None:
        instance["start_timeout"] = 1
    assert si.run_facts(instance, "/s", role)["health_timeout"] == budget


def test_no_speculation_without_a_known_algorithm():
    facts = si.run_facts({"name": "a", "speculative": {"algorithm": "eagle"}}, "/s")
    assert (facts["algorithm"], facts["speculative"]) == ("eagle", False)
    assert si.run_facts({"name": "a", "speculative": None}, "/s")["algorithm"] == "none"


def test_the_filters_are_the_module_utils_functions():
    merged = FILTERS["sglang_instance_options"]({"name": "k"}, {"tp": 2}, {"state": "stopped"})
    assert merged == {"name": "k", "tp": 2, "state": "stopped"}
    assert FILTERS["sglang_run_facts"](merged, "/s", 5)["health_timeout"] == 5


def test_other_instances_leave_out_the_planned_one_and_take_the_defaults():
    instances = [{"name": "kimi", "port": 30000, "gpus": [0, 1]},
                 {"name": "small", "gpus": [2], "nccl_port": 29600},
                 {"name": "spare"}]
    got = FILTERS["sglang_other_instances"](instances, {"port": 31000, "tp": 2}, "kimi")
    assert got == [{"name": "small", "port": 31000, "nccl_port": 29600, "gpus": [2]},
                   {"name": "spare", "port": 31000, "nccl_port": None, "gpus": []}]
    assert si.others(instances, None, "spare")[0] == {"name": "kimi", "port": 30000, "nccl_port": None,
                                                      "gpus": [0, 1]}
