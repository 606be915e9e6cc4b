# SPDX-License-Identifier: Apache-2.0
"""Drain decisions and the router client of plugins/module_utils/traffic.py, without a router."""
from __future__ import annotations

import io
import json
import urllib.error
import urllib.parse

import pytest

from ansible_collections.ct200.deploy.plugins.module_utils import traffic


@pytest.mark.parametrize("mode,state,registered,action,changed", [
    ("router", "out", True, "remove", True),
    ("router", "out", False, "none", False),
    ("router", "in", False, "add", True),
    ("router", "in", True, "none", False),
    ("external", "out", None, "command", True),
    ("external", "in", None, "command", True),
    ("none", "out", None, "none", False),
    ("none", "in", None, "none", False),
])
def test_decide(mode, state, registered, action, changed):
    got = traffic.decide(mode, state, registered)
    assert (got["action"], got["changed"]) == (action, changed)
    assert got["reason"]


@pytest.mark.parametrize("mode,state", [("haproxy", "out"), ("router", "drain"), ("router", None)])
def test_decide_refuses_unknown(mode, state):
    with pytest.raises(traffic.TrafficError, match="use"):
        traffic.decide(mode, state, True)


@pytest.mark.parametrize("url,want", [
    ("http://10.0.0.5:30001", "http://10.0.0.5:30001"),
    ("http://10.0.0.5:30001/", "http://10.0.0.5:30001"),
    ("http://[fd00::5]:30001", "http://[fd00::5]:30001"),
])
def test_normalize_url(url, want):
    assert traffic.normalize_url(url) == want


@pytest.mark.parametrize("url", ["", "10.0.0.5:30001", "ftp://h:1", "http://h:1/v1", "http://u:p@h:1", "http://h:1?x=1"])
def test_normalize_url_refuses(url):
    with pytest.raises(traffic.TrafficError):
        traffic.normalize_url(url)


def test_external_argv_formats_each_element_without_a_shell():
    argv = traffic.external_argv(["/usr/bin/lb", "disable", "{host}", "--url={url}", "{name}; rm -rf /", "{{x}}"],
                                 "ct200-01", "http://10.0.0.5:30001", "kimi")
    assert argv == ["/usr/bin/lb", "disable", "ct200-01", "--url=http://10.0.0.5:30001", "kimi; rm -rf /", "{x}"]


@pytest.mark.parametrize("template", ["lb disable {host}", [], None, ["lb", "{port}"], ["lb", "{0}"]])
def test_external_argv_refuses(template):
    with pytest.raises(traffic.TrafficError):
        traffic.external_argv(template, "h", "http://h:1", "n")


class FakeRouter:
    """An opener that answers like sglang-router 0.3.2 (observed: POST/DELETE answer 202 and act later)."""

    def __init__(self, workers=(), key=None, lag=1, status=None):
        self.workers = {("id-" + u): {"id": "id-" + u, "url": u, "is_healthy": True, "load": 0} for u in workers}
        self.key = key
        self.lag = lag  # GET /workers calls before a queued change shows
        self.pending = []
        self.calls = []
        self.status = status

    def __call__(self, req, timeout=None):
        self.calls.append((req.get_method(), req.full_url.split("/", 3)[3]))
        if self.status:
            raise urllib.error.HTTPError(req.full_url, self.status, "x", {}, io.BytesIO(b"nope"))
        if self.key and req.get_header("Authorization") != "Bearer " + self.key:
            raise urllib.error.HTTPError(req.full_url, 401, "x", {}, io.BytesIO(b""))
        method, path = req.get_method(), "/" + req.full_url.split("/", 3)[3]
        if method == "GET":
            self.pending = [(n - 1, f) for n, f in self.pending]
            for _lag, apply in [p for p in self.pending if p[0] <= 0]:
                apply()
            self.pending = [p for p in self.pending if p[0] > 0]
            return _resp(200, {"workers": list(self.workers.values()), "total": len(self.workers)})
        if method == "POST":
            body = json.loads(req.data)
            self.last_post = body
            wid = "id-" + body["url"]
            self.pending.append((self.lag, lambda: self.workers.__setitem__(
                wid, {"id": wid, "url": body["url"], "is_healthy": True, "load": 0})))
            return _resp(202, {"status": "accepted", "worker_id": wid})
        if method == "DELETE":
            wid = urllib.parse.unquote(path.rsplit("/", 1)[1])
            self.pending.append((self.lag, lambda: self.workers.pop(wid, None)))
            return _resp(202, {"status": "accepted"})
        raise AssertionError(method)


