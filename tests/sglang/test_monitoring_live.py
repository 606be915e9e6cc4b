# SPDX-License-Identifier: Apache-2.0
"""Debian's real Prometheus, on loopback, with the role's rendered configuration and rules, scraping two SGLang
stand-ins: one healthy, one with a planted bad drafter (accept_length 1.0 in its standin.json). The acceptance
alert fires for the bad one only (short for:/intervals through the role's variables), and a host removed from
the inventory leaves Prometheus's targets when the target file is rewritten."""
import json
import os
import time
import urllib.request

import models
import prometheus_bin
from prometheus_bin import wait
from conftest import kimi_params, plan, real_dialect, require_parse_venv
from test_standin import CHAT, call, free_port, start


def api(port, path):
    with urllib.request.urlopen("http://127.0.0.1:%d%s" % (port, path), timeout=5) as answer:
        return json.loads(answer.read())["data"]


def test_prometheus_fires_the_acceptance_alert_on_a_bad_drafter(tmp_path):
    python = require_parse_venv("0.5.23")
    procs, ports = [], {}
    try:
        for name, accept in (("good", 3.5), ("bad", 1.0)):
            mdir = {"kimi": models.kimi(tmp_path / name), "kimi_draft": models.kimi_draft(tmp_path / name)}
            with open(os.path.join(mdir["kimi_draft"], "standin.json"), "w", encoding="utf-8") as handle:
                json.dump({"accept_length": accept}, handle)
            port = free_port()
            _spec, _resolved, argv = plan(kimi_params(mdir, port=port), real_dialect("0.5.23"))
            procs.append(start(python, argv, port)[0])
            assert call("http://127.0.0.1:%d/v1/chat/completions" % port, CHAT)[0] == 200  # first verify step
            ports[name] = port
        config = tmp_path / "prometheus"
        prom_port = free_port()
        procs.append(prometheus_bin.start_prometheus(config, ports, prom_port))

        def firing():
            alerts = api(prom_port, "/api/v1/alerts")["alerts"]
            return [a for a in alerts if a["labels"]["alertname"] == "CT200AcceptLengthLow" and a["state"] == "firing"]
        try:
            alerts = wait("CT200AcceptLengthLow firing", lambda: _quiet(firing), 90)
        except AssertionError as exc:
            raise AssertionError((config / "prometheus.log").read_text()[-3000:]) from exc
        assert [a["labels"]["ct200_host"] for a in alerts] == ["bad"]
        assert float(alerts[0]["value"]) == 1.0
        # the healthy one is scraped and above its floor
        good = api(prom_port, "/api/v1/query?query=ct200:accept_length:avg5m%7Bct200_host%3D%22good%22%7D")["result"]
        assert float(good[0]["value"][1]) == 3.5

        def scraped():
            return sorted(t["labels"]["ct200_host"] for t in api(prom_port, "/api/v1/targets")["activeTargets"]
                          if t["labels"]["job"] == "sglang")
        assert wait("both scraped", lambda: scraped() == ["bad", "good"], 30)
        prometheus_bin.write_targets(config, {"bad": ports["bad"]})  # "good" left the inventory
        began = time.monotonic()
        assert wait("good dropped from the targets", lambda: scraped() == ["bad"], 60)
        print("alert and removal: target dropped %.1f s after the file changed" % (time.monotonic() - began))
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(timeout=30)


def _quiet(probe):
    try:
        return probe()
    except OSError:  # Prometheus still starting
        return None
