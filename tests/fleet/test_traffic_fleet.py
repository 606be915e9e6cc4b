# SPDX-License-Identifier: Apache-2.0
"""The router in front of the served 8-host SSH fleet (issue 14): deploy_kimi.yml with ct200_traffic router
(sglang-router on the first host, the instances on their addresses with an API key), then a steady stream of
chat completions through the router while playbooks/restart.yml restarts every host (serial 1), drained; and
the same restart without the drain (sglang_service_traffic=none) as the control, in the same session.

Also what benchmarks/traffic/bench_availability.py --fleet ssh reports: with CT200_TRAFFIC_BENCH_JSON set,
the figures are written there. The fleet is put back as served_fleet left it (instances on loopback, no key)
at the end; the router stays installed but unused.
"""
from __future__ import annotations

import json
import os
import secrets
import time
from pathlib import Path

import pytest

import traffic_lab as lab
from ansible_collections.ct200.deploy.plugins.module_utils import traffic

REPO = Path(__file__).resolve().parents[2]
RESTART = REPO / "playbooks" / "restart.yml"
ROLLOUT = REPO / "playbooks" / "rollout.yml"
DRAFTER = "z-lab/Kimi-K2.6-DFlash"
DEPLOY = REPO / "playbooks" / "deploy_kimi.yml"
MODEL = "kimi-k2.6"
ROUTER_PORT = 30080


def arm(served, env, key, router_url, urls, drain, baseline=10.0, playbook=RESTART, args=None):
    client = traffic.RouterClient(router_url, key)
    load = lab.Load(router_url, concurrency=6, pause=0.05, model=MODEL, api_key=key).start()
    time.sleep(baseline)
    monitor = lab.RotationMonitor(client, urls, interval=0.2).start()
    t0 = time.time()
    if args is None:
        args = () if drain else ("-e", "sglang_service_traffic=none")
    run = served.run_playbook(playbook, env=env, args=args, timeout=1500)
    t1 = time.time()
    time.sleep(5)
    monitor.stop()
    load.stop()
    assert run.rc == 0, run.out[-6000:]
    return lab.summarize(load.results, t0, t1, monitor, drain)


@pytest.fixture(scope="module")
def routed(served_fleet, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("traffic-fleet")
    keyfile = tmp / "api_key"
    key = secrets.token_urlsafe(24)
    keyfile.write_text(key + "\n")
    keyfile.chmod(0o600)
    env = {"CT200_SANDBOX_TRAFFIC": "router", "CT200_SGLANG_API_KEY_FILE": str(keyfile)}
    try:
        t0 = time.monotonic()
        run = served_fleet.run_playbook(DEPLOY, env=env, args=("--tags", "router,sglang_service"), timeout=1800)
        assert run.rc == 0, run.out[-8000:]
        deploy_s = time.monotonic() - t0
        hosts = served_fleet.hosts
        router_url = "http://%s:%d" % (served_fleet.session.addresses[hosts[0]], ROUTER_PORT)
        urls = ["http://%s:%d" % (served_fleet.session.addresses[h], served_fleet.port(h)) for h in hosts]
        yield {"served": served_fleet, "env": env, "key": key, "router_url": router_url, "urls": urls, "run": run,
               "deploy_seconds": deploy_s}
    finally:
        back = served_fleet.run_playbook(DEPLOY, args=("--tags", "sglang_service"), timeout=1800)
        assert back.rc == 0, back.out[-4000:]


def test_the_router_serves_the_fleet(routed):
    got = traffic.rotation(routed["router_url"], routed["urls"], routed["key"])
    assert got["reachable"], got["error"]
    assert all(v["in_rotation"] for v in got["instances"].values()), got
    status, _body = lab.chat(routed["router_url"], model=MODEL, api_key=routed["key"])
    assert status == 200
    assert "Client entry point: http://" in routed["run"].out


def test_rolling_restart_drained_vs_not(routed):
    r = routed
    drained = arm(r["served"], r["env"], r["key"], r["router_url"], r["urls"], True)
    control = arm(r["served"], r["env"], r["key"], r["router_url"], r["urls"], False)
    out = {"benchmark": "availability", "mode": "ssh-fleet", "hosts": len(r["urls"]), "router": "sglang-router 0.3.2",
           "routed_deploy_seconds": round(r["deploy_seconds"], 1),
           **{k: drained[k] for k in ("requests", "failed_requests", "served_fraction",
                                      "p99_latency_ratio_during_over_before", "max_hosts_out_of_rotation")},
           "goal_served_fraction": 0.999, "arms": {"drain": drained, "no_drain": control}}
    if os.environ.get("CT200_TRAFFIC_BENCH_JSON"):
        Path(os.environ["CT200_TRAFFIC_BENCH_JSON"]).write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps(out, indent=2))
    assert drained["served_fraction"] >= 0.999, drained
    assert drained["max_hosts_out_of_rotation"] <= 1, drained
    # after the rolling restart every instance is back
    got = traffic.rotation(r["router_url"], r["urls"], r["key"])
    assert all(v["in_rotation"] for v in got["instances"].values()), got


def test_a_rollout_through_the_router_is_drained(routed):
    """ct200 rollout (playbooks/rollout.yml, batches [1, 25%]) of a drafter revision under the same load: every
    restart drains through the router as restart.yml's does, so no request fails and at most a batch is out."""
    r = routed
    served = r["served"]
    note = "drafter for the routed rollout"
    files = {"README.md": ("# Kimi-K2.6-DFlash (ct200 local Hub stand-in)\n\nrevision: %s\n" % note).encode(),
             "standin.json": json.dumps({"decode_tok_s": 40.0, "accept_length": 3.5}).encode()}
    served.session.hub.commit(DRAFTER, files, note)
    rolled = arm(served, r["env"], r["key"], r["router_url"], r["urls"], True, playbook=ROLLOUT,
                 args=("-e", json.dumps({"ct200_rollout_serial": [1, "25%"]})))
    path = os.environ.get("CT200_TRAFFIC_BENCH_JSON")
    if path and Path(path).exists():
        out = json.loads(Path(path).read_text())
        out["arms"]["rollout"] = rolled
        Path(path).write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps({"rollout": rolled}, indent=2))
    assert rolled["served_fraction"] >= 0.999, rolled
    assert rolled["max_hosts_out_of_rotation"] <= max(1, len(r["urls"]) // 4), rolled
    got = traffic.rotation(r["router_url"], r["urls"], r["key"])
    assert all(v["in_rotation"] for v in got["instances"].values()), got
