# SPDX-License-Identifier: Apache-2.0
"""/health_generate as the monitoring role watches it: Debian's prometheus-blackbox-exporter (the package the role
installs) with the role's blackbox.yml, and Debian's Prometheus with the role's prometheus.yml and rules, on
loopback, in front of two SGLang stand-ins: one healthy, one whose /health_generate never answers 200
(standin.json never_ready) while its /metrics still answers. CT200HealthGenerateFailing fires for that one only."""
from __future__ import annotations

import json
import urllib.request

import pytest

import prometheus_bin
from prometheus_bin import wait
import traffic_lab as lab

pytestmark = pytest.mark.skipif(not lab.PARSE_VENV.joinpath("bin", "python").exists(),
                                reason="missing: %s (scripts/sglang-parse-venv.sh 0.5.23)" % lab.PARSE_VENV)


def get(url):
    with urllib.request.urlopen(url, timeout=10) as answer:
        return answer.status, answer.read().decode()


def test_the_health_generate_alert_fires_for_the_instance_that_does_not_generate(tmp_path):
    standins = {}
    for name, never_ready in (("good", False), ("stuck", True)):
        model = tmp_path / name
        model.mkdir()
        (model / "standin.json").write_text(json.dumps({"never_ready": never_ready}))
        standins[name] = lab.StandIn(lab.free_port(), model, warmup_seconds=0.5)
    procs = []
    try:
        for s in standins.values():
            s.start()
        standins["good"].wait_ready()
        box_port, prom_port = lab.free_port(), lab.free_port()
        procs.append(prometheus_bin.start_blackbox(tmp_path / "blackbox", box_port))
        probe = "http://127.0.0.1:%d/probe?module=http_2xx&target=%s/health_generate"
        wait("the exporter", lambda: _quiet(lambda: get("http://127.0.0.1:%d/metrics" % box_port)[0] == 200), 30)
        # the exporter's own verdict: 200 is success, 503 is not
        assert "probe_success 1" in get(probe % (box_port, standins["good"].url))[1]
        assert "probe_success 0" in get(probe % (box_port, standins["stuck"].url))[1]
        procs.append(prometheus_bin.start_prometheus(
            tmp_path / "prometheus", {n: s.port for n, s in standins.items()}, prom_port,
            monitoring_blackbox_port=box_port, monitoring_health_for="3s"))
        alerts = wait("CT200HealthGenerateFailing firing", lambda: _firing(prom_port), 90)
    finally:
        for p in procs:
            p.terminate()
            p.wait(timeout=30)
        for s in standins.values():
            s.stop()
    assert [(a["labels"]["ct200_host"], a["labels"]["instance"]) for a in alerts] == [
        ("stuck", "%s/health_generate" % standins["stuck"].url)]
    assert alerts[0]["labels"]["severity"] == "critical"


def _quiet(probe):
    try:
        return probe()
    except OSError:
        return None


def _firing(port):
    answer = _quiet(lambda: json.loads(get("http://127.0.0.1:%d/api/v1/alerts" % port)[1]))
    alerts = (answer or {}).get("data", {}).get("alerts", [])
    return [a for a in alerts if a["labels"].get("alertname") == "CT200HealthGenerateFailing"
            and a["state"] == "firing"] or None
