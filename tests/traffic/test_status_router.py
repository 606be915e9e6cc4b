# SPDX-License-Identifier: Apache-2.0
"""`ct200 status`'s ROUTER column against the real sglang-router (0.3.2) on loopback in front of two stand-ins:
the router's own worker list decides (one instance put in rotation by the product's drain step, one not), and
with ct200_traffic external the column says so without asking any router."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

import traffic_lab as lab
from ansible_collections.ct200.deploy.plugins.module_utils import traffic

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(bool(lab.prerequisites()), reason="missing: %s" % ", ".join(lab.prerequisites()))


def ct200_status(inv, summary):
    env = {k: v for k, v in os.environ.items() if k not in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
    return subprocess.run([sys.executable, "-m", "ct200_fleet", "status", "-i", str(inv), "--json", str(summary)],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False)


def _table(out):
    """{host: {column: cell}} of the instance table (the one with an INSTANCE column)."""
    start = [m.start() for m in re.finditer(r"(?m)^HOST +INSTANCE ", out)]
    assert start, out
    table = out[start[0]:]
    header = table.splitlines()[0].split()
    return {line.split()[0]: dict(zip(header, line.split())) for line in table.splitlines()[1:]
            if line.startswith("st-")}


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("status-router")
    standins = [lab.StandIn(lab.free_port(), tmp / name, completion_seconds=0) for name in ("st-in", "st-out")]
    router = None
    try:
        for s in standins:
            Path(s.model_dir).mkdir()
            s.start()
        for s in standins:
            s.wait_ready()
        router = lab.Router()
        assert traffic.step("router", "in", standins[0].url, router=traffic.RouterClient(router.url))["action"] == "add"
        hosts = {}
        for name, s in zip(("st-in", "st-out"), standins):
            releases = tmp / name / "releases"
            releases.mkdir(parents=True)
            hosts[name] = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable,
                           "ct200_download_user": "nobody", "sglang_release_dir": str(releases),
                           "sglang_service_instances": [{"name": "lab", "port": s.port, "host": "127.0.0.1",
                                                         "served_model_name": lab.MODEL}]}
        yield tmp, hosts, router, standins
    finally:
        if router:
            router.stop()
        for s in standins:
            s.stop()


def test_the_router_column_is_the_routers_worker_list(fleet):
    tmp, hosts, router, standins = fleet
    inv = tmp / "router.yml"
    inv.write_text(yaml.safe_dump({"ct200": {"hosts": hosts, "vars": {
        "ct200_traffic": "router", "ct200_router_host": "st-in", "ct200_router_port": router.port,
        "ct200_traffic_shared_loopback": True}}}))
    summary = tmp / "router.json"
    proc = ct200_status(inv, summary)
    out = proc.stdout + proc.stderr
    rows = _table(out)
    assert rows["st-in"]["ROUTER"] == "yes", out
    assert rows["st-out"]["ROUTER"] == "no", out
    assert "ROUTER http://st-in:%d on st-in: 1 worker(s) in rotation of 1 listed" % router.port in out, out
    data = {r["host"]: r for r in json.loads(summary.read_text())["instances"]}
    assert data["st-in"]["in_rotation"] is True and data["st-out"]["in_rotation"] is False
    assert "healthy but out of rotation" in data["st-out"]["verdict"] and data["st-in"]["verdict"] == []
    assert proc.returncode == 1  # an instance that serves but gets no traffic breaks a rule
    # the router's view changes with the drain step, and so does the column
    traffic.step("router", "out", standins[0].url, router=traffic.RouterClient(router.url))
    again = ct200_status(inv, tmp / "router-2.json")
    assert _table(again.stdout)["st-in"]["ROUTER"] == "no", again.stdout


def test_external_traffic_is_named_and_no_router_is_asked(fleet):
    tmp, hosts, _router, _standins = fleet
    inv = tmp / "external.yml"
    inv.write_text(yaml.safe_dump({"ct200": {"hosts": hosts, "vars": {"ct200_traffic": "external"}}}))
    proc = ct200_status(inv, tmp / "external.json")
    out = proc.stdout + proc.stderr
    rows = _table(out)
    assert rows["st-in"]["ROUTER"] == "external" and rows["st-out"]["ROUTER"] == "external", out
    assert "ct200_traffic is external" in out
    assert proc.returncode == 0, out
