# SPDX-License-Identifier: Apache-2.0
"""Loopback traffic lab (TEST SUPPORT): the real sglang-router binary in front of SGLang stand-ins.

Used by tests/traffic/test_router_drain.py and benchmarks/traffic/bench_availability.py. Everything runs as
plain processes on 127.0.0.1: the router from .cache/router-venv-<version> (scripts/bootstrap.sh), each
stand-in from the SGLang parse venv with tests/support/sglang_standin/sglang_standin.py of this checkout.
The drain steps are the product's own (plugins/module_utils/traffic.py RouterClient), the router flags the
role's (roles/router/defaults: policy, health checks).

Each stand-in's stderr is read by a thread that stamps every line with time.time() on arrival, so a test can
tell which process answered which request and when (the stand-in logs a request when it answers it).
"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
ROUTER_VERSION = "0.3.2"
ROUTER_VENV = REPO / ".cache" / f"router-venv-{ROUTER_VERSION}"
PARSE_VENV = REPO / ".cache" / "sglang-venv-0.5.23"
STANDIN = REPO / "tests" / "support" / "sglang_standin" / "sglang_standin.py"
MODEL = "lab-model"
# the role's defaults (roles/router/defaults/main.yml) that matter for availability
ROUTER_FLAGS = ["--policy", "round_robin", "--health-check-interval-secs", "5", "--health-failure-threshold", "2",
                "--health-check-endpoint", "/health", "--worker-startup-timeout-secs", "120",
                "--worker-startup-check-interval", "1"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def prerequisites() -> list[str]:
    missing = []
    if not (ROUTER_VENV / "bin" / "python").exists():
        missing.append(f"{ROUTER_VENV} (scripts/bootstrap.sh builds it)")
    if not (PARSE_VENV / "bin" / "python").exists():
        missing.append(f"{PARSE_VENV} (scripts/sglang-parse-venv.sh 0.5.23)")
    return missing


def http(method, url, body=None, timeout=30.0, api_key=None):
    data = json.dumps(body).encode() if body is not None else None
    headers = {"Content-Type": "application/json"}
    if api_key:
        headers["Authorization"] = "Bearer " + api_key
    req = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, resp.read(1 << 20)
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read(4096)
    except (urllib.error.URLError, OSError) as exc:
        return 0, str(exc).encode()


def chat(url, timeout=30.0, model=MODEL, api_key=None):
    return http("POST", url + "/v1/chat/completions",
                {"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}, timeout=timeout,
                api_key=api_key)


class Proc:
    def __init__(self, argv, env, name):
        self.name = name
        self.lines: list[tuple[float, str]] = []
        self.p = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                  start_new_session=True)
        self._t = threading.Thread(target=self._read, daemon=True)
        self._t.start()

    def _read(self):
        for line in self.p.stderr:
            self.lines.append((time.time(), line.rstrip("\n")))

    def terminate(self, timeout=30.0) -> float:
        """SIGTERM and wait (SIGKILL after timeout, like TimeoutStopSec=); returns the seconds until the
        process was gone (``killed`` says whether the timeout's SIGKILL ended it)."""
        t0 = time.monotonic()
        self.killed = False
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
            try:
                self.p.wait(timeout)
            except subprocess.TimeoutExpired:
                self.killed = True
                self.p.kill()
                self.p.wait(10)
        stopped = time.monotonic() - t0
        self._t.join(5)  # the output reader: not part of the stop
        return stopped

    def kill(self):
        if self.p.poll() is None:
            self.p.kill()
            self.p.wait(10)


class StandIn:
    """One stand-in instance on a fixed port; restart() is a systemd stop + start."""

    def __init__(self, port, model_dir, completion_seconds=0.2, load_seconds=1.0, warmup_seconds=1.0):
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.model_dir = str(model_dir)
        self.env = {**os.environ, "CT200_STANDIN_COMPLETION_SECONDS": str(completion_seconds),
                    "CT200_STANDIN_LOAD_SECONDS": str(load_seconds), "CT200_STANDIN_WARMUP_SECONDS": str(warmup_seconds)}
        self.generations: list[Proc] = []

    def start(self):
        argv = [str(PARSE_VENV / "bin" / "python"), str(STANDIN), "--model-path", self.model_dir, "--served-model-name",
                MODEL, "--host", "127.0.0.1", "--port", str(self.port)]
        self.generations.append(Proc(argv, self.env, f"standin:{self.port}"))
        return self.generations[-1]

    @property
    def proc(self) -> Proc:
        return self.generations[-1]

    def wait_ready(self, timeout=120.0) -> float:
        """The readiness gate of instance_run.yml, in short: health 200, then one chat completion answered."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.p.poll() is not None:
                raise RuntimeError(f"stand-in {self.port} exited: {self.proc.lines[-5:]}")
            if http("GET", self.url + "/health_generate", timeout=2)[0] == 200:
                logged = len(answered_at(self.proc))
                status, body = chat(self.url)
                if status == 200:
                    self._wait_logged(logged + 1, deadline)
                    return time.time()
            time.sleep(0.2)
        raise RuntimeError(f"stand-in {self.port} not ready in {timeout} s")

    def _wait_logged(self, count, deadline):
        """The answer can reach us before our reader thread has stamped the stand-in's log line of it (a busy
        test process): wait for the stamp, so the gate's own completion counts as answered before readiness."""
        while len(answered_at(self.proc)) < count and time.monotonic() < deadline:
            time.sleep(0.02)

    def stop(self):
        for g in self.generations:
            g.kill()


