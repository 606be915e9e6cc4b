# SPDX-License-Identifier: Apache-2.0
"""Availability benchmark (issue 14 item 6): a steady stream of chat completions through sglang-router while
a rolling restart of every instance runs (serial 1), once with the drain (the product's steps:
plugins/module_utils/traffic.py, as roles/sglang_service/tasks/instance_traffic.yml runs them) and once
without (the control: stop, start, wait for readiness, the router left to find out on its own), in the
same run, so the figure is shown against what it replaces. A second control also turns the router's retries off
(--disable-retries): sglang-router retries a refused connection on another worker, which hides most of what the
drain prevents; that arm shows it, and a drained arm with retries off shows the drain on its own.

    python benchmarks/traffic/bench_availability.py --quick --json /tmp/availability.json

Where (--fleet): "loopback" (default): the real sglang-router 0.3.2 binary (.cache/router-venv-0.3.2)
in front of 8 SGLang stand-ins on 127.0.0.1 (tests/support/traffic_lab.py); each stand-in answers a completion
in --completion-seconds and drains in-flight requests on SIGTERM as SGLang's graceful stop does. A restart is
the stand-in's SIGTERM, a new process (SGLang's parser runs again: seconds), and its readiness gate (health,
one completion). "ssh": the 8-host SSH fleet of tests/fleet (served_fleet: deploy_kimi.yml with the SGLang
stand-in on every host), routed (sglang-router on the first host, instances on their addresses with an API key),
and playbooks/restart.yml as the rolling restart, drained and with sglang_service_traffic=none as the control
(tests/fleet/test_traffic_fleet.py runs it; this script calls pytest on it and prints its JSON).

Per arm: requests, failed_requests (not HTTP 200, a timeout or a refused connection), served_fraction
(goal >= 0.999), p99_latency_ratio_during_over_before (p99 of requests started during the restart over
p99 of the same arm's baseline window before it), max_hosts_out_of_rotation (sampled from the router's
GET /workers every 0.1 s: instances not a healthy worker). Nothing gates on wall time.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "support"))
sys.path.insert(0, str(REPO / "collections"))

import traffic_lab as lab  # noqa: E402
from ansible_collections.ct200.deploy.plugins.module_utils import traffic  # noqa: E402


def arm(standins, drain: bool, args, router_flags=()) -> dict:
    router = lab.Router(flags=lab.ROUTER_FLAGS + list(router_flags))
    client = traffic.RouterClient(router.url)
    urls = [s.url for s in standins]
    try:
        for url in urls:
            traffic.step("router", "in", url, router=client)
        load = lab.Load(router.url, concurrency=args.concurrency, pause=args.pause).start()
        time.sleep(args.baseline_seconds)
        t_restart = time.time()
        monitor = lab.RotationMonitor(client, urls).start()
        per_host = []
        for s in standins:
            t0 = time.time()
            if drain:
                traffic.step("router", "out", s.url, router=client)
                time.sleep(args.settle)
            s.proc.terminate(30)
            s.start()
            s.wait_ready()
            if drain:
                traffic.step("router", "in", s.url, router=client)
            per_host.append(round(time.time() - t0, 2))
        t_done = time.time()
        time.sleep(args.after_seconds)
        monitor.stop()
        load.stop()
    finally:
        router.stop()
    return lab.summarize(load.results, t_restart, t_done, monitor, drain,
                         router_retries="--disable-retries" not in router_flags, per_host_restart_seconds=per_host)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    ap.add_argument("--quick", action="store_true", help="8 instances, short windows")
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--instances", type=int, default=8)
    ap.add_argument("--concurrency", type=int, default=6)
    ap.add_argument("--pause", type=float, default=0.05)
    ap.add_argument("--completion-seconds", type=float, default=0.2)
    ap.add_argument("--settle", type=float, default=1.0, help="the module's settle after a removal")
    ap.add_argument("--baseline-seconds", type=float, default=None)
    ap.add_argument("--after-seconds", type=float, default=3.0)
    ap.add_argument("--skip-no-retries", action="store_true",
                    help="leave out the second control (no drain, router retries off)")
    ap.add_argument("--fleet", choices=["loopback", "ssh"], default="loopback")
    args = ap.parse_args(argv)
    if args.fleet == "ssh":
        import subprocess
        target = Path(args.json or os.path.join(tempfile.mkdtemp(prefix="availability-ssh-"), "availability.json"))
        env = {**os.environ, "CT200_TRAFFIC_BENCH_JSON": str(target)}
        rc = subprocess.call([sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider",
                              str(REPO / "tests" / "fleet" / "test_traffic_fleet.py")], cwd=REPO, env=env)
        if target.exists():
            print(target.read_text())
        return rc
    if args.baseline_seconds is None:
        args.baseline_seconds = 8.0 if args.quick else 20.0
    missing = lab.prerequisites()
    if missing:
        print("missing: " + ", ".join(missing), file=sys.stderr)
        return 2
    model = tempfile.mkdtemp(prefix="bench-availability-")
    standins = [lab.StandIn(lab.free_port(), model, completion_seconds=args.completion_seconds)
                for _index in range(args.instances)]
    started = time.time()
    try:
        for s in standins:
            s.start()
        for s in standins:
            s.wait_ready(300)
        arms = {"drain": arm(standins, True, args), "no_drain": arm(standins, False, args)}
        if not args.skip_no_retries:
            arms["no_drain_no_retries"] = arm(standins, False, args, ["--disable-retries"])
            arms["drain_no_retries"] = arm(standins, True, args, ["--disable-retries"])
    finally:
        for s in standins:
            s.stop()
    d, n = arms["drain"], arms["no_drain"]
    out = {
        "benchmark": "availability", "mode": "loopback", "router": "sglang-router " + lab.ROUTER_VERSION,
        "instances": args.instances, "concurrency": args.concurrency, "completion_seconds": args.completion_seconds,
        "load_average_at_start": os.getloadavg()[0], "wall_seconds": round(time.time() - started, 1),
        **{k: d[k] for k in ("requests", "failed_requests", "served_fraction", "p99_latency_ratio_during_over_before",
                             "max_hosts_out_of_rotation")},
        "goal_served_fraction": 0.999, "goal_met": (d["served_fraction"] or 0) >= 0.999,
        "arms": arms,
        "failed_requests_no_drain": n["failed_requests"],
        "failed_requests_no_drain_no_retries": arms.get("no_drain_no_retries", {}).get("failed_requests"),
        "failed_requests_drain_no_retries": arms.get("drain_no_retries", {}).get("failed_requests"),
    }
    text = json.dumps(out, indent=2)
    print(text)
    print("drain: served %.4f (%d/%d failed), p99 during/before %s, max out %d | no drain: served %.4f (%d/%d failed),"
          " p99 during/before %s, max out %d" % (
              d["served_fraction"], d["failed_requests"], d["requests"], d["p99_latency_ratio_during_over_before"],
              d["max_hosts_out_of_rotation"], n["served_fraction"], n["failed_requests"], n["requests"],
              n["p99_latency_ratio_during_over_before"], n["max_hosts_out_of_rotation"]), file=sys.stderr)
    if args.json:
        Path(args.json).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
