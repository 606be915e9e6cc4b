# -*- coding: utf-8 -*-
# Copyright: ct200-deploy developers
# SPDX-License-Identifier: Apache-2.0
"""Who serves client traffic: take an instance out of rotation before a stop, put it back after readiness.

PRIVATE to the collection. One place for the traffic decisions of issue 14:

* ``RouterClient`` -- the control plane of ``sglang-router`` 0.3.2 as read from its installed binary and
  checked against it (tests/traffic): ``GET /workers`` lists ``{"workers": [{"id", "url", "is_healthy",
  "load", ...}]}``; ``POST /workers`` with ``{"url", "api_key"}`` answers 202 and adds the worker in the
  background (it keeps probing a worker that is down until ``--worker-startup-timeout-secs``);
  ``DELETE /workers/<id>`` answers 202 and removes it in the background. With ``--api-key`` every path but
  ``/health`` needs ``Authorization: Bearer KEY``. Both changes are asynchronous, so every change here is
  followed by a poll of ``GET /workers`` until the list shows it.
* ``decide(mode, state, registered)`` -- what one drain step does (remove / add / nothing / run a command),
  with the reason; pure, unit tested.
* ``external_argv(template, host, url, name)`` -- the argv of a site's own load-balancer command: a list,
  each element formatted with ``{host}``, ``{url}``, ``{name}``; never a shell string.
* ``rotation(router_url, urls, api_key)`` -- for ``ct200 status``: which of these instance URLs the router
  sends traffic to now (registered and healthy).

The router is the only source of rotation: its unit starts it with no static worker list (a static list
would re-add a drained worker behind the project's back when the router restarts), and only this module
adds workers, after the instance's readiness gate passed.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, Callable, Dict, List, Optional, Sequence

from ansible_collections.ct200.deploy.plugins.module_utils.redact import redact, shorten

MODES = ("router", "external", "none")
STATES = ("out", "in")
READ_LIMIT = 4 << 20  # a /workers answer of 4 MiB is not a router's
ERROR_BODY_LIMIT = 4096  # bytes of an error answer read; at most ERROR_QUOTE characters of it are quoted
ERROR_QUOTE = 300
PLACEHOLDERS = ("host", "url", "name")


class TrafficError(Exception):
    """A drain step cannot be done; the message names the cause and the fix."""


def normalize_url(url: str) -> str:
    """The worker URL as the router stores it: scheme://host:port, no trailing slash, no path."""
    if not isinstance(url, str) or not url:
        raise TrafficError("worker URL %r is empty: pass the instance's base URL, e.g. http://10.0.0.5:30001" % (url,))
    parts = urllib.parse.urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise TrafficError("worker URL %r is not http(s)://HOST:PORT: pass the instance's base URL" % url)
    if parts.path not in ("", "/") or parts.query or parts.fragment or parts.username or parts.password:
        raise TrafficError("worker URL %r carries a path, query or credentials: pass http(s)://HOST:PORT only" % url)
    return "%s://%s" % (parts.scheme, parts.netloc)


LOOPBACK = ("127.0.0.1", "::1", "localhost")
WILDCARD = ("0.0.0.0", "::", "")


def _bracket(host: str) -> str:
    return "[%s]" % host if ":" in host and not host.startswith("[") else host


def worker_url(listen: Optional[str], address: str, port: Any, router_is_local: bool) -> str:
    """The URL the router reaches an instance at: its listen address, the host's address for a wildcard
    listen, loopback only when the router runs on the same host."""
    try:
        port = int(port)
    except (TypeError, ValueError):
        raise TrafficError("instance port %r is not a number" % (port,)) from None
    listen = (listen or "127.0.0.1").strip()
    if listen in LOOPBACK:
        if not router_is_local:
            raise TrafficError("the instance listens on %s only, so the router on another host cannot reach it: set "
                               "the instance's host (ct200_sglang_host: 0.0.0.0 or the host's address, with "
                               "sglang_service_api_key) or run the router on this host" % listen)
        return "http://%s:%d" % (_bracket("::1" if listen == "::1" else "127.0.0.1"), port)
    host = address if listen in WILDCARD else listen
    if not host:
        raise TrafficError("no address for the instance: set sglang_service_traffic_address or ansible_host")
    return normalize_url("http://%s:%d" % (_bracket(host), port))


