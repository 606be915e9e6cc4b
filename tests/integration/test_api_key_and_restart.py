# SPDX-License-Identifier: Apache-2.0
"""On the shared served sandbox host (tests/integration/conftest.py: deploy_kimi.yml installed the
runtime on a bare host): deploy_kimi.yml serves beyond loopback with
an API key that appears in no output (-vvv --diff), unit, env file or process argv, and that the
endpoint enforces (SGLang reads it from the --config YAML; the probes stay open); then a run
whose instance cannot become healthy prints the journal, leaves the unit stopped and disabled and
keeps the owed restart, which the next run performs; a final run changes nothing.

Regression: SGLang's --config merger imports PyYAML, which sglang does not declare; the sandbox
wheelhouse lacked it, so every instance with an API key died at start ("No module named 'yaml'")
and the health wait ran out its whole budget."""

import json
import secrets
import socket
import urllib.error
import urllib.request

import pytest

from test_deploy_preflight import SERVED_HOST as HOST
from test_deploy_preflight import deploy, off_spec, on_host

pytestmark = pytest.mark.slow
SANDBOX_DEFAULTS = {"limit_nofile": "20000", "limit_memlock": "8M", "gpu_memory_gib": 96}
HEALTH_WAIT = "60"  # seconds; a broken instance fails the run in about this long


def free_port():
    """A port nothing listens on now (sandbox hosts share the machine's network namespace)."""
    with socket.socket() as sock:
        sock.bind(("0.0.0.0", 0))
        return sock.getsockname()[1]


def status_of(url, key=None):
    request = urllib.request.Request(url, headers={"Authorization": "Bearer %s" % key} if key else {})
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status
    except urllib.error.HTTPError as exc:
        return exc.code


@pytest.fixture
def host(served_host):
    return served_host[0]


def test_api_key_never_leaks_and_an_owed_restart_survives_a_failed_run(host, local_hub, tmp_path):
    key = secrets.token_hex(24)
    port = free_port()
    serve = ["-e", "ct200_sglang_host=0.0.0.0", "-e", "ct200_sglang_port=%d" % port,
             "-e", "sglang_service_api_key=%s" % key, "-e", "sglang_service_health_timeout=%s" % HEALTH_WAIT]
    off_spec(host).touch()  # another port and an API key on the shared host
    rc, out = deploy(host, local_hub, tmp_path, "-vvv", "--diff", *serve)
    assert rc == 0, out[-4000:]
    assert key not in out
    assert "/v1/chat/completions answered in" in out
    base = "http://127.0.0.1:%d" % port
    assert status_of(base + "/health") == 200  # SGLang's probes need no key
    assert status_of(base + "/v1/models") == 401
    assert status_of(base + "/v1/models", key) == 200
    unit = on_host(host, HOST, "cat", "/etc/systemd/system/sglang@kimi.service").stdout
    env = on_host(host, HOST, "cat", "/etc/sglang/kimi.env").stdout
    argv = on_host(host, HOST, "sh", "-c", "cat /proc/[0-9]*/cmdline | tr '\\0' ' '").stdout
    assert unit and env and "--host 0.0.0.0" in argv
    assert key not in unit and key not in env and key not in argv
    mode = on_host(host, HOST, "stat", "-c", "%a %G", "/etc/sglang/kimi.secret.yaml").stdout.split()
    assert mode == ["640", "sglang"]

    # An instance that never becomes healthy (the stand-in "loads" for 10 minutes).
    broken = dict(SANDBOX_DEFAULTS, environment={"CT200_STANDIN_LOAD_SECONDS": "600"})
    rc, out = deploy(host, local_hub, tmp_path, "--tags", "sglang_service", *serve,
                     "-e", json.dumps({"sglang_service_defaults": broken}), "-e", "sglang_service_health_timeout=20")
    assert rc != 0, out[-4000:]
    assert "Run | journal of kimi" in out and "did not come up" in out and key not in out
    assert on_host(host, HOST, "systemctl", "is-enabled", "sglang@kimi.service").stdout.strip() == "disabled"
    assert on_host(host, HOST, "systemctl", "is-active", "sglang@kimi.service").stdout.strip() != "active"
    assert on_host(host, HOST, "test", "-f", "/var/lib/ct200-sglang/kimi.restart-owed").returncode == 0

    # Back to the good spec: the owed restart happens, the flag goes, and the next run is a no-op.
    rc, out = deploy(host, local_hub, tmp_path, "--tags", "sglang_service", *serve)
    assert rc == 0, out[-4000:]
    assert on_host(host, HOST, "systemctl", "is-enabled", "sglang@kimi.service").stdout.strip() == "enabled"
    assert on_host(host, HOST, "test", "-f", "/var/lib/ct200-sglang/kimi.restart-owed").returncode != 0
    rc, out = deploy(host, local_hub, tmp_path, *serve)
    assert rc == 0 and "changed=0" in out.split("PLAY RECAP")[-1], out[-3000:]