def answered_at(proc: Proc) -> list[float]:
    """Arrival stamps of the chat completions PROC answered (its log line comes when it answers)."""
    return [t for t, line in proc.lines if "POST /v1/chat/completions" in line]


class Router:
    def __init__(self, port=None, flags=tuple(ROUTER_FLAGS)):
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        argv = [str(ROUTER_VENV / "bin" / "python"), "-m", "sglang_router.launch_router", "--host", "127.0.0.1",
                "--port", str(self.port), "--prometheus-port", str(free_port()), "--prometheus-host", "127.0.0.1",
                *flags]
        self.proc = Proc(argv, dict(os.environ), "router")
        deadline = time.monotonic() + 60
        while http("GET", self.url + "/health", timeout=2)[0] != 200:
            if time.monotonic() > deadline or self.proc.p.poll() is not None:
                raise RuntimeError(f"router did not start: {self.proc.lines[-10:]}")
            time.sleep(0.2)

    def stop(self):
        self.proc.terminate(10)


class Load:
    """A steady stream of chat completions through URL from CONCURRENCY threads (one in flight each)."""

    def __init__(self, url, concurrency=4, pause=0.05, timeout=30.0, model=MODEL, api_key=None):
        self.url, self.concurrency, self.pause, self.timeout = url, concurrency, pause, timeout
        self.model, self.api_key = model, api_key
        self.results: list[tuple[float, float, int]] = []  # (start, end, status)
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, daemon=True) for _index in range(concurrency)]

    def _run(self):
        while not self._stop.is_set():
            t0 = time.time()
            status, _body = chat(self.url, timeout=self.timeout, model=self.model, api_key=self.api_key)
            self.results.append((t0, time.time(), status))
            time.sleep(self.pause)

    def start(self):
        for t in self._threads:
            t.start()
        return self

    def stop(self):
        self._stop.set()
        for t in self._threads:
            t.join(self.timeout + 5)


class RotationMonitor:
    """Samples the router's worker list: how many of the instances are not healthy workers, at most."""

    def __init__(self, client, urls, interval=0.1):
        self.client, self.urls, self.interval = client, set(urls), interval
        self.max_out = 0
        self.samples = 0
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.is_set():
            try:
                healthy = {w["url"] for w in self.client.workers() if w.get("is_healthy")}
                self.max_out = max(self.max_out, len(self.urls - healthy))
                self.samples += 1
            except Exception:  # noqa: BLE001 -- a sample lost to a busy router is not a host out
                pass
            time.sleep(self.interval)

    def start(self):
        self._t.start()
        return self

    def stop(self):
        self._stop.set()
        self._t.join(5)


def summarize(results, t_restart, t_done, monitor, drain, **extra):
    """One arm's figures (the keys issue 14 names)."""
    before = [e - s for s, e, st in results if s < t_restart and st == 200]
    during = [r for r in results if t_restart <= r[0] <= t_done]
    during_ok = [e - s for s, e, st in during if st == 200]
    failed = [r for r in results if r[2] != 200]
    p99_before, p99_during = p99(before), p99(during_ok)
    return {
        "drain": drain, **extra,
        "requests": len(results),
        "failed_requests": len(failed),
        "served_fraction": round(1 - len(failed) / len(results), 5) if results else None,
        "requests_during_restart": len(during),
        "failed_during_restart": sum(1 for r in during if r[2] != 200),
        "failure_statuses": sorted({r[2] for r in failed}),
        "p99_latency_before_s": round(p99_before, 4) if p99_before else None,
        "p99_latency_during_s": round(p99_during, 4) if p99_during else None,
        "p99_latency_ratio_during_over_before": round(p99_during / p99_before, 3) if p99_before and p99_during else None,
        "max_hosts_out_of_rotation": monitor.max_out,
        "rotation_samples": monitor.samples,
        "restart_seconds": round(t_done - t_restart, 1),
    }


def p99(values):
    if not values:
        return None
    values = sorted(values)
    return values[min(len(values) - 1, int(round(0.99 * (len(values) - 1))))]
