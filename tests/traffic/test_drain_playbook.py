# SPDX-License-Identifier: Apache-2.0
"""sglang_service's drain step as Ansible runs it (tasks/instance_traffic.yml, ct200.deploy.traffic_rotation),
on the controller against the real sglang-router and one stand-in on loopback, and with external commands."""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

import traffic_lab as lab
from ansible_collections.ct200.deploy.plugins.module_utils import traffic

REPO = Path(__file__).resolve().parents[2]
PLAY = Path(__file__).parent / "playbooks" / "drain_step.yml"
pytestmark = pytest.mark.skipif(bool(lab.prerequisites()), reason="missing: %s" % ", ".join(lab.prerequisites()))


def play(extra: dict, check=False):
    argv = [str(Path(os.environ.get("VIRTUAL_ENV", REPO / ".venv")) / "bin" / "ansible-playbook"), "-i", "localhost,",
            "-c", "local", str(PLAY), "-e", json.dumps(extra)] + (["--check"] if check else [])
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "ANSIBLE_PYTHON_INTERPRETER": os.sys.executable}
    return subprocess.run(argv, capture_output=True, text=True, timeout=300, env=env, cwd=REPO, check=False)


@pytest.fixture(scope="module")
def lab_router(tmp_path_factory):
    s = lab.StandIn(lab.free_port(), tmp_path_factory.mktemp("model"), completion_seconds=0)
    router = None
    try:
        s.start()
        s.wait_ready()
        router = lab.Router()
        yield router, s
    finally:
        if router:
            router.stop()
        s.stop()


def test_router_mode_puts_back_takes_out_and_is_idempotent(lab_router):
    router, s = lab_router
    client = traffic.RouterClient(router.url)
    base = {"lab_mode": "router", "lab_port": s.port, "lab_router_url": router.url}
    check = play({**base, "lab_state": "in"}, check=True)
    assert check.returncode == 0, check.stdout[-3000:]
    assert client.find(s.url) is None  # check mode changed nothing
    first = play({**base, "lab_state": "in"})
    assert first.returncode == 0, first.stdout[-3000:]
    assert "readiness passed: added" in first.stdout and "changed=1" in first.stdout
    assert client.find(s.url)["is_healthy"]
    again = play({**base, "lab_state": "in"})
    assert again.returncode == 0 and "changed=0" in again.stdout and "already in the router" in again.stdout
    out = play({**base, "lab_state": "out"})
    assert out.returncode == 0, out.stdout[-3000:]
    assert "removed from the router" in out.stdout
    assert client.find(s.url) is None


def test_router_mode_without_a_router_names_the_fix(lab_router):
    s = lab_router[1]
    run = play({"lab_mode": "router", "lab_port": s.port, "lab_state": "out"})
    assert run.returncode != 0
    assert "ct200_router_host" in run.stdout


def test_external_mode_runs_the_sites_argv(lab_router, tmp_path):
    s = lab_router[1]
    record = tmp_path / "lb.log"
    for state in ("out", "in"):
        run = play({"lab_mode": "external", "lab_port": s.port, "lab_state": state, "lab_record": str(record)})
        assert run.returncode == 0, run.stdout[-3000:]
    assert record.read_text().splitlines() == ["out localhost http://127.0.0.1:%d" % s.port,
                                               "in localhost http://127.0.0.1:%d" % s.port]


def test_none_mode_does_nothing(lab_router):
    s = lab_router[1]
    run = play({"lab_mode": "none", "lab_port": s.port, "lab_state": "out"})
    assert run.returncode == 0 and "changed=0" in run.stdout
