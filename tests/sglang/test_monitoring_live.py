# SPDX-License-Identifier: Apache-2.0
"""Debian's real Prometheus, on loopback, with the role's rendered configuration and rules, scraping two SGLang
stand-ins: one healthy, one with a planted bad drafter (accept_length 1.0 in its standin.json). The acceptance
alert fires for the bad one only (short for:/intervals through the role's variables), and a host removed from
the inventory leaves Prometheus's targets when the target file is rewritten."""
import json
import os
import subprocess
import time
import urllib.request

import prometheus_bin
from ansible_collections.ct200.deploy.plugins.module_utils import monitoring

import models
from conftest import kimi_params, plan, real_dialect, require_parse_venv
from test_standin import CHAT, call, free_port, start

SHORT = dict(monitoring_scrape_interval="1s", monitoring_scrape_timeout="1s", monitoring_evaluation_interval="1s",
             monitoring_accept_for="8s")


def api(port, path):
    with urllib.request.urlopen("http://127.0.0.1:%d%s" % (port, path), timeout=5) as answer:
        return json.loads(answer.read())["data"]


def wait(what, probe, timeout):
    deadline, last = time.monotonic() + timeout, None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(0.5)
    raise AssertionError("%s: not within %ds (last: %r)" % (what, timeout, last))


def write_targets(config_dir, stand_ins):
    hosts = {name: ("127.0.0.1", monitoring.instance_endpoints(name, "127.0.0.1", [{
        "name": "kimi", "port": port, "host": "127.0.0.1", "served_model_name": "kimi-k2.6",
        "speculative": {"algorithm": "dflash"}}])) for name, port in stand_ins.items()}
    for name, text in monitoring.monitoring_files(hosts, "mon").items():
        sub = "rules" if name.endswith(".rules.yml") else "targets"
        tmp = config_dir / sub / (name + ".tmp")
        tmp.write_text(text)
        os.replace(tmp, config_dir / sub / name)  # as the role writes them: whole files renamed into place


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
        for sub in ("rules", "targets", "data"):
            (config / sub).mkdir(parents=True)
        (config / "rules" / "ct200.rules.yml").write_text(prometheus_bin.render("ct200.rules.yml.j2", **SHORT))
        write_targets(config, ports)
        prom_port = free_port()
        (config / "prometheus.yml").write_text(prometheus_bin.render(
            "prometheus.yml.j2", monitoring_config_dir=str(config), monitoring_port=prom_port, **SHORT))
        log = open(tmp_path / "prometheus.log", "w")
        procs.append(subprocess.Popen([prometheus_bin.binary("prometheus"), "--config.file", str(config / "prometheus.yml"),
                                       "--storage.tsdb.path", str(config / "data"),
                                       "--web.listen-address", "127.0.0.1:%d" % prom_port], stdout=log, stderr=log))

        def firing():
            alerts = api(prom_port, "/api/v1/alerts")["alerts"]
            return [a for a in alerts if a["labels"]["alertname"] == "CT200AcceptLengthLow" and a["state"] == "firing"]
        try:
            alerts = wait("CT200AcceptLengthLow firing", lambda: _quiet(firing), 90)
        except AssertionError:
            raise AssertionError((open(tmp_path / "prometheus.log").read()[-3000:]))
        assert [a["labels"]["ct200_host"] for a in alerts] == ["bad"]
        assert float(alerts[0]["value"]) == 1.0
        # the healthy one is scraped and above its floor
        good = api(prom_port, "/api/v1/query?query=ct200:accept_length:avg5m%7Bct200_host%3D%22good%22%7D")["result"]
        assert float(good[0]["value"][1]) == 3.5

        def scraped():
            return sorted(t["labels"]["ct200_host"] for t in api(prom_port, "/api/v1/targets")["activeTargets"]
                          if t["labels"]["job"] == "sglang")
        assert wait("both scraped", lambda: scraped() == ["bad", "good"], 30)
        write_targets(config, {"bad": ports["bad"]})  # "good" left the inventory
        assert wait("good dropped from the targets", lambda: scraped() == ["bad"], 60)
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