# ---------------------------------------------------------------------------
# Decisions
def decide(mode: str, state: str, registered: Optional[bool]) -> Dict[str, Any]:
    """What one drain step does.

    ``registered`` is whether the router lists the worker now (None when there is no router to ask).
    Returns {"action": "remove" | "add" | "command" | "none", "changed": bool, "reason": str}.
    """
    if mode not in MODES:
        raise TrafficError("ct200_traffic is %r: use one of %s" % (mode, ", ".join(MODES)))
    if state not in STATES:
        raise TrafficError("traffic state %r: use 'out' (before a stop) or 'in' (after readiness)" % (state,))
    if mode == "none":
        return {"action": "none", "changed": False,
                "reason": "ct200_traffic is none: nothing routes client traffic, nothing to drain"}
    if mode == "external":
        return {"action": "command", "changed": True,
                "reason": "ct200_traffic is external: the site's %s command runs" % ("take-out" if state == "out" else "put-back")}
    if state == "out":
        if registered:
            return {"action": "remove", "changed": True, "reason": "in rotation: removed from the router before the stop"}
        return {"action": "none", "changed": False, "reason": "not in the router's rotation: nothing to take out"}
    if registered:
        return {"action": "none", "changed": False, "reason": "already in the router's rotation"}
    return {"action": "add", "changed": True, "reason": "readiness passed: added to the router's rotation"}


def external_argv(template: Sequence[Any], host: str, url: str, name: str) -> List[str]:
    """The argv of the site's command, each element formatted with {host}, {url}, {name} (no shell)."""
    if isinstance(template, str) or not isinstance(template, (list, tuple)) or not template:
        raise TrafficError("the external traffic command must be a non-empty list (argv, no shell), e.g. "
                           "['/usr/local/bin/lb', 'disable', '{host}']; got %r" % (template,))
    values = {"host": host, "url": url, "name": name}
    argv = []
    for element in template:
        try:
            argv.append(str(element).format(**values))
        except (KeyError, IndexError, ValueError) as exc:
            raise TrafficError("external traffic command element %r: %s; only the placeholders {%s} exist "
                               "(double a brace to keep it literal)" % (element, exc, "}, {".join(PLACEHOLDERS))) from None
    return argv


# ---------------------------------------------------------------------------
# Router control plane
Opener = Callable[..., Any]


