# SPDX-License-Identifier: Apache-2.0
"""Debian's prometheus and promtool for the tests, unpacked from the shared local apt repository
(scripts/local-apt-repo.sh prometheus: the package the monitoring role installs on a host), and the
role's templates rendered as the role renders them (same variables, its defaults)."""

from __future__ import annotations

import fcntl
import glob
import json
import os
import subprocess

import jinja2
import yaml

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
APT_REPO = os.path.join(REPO, ".cache", "apt-repo")
ROOT = os.path.join(REPO, ".cache", "prometheus-root")
ROLE = os.path.join(REPO, "roles", "monitoring")


def binary(name: str) -> str:
    """Path of Debian's /usr/bin/NAME (prometheus or promtool), unpacked on first use."""
    path = os.path.join(ROOT, "usr", "bin", name)
    if os.access(path, os.X_OK):
        return path
    os.makedirs(os.path.dirname(ROOT), exist_ok=True)
    with open(ROOT + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not os.access(path, os.X_OK):
            if not glob.glob(os.path.join(APT_REPO, "prometheus_*.deb")):
                subprocess.run([os.path.join(REPO, "scripts", "local-apt-repo.sh"), "prometheus"], check=True,
                               capture_output=True, timeout=600)
            deb = sorted(glob.glob(os.path.join(APT_REPO, "prometheus_*.deb")))[-1]
            subprocess.run(["dpkg-deb", "-x", deb, ROOT], check=True, timeout=300)
    return path


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
