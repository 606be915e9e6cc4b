# SPDX-License-Identifier: Apache-2.0
"""The monitoring role's rules and configuration, checked by Debian's promtool (the package the role installs):
`promtool check rules`, `promtool check config`, and `promtool test rules` on recorded series (a drafter collapse,
a slow decay, down, KV full, a growing queue, a stalled scheduler)."""
import os
import shutil
import subprocess

import pytest

import prometheus_bin
from ansible_collections.ct200.deploy.plugins.module_utils import monitoring

HERE = os.path.dirname(os.path.abspath(__file__))


def inventory_files():
    """The target and floor files of a three-host inventory: b/kimi has its own floor 2.5."""
    spec = {"speculative": {"algorithm": "dflash"}, "port": 30000, "host": "0.0.0.0",
            "served_model_name": "kimi-k2.6"}
    hosts = {}
    for host in ("a", "b", "c"):
        item = dict(spec, name="kimi", min_accept_length=2.5 if host == "b" else None)
        hosts[host] = (host + ".site", monitoring.instance_endpoints(host, host + ".site", [item]))
    return monitoring.monitoring_files(hosts, "mon", router={"host": "a", "address": "a.site", "port": 29000},
                                       host_exporter_port=9100)


def promtool(*argv, cwd=None):
    return subprocess.run([prometheus_bin.binary("promtool")] + list(argv), capture_output=True, text=True,
                          timeout=120, cwd=cwd, check=False)


@pytest.fixture()
def rendered(tmp_path):
    """The role's files as the role writes them, under tmp_path (config dir layout of the role)."""
    (tmp_path / "rules").mkdir()
    (tmp_path / "targets").mkdir()
    (tmp_path / "rules" / "ct200.rules.yml").write_text(prometheus_bin.render("ct200.rules.yml.j2"))
    for name, text in inventory_files().items():
        (tmp_path / ("rules" if name.endswith(".rules.yml") else "targets") / name).write_text(text)
    (tmp_path / "prometheus.yml").write_text(prometheus_bin.render("prometheus.yml.j2",
                                                                   monitoring_config_dir=str(tmp_path)))
    return tmp_path


def test_promtool_checks_rules_and_config(rendered):
    result = promtool("check", "rules", str(rendered / "rules" / "ct200.rules.yml"),
                      str(rendered / "rules" / "floors.rules.yml"))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS: 14 rules found" in result.stdout  # 6 recording rules + 8 alerts
    assert "SUCCESS: 3 rules found" in result.stdout  # one floor per speculative instance
    result = promtool("check", "config", str(rendered / "prometheus.yml"))
    assert result.returncode == 0, result.stdout + result.stderr


def test_promtool_rejects_a_broken_rule(rendered):
    """The check is not a rubber stamp: a typo in an expression fails it (as `validate=` then keeps the old file)."""
    path = rendered / "rules" / "ct200.rules.yml"
    path.write_text(path.read_text().replace("up{job=\"sglang\"} == 0", "up{job=\"sglang\" == 0"))
    result = promtool("check", "rules", str(path))
    assert result.returncode != 0


def test_promtool_rule_tests(rendered):
    shutil.copy(os.path.join(HERE, "rules_test.yml"), rendered / "rules")
    result = promtool("test", "rules", "rules_test.yml", cwd=str(rendered / "rules"))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout + result.stderr


def test_rule_tests_fail_when_the_floor_is_ignored(rendered):
    """Drop b's own floor (2.5 -> the default 2.0): the slow decay then alerts later and the test fails."""
    floors = rendered / "rules" / "floors.rules.yml"
    floors.write_text(floors.read_text().replace("vector(2.5)", "vector(2)"))
    shutil.copy(os.path.join(HERE, "rules_test.yml"), rendered / "rules")
    result = promtool("test", "rules", "rules_test.yml", cwd=str(rendered / "rules"))
    assert result.returncode != 0
    assert "CT200AcceptLengthLow" in result.stdout + result.stderr