def _resp(status, payload):
    class R(io.BytesIO):
        def __enter__(self):
            return self

        def __exit__(self, *a):
            return False
    r = R(json.dumps(payload).encode())
    r.status = status
    return r


def client(fake, key=None):
    ticks = iter(range(100000))
    return traffic.RouterClient("http://127.0.0.1:30000", key, opener=fake, sleep=lambda s: None, clock=lambda: next(ticks))


def test_out_removes_and_waits_until_the_router_shows_it():
    fake = FakeRouter(["http://10.0.0.1:30001", "http://10.0.0.2:30002"], lag=3)
    got = traffic.step("router", "out", "http://10.0.0.1:30001/", router=client(fake))
    assert got["action"] == "remove" and got["changed"]
    assert got["workers_in_rotation"] == 1
    assert ("DELETE", "workers/id-http%3A%2F%2F10.0.0.1%3A30001") in fake.calls
    # it polled until the removal showed (lag 3), not just once
    assert sum(1 for c in fake.calls if c[0] == "GET") >= 4


def test_out_of_an_absent_worker_changes_nothing():
    fake = FakeRouter(["http://10.0.0.2:30002"])
    got = traffic.step("router", "out", "http://10.0.0.1:30001", router=client(fake))
    assert (got["action"], got["changed"]) == ("none", False)
    assert not [c for c in fake.calls if c[0] != "GET"]


def test_in_adds_with_the_workers_key_and_waits_for_healthy():
    fake = FakeRouter([], key="k3y", lag=2)
    got = traffic.step("router", "in", "http://10.0.0.1:30001", router=client(fake, "k3y"), api_key="k3y")
    assert got["action"] == "add" and got["workers_in_rotation"] == 1
    assert fake.last_post == {"url": "http://10.0.0.1:30001", "api_key": "k3y"}


def test_in_of_a_registered_worker_posts_nothing():
    fake = FakeRouter(["http://10.0.0.1:30001"])
    got = traffic.step("router", "in", "http://10.0.0.1:30001", router=client(fake))
    assert (got["action"], got["changed"]) == ("none", False)
    assert not [c for c in fake.calls if c[0] == "POST"]


def test_check_mode_decides_but_changes_nothing():
    fake = FakeRouter(["http://10.0.0.1:30001"])
    got = traffic.step("router", "out", "http://10.0.0.1:30001", router=client(fake), check_mode=True)
    assert got["action"] == "remove" and "workers_in_rotation" not in got
    assert [c[0] for c in fake.calls] == ["GET"]


def test_in_that_never_becomes_healthy_times_out_with_the_fix():
    fake = FakeRouter([])
    fake.pending = []
    fake_post = fake.__call__

    def never(req, timeout=None):  # accepts the POST but the worker never shows
        if req.get_method() == "POST":
            fake.calls.append(("POST", ""))
            return _resp(202, {})
        return fake_post(req, timeout)
    ticks = iter(range(0, 10000))
    c = traffic.RouterClient("http://127.0.0.1:30000", opener=never, sleep=lambda s: None, clock=lambda: next(ticks))
    with pytest.raises(traffic.TrafficError, match="did not become a healthy worker within 5 s; see journalctl"):
        c.add("http://10.0.0.1:30001", timeout=5)


def test_wrong_key_names_the_variable():
    fake = FakeRouter([], key="right")
    with pytest.raises(traffic.TrafficError, match="401.*ct200_router_api_key"):
        client(fake, "wrong").workers()


def test_unreachable_router_names_the_fix():
    def refuse(req, timeout=None):
        raise urllib.error.URLError(ConnectionRefusedError(111, "refused"))
    with pytest.raises(traffic.TrafficError, match="unreachable.*systemctl start ct200-router"):
        traffic.RouterClient("http://127.0.0.1:1", opener=refuse).workers()