class RouterClient(object):
    """sglang-router 0.3.2's /workers API (see the module docstring)."""

    def __init__(self, base_url: str, api_key: Optional[str] = None, timeout: float = 10.0,
                 opener: Optional[Opener] = None, sleep: Callable[[float], None] = time.sleep,
                 clock: Callable[[], float] = time.monotonic):
        self.base_url = normalize_url(base_url)
        self.api_key = api_key or None
        # what the router may echo back (an error body quoting the request): masked in every message
        self.secrets = [k for k in (self.api_key,) if k]
        self.timeout = timeout
        self._open = opener or urllib.request.build_opener().open
        self._sleep = sleep
        self._clock = clock

    def _request(self, method: str, path: str, body: Optional[dict] = None):
        data = json.dumps(body).encode("utf-8") if body is not None else None
        req = urllib.request.Request(self.base_url + path, data=data, method=method)
        req.add_header("Accept", "application/json")
        if data is not None:
            req.add_header("Content-Type", "application/json")
        if self.api_key:
            req.add_header("Authorization", "Bearer " + self.api_key)
        try:
            with self._open(req, timeout=self.timeout) as resp:
                raw = resp.read(READ_LIMIT + 1)
                status = resp.status
        except urllib.error.HTTPError as exc:
            status = exc.code
            raw = exc.read(ERROR_BODY_LIMIT) if hasattr(exc, "read") else b""
        except (urllib.error.URLError, OSError) as exc:
            raise TrafficError("router %s is unreachable (%s %s: %s): start it (systemctl start ct200-router) "
                               "or fix ct200_router_url" % (self.base_url, method, path,
                                                            redact(str(getattr(exc, "reason", exc)), self.secrets))) from None
        if len(raw) > READ_LIMIT:
            raise TrafficError("router %s answered %s %s with more than %d bytes: is it sglang-router?"
                               % (self.base_url, method, path, READ_LIMIT))
        if status == 401:
            raise TrafficError("router %s refused %s %s (401): the router's API key (ct200_router_api_key, the "
                               "instances' key by default) is missing or wrong" % (self.base_url, method, path))
        if status >= 400:
            # the router's own words, redacted before they are cut (a cut could keep the head of a key)
            said = shorten(raw[:ERROR_BODY_LIMIT].decode("utf-8", "replace"), ERROR_QUOTE, self.secrets)
            raise TrafficError("router %s answered %s %s with HTTP %d (the router said: %s): read journalctl -u "
                               "ct200-router on the router host; the request was the project's /workers API of "
                               "sglang-router 0.3.2 (router_version)" % (self.base_url, method, path, status, said))
        try:
            return json.loads(raw or b"{}")
        except ValueError:
            raise TrafficError("router %s answered %s %s with non-JSON: is it sglang-router?"
                               % (self.base_url, method, path)) from None

    def workers(self) -> List[Dict[str, Any]]:
        answer = self._request("GET", "/workers")
        workers = answer.get("workers") if isinstance(answer, dict) else None
        if not isinstance(workers, list):
            raise TrafficError("router %s: GET /workers has no 'workers' list: is it sglang-router 0.3?" % self.base_url)
        return [w for w in workers if isinstance(w, dict) and isinstance(w.get("url"), str)]

    def find(self, url: str) -> Optional[Dict[str, Any]]:
        want = normalize_url(url)
        for worker in self.workers():
            try:
                if normalize_url(worker["url"]) == want:
                    return worker
            except TrafficError:
                continue
        return None

    def _wait(self, url: str, done: Callable[[Optional[dict]], bool], timeout: float, what: str) -> Optional[dict]:
        deadline = self._clock() + timeout
        while True:
            worker = self.find(url)
            if done(worker):
                return worker
            if self._clock() >= deadline:
                raise TrafficError("router %s: %s did not %s within %d s; see journalctl -u ct200-router"
                                   % (self.base_url, url, what, timeout))
            self._sleep(0.25)

    def remove(self, url: str, timeout: float = 30.0) -> None:
        worker = self.find(url)
        if worker is None:
            return
        self._request("DELETE", "/workers/" + urllib.parse.quote(str(worker.get("id", "")), safe=""))
        self._wait(url, lambda w: w is None, timeout, "leave the router's worker list")

    def add(self, url: str, api_key: Optional[str] = None, timeout: float = 60.0) -> Dict[str, Any]:
        body = {"url": normalize_url(url)}
        if api_key:
            body["api_key"] = api_key
            if api_key not in self.secrets:
                self.secrets.append(api_key)  # the worker's key is in this request's body: masked in what comes back
        if self.find(url) is None:
            self._request("POST", "/workers", body)
        return self._wait(url, lambda w: bool(w and w.get("is_healthy")), timeout, "become a healthy worker")


def rotation(router_url: str, urls: Sequence[str], api_key: Optional[str] = None, timeout: float = 5.0,
             opener: Optional[Opener] = None) -> Dict[str, Any]:
    """For ``ct200 status``: {"router": URL, "reachable": bool, "error": str|None,
    "instances": {url: {"in_rotation": bool, "registered": bool, "healthy": bool, "load": int|None}},
    "workers": [{"url", "healthy"}] (every worker the router lists, its URL normalized)}."""
    result = {"router": router_url, "reachable": False, "error": None, "instances": {}, "workers": []}
    try:
        workers = RouterClient(router_url, api_key, timeout=timeout, opener=opener).workers()
    except TrafficError as exc:
        result["error"] = str(exc)
        for url in urls:
            result["instances"][url] = {"in_rotation": False, "registered": False, "healthy": False, "load": None}
        return result
    result["reachable"] = True
    by_url = {}
    for worker in workers:
        try:
            by_url[normalize_url(worker["url"])] = worker
        except TrafficError:
            continue
    result["workers"] = [{"url": url, "healthy": bool(w.get("is_healthy") is True)} for url, w in sorted(by_url.items())]
    for url in urls:
        worker = by_url.get(normalize_url(url))
        healthy = bool(worker and worker.get("is_healthy"))
        load = worker.get("load") if worker else None
        # only a number leaves: any other value is the router's free text (a hostile one may echo the key in it)
        load = load if isinstance(load, (int, float)) and not isinstance(load, bool) else None
        result["instances"][url] = {"in_rotation": healthy, "registered": worker is not None, "healthy": healthy,
                                    "load": load}
    return result


