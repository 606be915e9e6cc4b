# SPDX-License-Identifier: Apache-2.0
"""ct200.deploy.router without a host: its unit verifies and scores like the SGLang units, its launcher keeps the
API key out of argv while the real sglang-router enforces it, and its role files agree with each other."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import jinja2
import pytest
import yaml

import traffic_lab as lab
from ansible_collections.ct200.deploy.plugins.module_utils import sglang_unit, traffic

REPO = Path(__file__).resolve().parents[2]
ROLE = REPO / "roles" / "router"


def run(argv):
    p = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    return p.returncode, p.stdout, p.stderr


def render_unit(**over):
    defaults = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    values = {**defaults, "ansible_managed": "Ansible managed", **over}
    values["router_venv"] = over.get("router_venv", str(lab.ROUTER_VENV))
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True, trim_blocks=True)
    return env.from_string((ROLE / "templates" / "ct200-router.service.j2").read_text()).render(**values)


needs_analyze = pytest.mark.skipif(not shutil.which("systemd-analyze"), reason="no systemd-analyze")


@needs_analyze
@pytest.mark.parametrize("key", ["", "k"])
def test_unit_verifies_clean(key):
    text = render_unit(router_api_key=key)
    assert ("LoadCredential=api_key:" in text) == bool(key)
    assert "--api-key" not in text and "k\n" not in text.split("LoadCredential")[0][-3:]
    assert sglang_unit.verify_unit(run, "ct200-router.service", text) == []


@needs_analyze
def test_unit_is_hardened_like_the_sglang_units():
    score = sglang_unit.security_score(run, "ct200-router.service", render_unit(router_api_key="k"))
    assert score <= 2.5, score  # measured 1.5 (systemd 252); the SGLang units' bound is 4.5


def test_defaults_and_argument_specs_agree():
    defaults = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    spec = yaml.safe_load((ROLE / "meta" / "argument_specs.yml").read_text())["argument_specs"]["main"]["options"]
    assert set(defaults) == set(spec)
    for name, value in defaults.items():
        assert spec[name]["default"] == value, name
    assert spec["router_policy"]["choices"] == list(traffic.POLICIES)


@pytest.mark.skipif(bool(lab.prerequisites()), reason="no router venv")
def test_launcher_hands_the_key_to_the_router_but_not_to_argv(tmp_path):
    port, prom = lab.free_port(), lab.free_port()
    config = tmp_path / "router.json"
    config.write_text(json.dumps({"argv": traffic.router_argv("127.0.0.1", port, prom)}))
    creds = tmp_path / "creds"
    creds.mkdir()
    (creds / "api_key").write_text("s3cret-router-key\n")
    proc = subprocess.Popen([str(lab.ROUTER_VENV / "bin" / "python"), str(ROLE / "files" / "ct200_router_launch.py"),
                             str(config)], env={**os.environ, "CREDENTIALS_DIRECTORY": str(creds)},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        url = "http://127.0.0.1:%d" % port
        deadline = time.monotonic() + 60
        while lab.http("GET", url + "/health", timeout=2)[0] != 200:
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.3)
        cmdline = Path("/proc/%d/cmdline" % proc.pid).read_bytes()
        assert b"s3cret" not in cmdline
        assert lab.http("GET", url + "/workers")[0] == 401
        with pytest.raises(traffic.TrafficError, match="401"):
            traffic.RouterClient(url, "wrong").workers()
        assert traffic.RouterClient(url, "s3cret-router-key").workers() == []
    finally:
        proc.terminate()
        proc.wait(20)
