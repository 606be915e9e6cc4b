# SPDX-License-Identifier: Apache-2.0
"""sglang_health_wait: the wait after a start stops when the unit exits, not after the whole budget
(module_utils sglang_health, with a fake clock; the real systemd path is the Molecule sglang_service
scenario's wrongdialect instance, which exits on an unknown flag)."""
import http.server
import threading

import pytest

from ansible_collections.ct200.deploy.plugins.module_utils import sglang_health as health
from fakeclock import FakeClock as Clock

RUNNING = {"ActiveState": "active", "SubState": "running", "Result": "success", "NRestarts": "0",
           "ExecMainCode": "0", "ExecMainStatus": "0"}


def test_parse_show_reads_the_asked_properties_only():
    text = "ActiveState=activating\nSubState=auto-restart\nNRestarts=3\nExecMainStatus=2\nId=x.service\nnoise\n"
    assert health.parse_show(text) == {"ActiveState": "activating", "SubState": "auto-restart", "NRestarts": "3",
                                       "ExecMainStatus": "2"}
    assert health.parse_show("") == {}


@pytest.mark.parametrize("props,start,expect", [
    (RUNNING, 0, None),
    (dict(RUNNING, ActiveState="activating", SubState="start-pre"), 0, None),  # the uvm loader, before SGLang
    (dict(RUNNING, ActiveState="activating", SubState="auto-restart", Result="exit-code", ExecMainCode="1",
          ExecMainStatus="2", NRestarts="1"), 0, "exited (Result=exit-code, status 2) and systemd is about to restart it (1 restart(s) so far)"),
    (dict(RUNNING, NRestarts="2"), 1, "restarted 1 time(s) during the wait"),
    (dict(RUNNING, NRestarts="2"), 2, None),  # restarts from before this wait: not this start's
    (dict(RUNNING, ActiveState="failed", SubState="failed", Result="start-limit-hit", NRestarts="5"), 0,
     "the unit failed (Result=start-limit-hit) after 5 restart(s)"),
    (dict(RUNNING, ActiveState="failed", SubState="failed", Result="signal", ExecMainCode="2", ExecMainStatus="9"), 0,
     "signal 9"),
    (dict(RUNNING, ActiveState="inactive", SubState="dead"), 0, "inactive (exit status 0)"),
])
def test_unit_exited_names_what_systemd_saw(props, start, expect):
    got = health.unit_exited(props, start)
    if expect is None:
        assert got is None
    else:
        assert expect in got, got


def test_a_unit_that_exits_stops_the_wait_at_the_next_poll():
    clock = Clock()
    states = iter([RUNNING, RUNNING, dict(RUNNING, ActiveState="activating", SubState="auto-restart",
                                          Result="exit-code", ExecMainStatus="2", NRestarts="1")])
    result = health.wait_healthy(lambda: (None, "connection refused"), lambda: next(states), timeout=2400, delay=2,
                                 clock=clock, sleep=clock.sleep)
    assert result["healthy"] is False and result["probes"] == 2 and result["waited"] == 2
    assert "status 2" in result["exited"]
    msg = health.failure_message("sglang@kimi.service", "http://127.0.0.1:30000/health_generate", 2400, result)
    assert msg.startswith("sglang@kimi.service stopped before") and "journalctl -u sglang@kimi.service" in msg


def test_a_running_unit_that_never_answers_waits_the_budget():
    clock = Clock()
    result = health.wait_healthy(lambda: (503, "HTTP 503"), lambda: RUNNING, timeout=20, delay=3, clock=clock,
                                 sleep=clock.sleep)
    assert result == {"healthy": False, "waited": 20, "probes": 8, "exited": None, "last": "HTTP 503"}
    msg = health.failure_message("sglang@kimi.service", "http://x/health_generate", 20, result)
    assert "within 20 s" in msg and "HTTP 503" in msg and "still running" in msg and "journalctl -u" in msg


def test_a_healthy_answer_ends_the_wait_even_after_earlier_restarts():
    clock = Clock()
    answers = iter([(None, "refused"), (200, "")])
    result = health.wait_healthy(lambda: next(answers), lambda: dict(RUNNING, NRestarts="4"), timeout=60, delay=2,
                                 clock=clock, sleep=clock.sleep)
    assert result["healthy"] is True and result["probes"] == 2 and result["exited"] is None


def test_probe_reports_status_and_refusal():
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200 if self.path == "/health_generate" else 503)
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        base = "http://127.0.0.1:%d" % server.server_address[1]
        assert health.probe(base + "/health_generate", 5) == (200, "")
        assert health.probe(base + "/loading", 5) == (503, "HTTP 503")
    finally:
        server.shutdown()
        server.server_close()
    status, why = health.probe(base + "/health_generate", 2)
    assert status is None and why