def test_router_mode_without_a_router_is_refused():
    with pytest.raises(traffic.TrafficError, match="ct200_router_host"):
        traffic.step("router", "out", "http://10.0.0.1:30001")


def test_rotation_for_status():
    fake = FakeRouter(["http://10.0.0.1:30001", "http://10.0.0.3:30003"])
    fake.workers["id-http://10.0.0.3:30003"]["is_healthy"] = False
    urls = ["http://10.0.0.1:30001/", "http://10.0.0.2:30002", "http://10.0.0.3:30003"]
    got = traffic.rotation("http://127.0.0.1:30000", urls, opener=fake)
    assert got["reachable"] and got["error"] is None
    assert {u: v["in_rotation"] for u, v in got["instances"].items()} == {
        "http://10.0.0.1:30001/": True, "http://10.0.0.2:30002": False, "http://10.0.0.3:30003": False}
    assert got["instances"]["http://10.0.0.3:30003"]["registered"] is True


def test_rotation_with_the_router_down_says_so():
    def refuse(req, timeout=None):
        raise urllib.error.URLError("refused")
    got = traffic.rotation("http://127.0.0.1:1", ["http://10.0.0.1:30001"], opener=refuse)
    assert not got["reachable"] and "unreachable" in got["error"]
    assert got["instances"]["http://10.0.0.1:30001"]["in_rotation"] is False


@pytest.mark.parametrize("listen,address,local,want", [
    ("127.0.0.1", "10.0.0.5", True, "http://127.0.0.1:30001"),
    ("0.0.0.0", "10.0.0.5", False, "http://10.0.0.5:30001"),
    ("::", "fd00::5", False, "http://[fd00::5]:30001"),
    ("10.0.0.9", "10.0.0.5", False, "http://10.0.0.9:30001"),
    (None, "10.0.0.5", True, "http://127.0.0.1:30001"),
])
def test_worker_url(listen, address, local, want):
    assert traffic.worker_url(listen, address, 30001, local) == want


def test_worker_url_refuses_loopback_behind_a_remote_router():
    with pytest.raises(traffic.TrafficError, match="cannot reach it: set .*ct200_sglang_host"):
        traffic.worker_url("127.0.0.1", "10.0.0.5", 30001, False)


def test_router_argv_has_no_workers_and_no_secret():
    argv = traffic.router_argv("0.0.0.0", 30000, 29000, "round_robin", extra=["--max-concurrent-requests", "64"])
    assert argv[:4] == ["--host", "0.0.0.0", "--port", "30000"]
    assert "--worker-urls" not in argv and "--api-key" not in argv
    assert argv[-2:] == ["--max-concurrent-requests", "64"]


@pytest.mark.parametrize("kwargs,match", [
    ({"policy": "least_busy"}, "router_policy"),
    ({"prometheus_port": 30000}, "own port"),
    ({"port": 70000}, "router_port"),
    ({"extra": ["--api-key=x"]}, "secrets never"),
    ({"extra": ["--worker-urls", "http://h:1"]}, "drain steps"),
    ({"health_check_endpoint": "health"}, "path"),
])
def test_router_argv_refuses(kwargs, match):
    args = {"listen": "0.0.0.0", "port": 30000, "prometheus_port": 29000, **kwargs}
    with pytest.raises(traffic.TrafficError, match=match):
        traffic.router_argv(**args)


def test_router_argv_parses_with_the_real_router(tmp_path):
    """The flags are sglang-router 0.3.2's own: its parser accepts them (skipped without the router venv)."""
    import subprocess
    import traffic_lab
    if traffic_lab.prerequisites():
        pytest.skip("no router venv")
    argv = traffic.router_argv("127.0.0.1", 30000, 29000)
    code = ("import sys; from sglang_router.launch_router import parse_router_args as p; a = p(sys.argv[1:]); "
            "print(a.policy, a.port, a.prometheus_port, a.health_check_interval_secs, a.worker_urls)")
    out = subprocess.run([str(traffic_lab.ROUTER_VENV / "bin" / "python"), "-c", code, *argv], capture_output=True,
                         text=True, timeout=60, check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["cache_aware", "30000", "29000", "10", "[]"]
