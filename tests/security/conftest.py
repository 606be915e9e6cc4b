# SPDX-License-Identifier: Apache-2.0
"""Fixtures of the hostile-input suite (issue 18): one local Hub for the session, a hostile upstream in
front of it per test, and the weight_peer role's own nginx configuration to fetch what a peer can fetch."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time

import pytest

from localhub import LocalHub

from hostile_servers import HostileUpstream
from sec_helpers import WEIGHTS, WEIGHTS_FILES


@pytest.fixture(scope="session")
def sec_hub(tmp_path_factory):
    hub = LocalHub(str(tmp_path_factory.mktemp("sec-hub")), include_defaults=False)
    hub.add_repo(WEIGHTS, dict(WEIGHTS_FILES))
    hub.start()
    yield hub
    hub.stop()


@pytest.fixture()
def hub(sec_hub):
    sec_hub.clear_faults()
    sec_hub.clear_hostile()
    sec_hub.reset_stats()
    yield sec_hub
    sec_hub.clear_faults()
    sec_hub.clear_hostile()


@pytest.fixture()
def upstream(hub):
    with HostileUpstream(hub.url) as server:
        yield server


def _free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture()
def nginx_peer(tmp_path):
    """``serve(local_dir)`` -> base URL: the weight_peer role's nginx.conf.j2 rendered for that directory
    (model name ``model``) and run with Debian's nginx on 127.0.0.1; skipped when nginx cannot run here."""
    from tests.fanout import netns_site

    procs = []

    def serve(local_dir):
        try:
            binary = netns_site.nginx_binary()
        except Exception as exc:  # no apt repository with nginx-light: the suite says so instead of passing
            pytest.skip("Debian's nginx is not available here (%s)" % exc)
        state = tmp_path / "nginx"
        state.mkdir(exist_ok=True)
        port = _free_port()
        conf = netns_site.render_nginx_conf("127.0.0.1", [{"name": "model", "path": str(local_dir)}], str(state),
                                            user="root").replace(":%d;" % netns_site.PEER_PORT, ":%d;" % port)
        (state / "nginx.conf").write_text(conf)
        subprocess.run([binary, "-t", "-q", "-c", str(state / "nginx.conf")], check=True, capture_output=True)
        subprocess.run([binary, "-c", str(state / "nginx.conf")], check=True, capture_output=True)
        pid_file = state / "nginx.pid"
        deadline = time.monotonic() + 10
        while not pid_file.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        procs.append(int(pid_file.read_text()))
        return "http://127.0.0.1:%d" % port

    if os.geteuid() != 0 or not shutil.which("dpkg-deb"):
        pytest.skip("running the weight_peer nginx needs root and dpkg-deb")
    yield serve
    for pid in procs:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