def step(mode: str, state: str, url: str, router: Optional[RouterClient] = None, api_key: Optional[str] = None,
         check_mode: bool = False, timeout: float = 60.0) -> Dict[str, Any]:
    """One drain step against the router (mode router) or a decision only (external / none: the caller runs the
    command). Returns decide()'s answer plus "url" and, for router mode, "workers_in_rotation" after the step."""
    url = normalize_url(url)
    registered = None
    if mode == "router":
        if router is None:
            raise TrafficError("ct200_traffic is router but no router URL is known: set ct200_router_host "
                               "(or the group ct200_router) or ct200_traffic: none")
        registered = router.find(url) is not None
    result = decide(mode, state, registered)
    result["url"] = url
    if mode == "router" and not check_mode:
        if result["action"] == "remove":
            router.remove(url, timeout=timeout)
        elif state == "in":  # added, or registered already: either way it must be healthy before the play goes on
            router.add(url, api_key=api_key, timeout=timeout)
        result["workers_in_rotation"] = sum(1 for w in router.workers() if w.get("is_healthy"))
    return result


# ---------------------------------------------------------------------------
# Router configuration (role ct200.deploy.router)
POLICIES = ("random", "round_robin", "cache_aware", "power_of_two")
RESERVED_FLAGS = ("--api-key", "--worker-urls", "--control-plane-api-keys", "--oracle-password", "--postgres-db-url",
                  "--redis-url", "--host", "--port")


def router_argv(listen: str, port: int, prometheus_port: int, policy: str = "cache_aware",
                health_check_endpoint: str = "/health", health_check_interval: int = 10,
                health_failure_threshold: int = 2, request_timeout: int = 1800, shutdown_grace: int = 180,
                extra: Sequence[str] = ()) -> List[str]:
    """sglang-router 0.3.2's flags for the launcher's config file: no worker list (the project adds workers,
    after readiness), no secret (the API key comes from the systemd credential)."""
    if policy not in POLICIES:
        raise TrafficError("router_policy %r: use one of %s" % (policy, ", ".join(POLICIES)))
    for name, value, low in (("router_port", port, 1), ("router_prometheus_port", prometheus_port, 1),
                             ("router_health_check_interval", health_check_interval, 1),
                             ("router_health_failure_threshold", health_failure_threshold, 1),
                             ("router_request_timeout", request_timeout, 1), ("router_stop_timeout", shutdown_grace, 0)):
        if not isinstance(value, int) or isinstance(value, bool) or value < low or (name.endswith("port") and value > 65535):
            bound = " and <= 65535" if name.endswith("port") else ""
            raise TrafficError("%s is %r: use a whole number >= %d%s" % (name, value, low, bound))
    if port == prometheus_port:
        raise TrafficError("router_port and router_prometheus_port are both %d: give the metrics their own port" % port)
    if not isinstance(health_check_endpoint, str) or not health_check_endpoint.startswith("/"):
        raise TrafficError("router_health_check_endpoint %r must be a path such as /health" % (health_check_endpoint,))
    extra = [str(a) for a in (extra or [])]
    for arg in extra:
        if arg.split("=", 1)[0] in RESERVED_FLAGS:
            raise TrafficError("router_extra_args may not carry %s: the role sets listen address and port, workers are "
                               "added by the drain steps, and secrets never go on a command line" % arg.split("=", 1)[0])
    return ["--host", str(listen), "--port", str(port), "--policy", policy,
            "--prometheus-host", str(listen), "--prometheus-port", str(prometheus_port),
            "--health-check-endpoint", health_check_endpoint,
            "--health-check-interval-secs", str(health_check_interval),
            "--health-failure-threshold", str(health_failure_threshold),
            "--request-timeout-secs", str(request_timeout),
            "--shutdown-grace-period-secs", str(shutdown_grace),
            "--worker-startup-timeout-secs", "600", "--worker-startup-check-interval", "2",
            "--log-level", "info"] + extra
