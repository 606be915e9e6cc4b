# SPDX-License-Identifier: Apache-2.0
"""Debian's prometheus and promtool for the tests, unpacked from the shared local apt repository
(scripts/local-apt-repo.sh prometheus: the package the monitoring role installs on a host), and the
role's templates rendered as the role renders them (same variables, its defaults)."""

from __future__ import annotations

import glob
import json
import os
import subprocess
import time

import jinja2
import yaml

import debroot

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
APT_REPO = os.path.join(REPO, ".cache", "apt-repo")
ROOT = os.path.join(REPO, ".cache", "prometheus-root")
ROLE = os.path.join(REPO, "roles", "monitoring")


PACKAGES = {"prometheus": "prometheus", "promtool": "prometheus",
            "prometheus-blackbox-exporter": "prometheus-blackbox-exporter"}


def binary(name: str) -> str:
    """Path of Debian's /usr/bin/NAME (prometheus, promtool or prometheus-blackbox-exporter), unpacked on first
    use from its package (the one the monitoring role installs)."""
    package = PACKAGES[name]
    if not glob.glob(os.path.join(APT_REPO, package + "_*.deb")):
        subprocess.run([os.path.join(REPO, "scripts", "local-apt-repo.sh"), package], check=True,
                       capture_output=True, timeout=600)
    deb = sorted(glob.glob(os.path.join(APT_REPO, package + "_*.deb")))[-1]
    return os.path.join(debroot.unpacked(os.path.join(ROOT, package), [deb]), "usr", "bin", name)


def start_blackbox(config_dir, port: int, **over):
    """Debian's blackbox exporter on 127.0.0.1:PORT with the role's rendered blackbox.yml: the Popen."""
    config_dir = str(config_dir)
    os.makedirs(config_dir, exist_ok=True)
    config = os.path.join(config_dir, "blackbox.yml")
    with open(config, "w", encoding="utf-8") as handle:
        handle.write(render("blackbox.yml.j2", **over))
    log = open(os.path.join(config_dir, "blackbox.log"), "w", encoding="utf-8")  # pylint: disable=consider-using-with
    return subprocess.Popen([binary("prometheus-blackbox-exporter"), "--config.file=" + config,
                             "--web.listen-address=127.0.0.1:%d" % port], stdout=log, stderr=log)


def role_defaults(**over) -> dict:
    with open(os.path.join(ROLE, "defaults", "main.yml"), encoding="utf-8") as handle:
        values = yaml.safe_load(handle)
    values.update(over)
    return values


def render(template: str, **over) -> str:
    """roles/monitoring/templates/TEMPLATE rendered with the role's defaults and OVER."""
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True,
                             loader=jinja2.FileSystemLoader(os.path.join(ROLE, "templates")))
    env.filters["to_json"] = json.dumps
    return env.get_template(template).render(**role_defaults(**over))


# Short intervals for tests (role variables): alerts fire within seconds.
SHORT = dict(monitoring_scrape_interval="1s", monitoring_scrape_timeout="1s", monitoring_evaluation_interval="1s",
             monitoring_accept_for="8s")


def write_targets(config_dir, stand_ins: dict) -> None:
    """The role's generated files for speculative stand-ins {host: port} on loopback, renamed into place whole."""
    from ansible_collections.ct200.deploy.plugins.module_utils import monitoring

    hosts = {name: ("127.0.0.1", monitoring.instance_endpoints(name, "127.0.0.1", [{
        "name": "kimi", "port": port, "host": "127.0.0.1", "served_model_name": "kimi-k2.6",
        "speculative": {"algorithm": "dflash"}}])) for name, port in stand_ins.items()}
    for name, text in monitoring.monitoring_files(hosts, "mon").items():
        sub = os.path.join(str(config_dir), "rules" if name.endswith(".rules.yml") else "targets")
        os.makedirs(sub, exist_ok=True)
        with open(os.path.join(sub, name + ".tmp"), "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(os.path.join(sub, name + ".tmp"), os.path.join(sub, name))


def start_prometheus(config_dir, stand_ins: dict, port: int, **over):
    """Debian's prometheus on 127.0.0.1:PORT with the role's rendered configuration and rules: the Popen."""
    config_dir = str(config_dir)
    for sub in ("rules", "targets", "data"):
        os.makedirs(os.path.join(config_dir, sub), exist_ok=True)
    values = dict(SHORT, **over)
    with open(os.path.join(config_dir, "rules", "ct200.rules.yml"), "w", encoding="utf-8") as handle:
        handle.write(render("ct200.rules.yml.j2", **values))
    write_targets(config_dir, stand_ins)
    with open(os.path.join(config_dir, "prometheus.yml"), "w", encoding="utf-8") as handle:
        handle.write(render("prometheus.yml.j2", monitoring_config_dir=config_dir, monitoring_port=port, **values))
    log = open(os.path.join(config_dir, "prometheus.log"), "w", encoding="utf-8")  # pylint: disable=consider-using-with
    return subprocess.Popen([binary("prometheus"), "--config.file", os.path.join(config_dir, "prometheus.yml"),
                             "--storage.tsdb.path", os.path.join(config_dir, "data"),
                             "--web.listen-address", "127.0.0.1:%d" % port], stdout=log, stderr=log)


def wait(what, probe, timeout):
    """``probe()``'s first truthy answer within ``timeout`` seconds (polled every 0.5 s), else an
    AssertionError naming ``what`` and the last answer: the live tests wait for scrapes and alerts."""
    deadline, last = time.monotonic() + timeout, None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(0.5)
    raise AssertionError("%s: not within %ds (last: %r)" % (what, timeout, last))
