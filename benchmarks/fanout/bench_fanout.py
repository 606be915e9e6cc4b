#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Site fan-out benchmark: one Hub copy per site, wall(8 hosts) / wall(1 host), and the controls.

Eight hosts and a local Hub, each in its own network namespace (``fo-bench-*``), linked through
a bridge; ``tc tbf`` makes the Hub link slower than the host links (default 40 vs 100 Mbit/s).
The repository is small random shards so the 2 CPUs are not the limit.  In ONE run:

* ``single``:      the seed alone downloads from the Hub (hf_download)           -> wall(1), one copy
* ``fanout``:      seed from the Hub + 7 hosts from peers (hf_fanout_fetch, k-ary tree, pipelined)
* ``star``:        the same with every host's parent the seed (k = N-1)          -> control ~2.8x
* ``independent``: every host downloads from the Hub itself (hf_download)        -> control ~Nx

Hub bytes come from the Hub's own counters (``/_admin/stats``: bytes the CDN and resolve
endpoints sent).  Every file on every host is hashed against the Hub's oid after each run.
Never fails on time; prints ratios and, with ``--json FILE``, writes them.

Runs the collection's modules as processes in the namespaces with Debian's nginx (from the
nginx-light packages) configured by the weight_peer role's template; not over SSH/systemd hosts.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path[:0] = [REPO, os.path.join(REPO, "collections")]

from tests.fanout.netns_site import Site, result_of, verify_all  # noqa: E402

REPO_ID = "bench/fanout"


def launch(site, host, case, commit, files, fanout, poll, seed_fanout):
    if host == "h0" or case == "independent":
        return site.module(host, "hf_download", site.seed_args(REPO_ID, commit, host), wait=False)
    return site.module(host, "hf_fanout_fetch", site.fetch_args(host, REPO_ID, commit, files, fanout=fanout,
                                                                hosts=site.hosts, poll_interval=poll,
                                                                peer_stall_timeout=120, seed_fanout=seed_fanout),
                       wait=False)


def ready(site, host):
    """The fetcher is past its imports and planning: it wrote its first progress document."""
    try:
        with open(os.path.join(site.local_dir(host), ".ct200", "progress.json")) as handle:
            return json.load(handle).get("state") == "running"
    except (OSError, ValueError):
        return False


def run_case(site, commit, files, case, fanout, hosts, poll, seed_fanout):
    """(wall seconds, hub bytes, results, verified) of one case.

    Peers start first and the clock starts when they all wait for their sources: on this
    shared 2-core machine eight Python interpreters importing at once take many seconds of
    CPU, which each real host pays on its own CPUs in parallel.  They fetch nothing before
    the seed starts (nothing is there), so the wall clock measures the transfer pipeline.
    The independent control starts all hosts together (each one is its own Hub download)."""
    for host in site.hosts:
        site.stop_nginx(host)
        site.wipe(host)
        site.start_nginx(host)
    site.hub_admin("/_admin/stats/reset", "POST")
    active = site.hosts[:hosts]
    procs = {}
    if case != "independent":
        for host in active[1:]:
            procs[host] = launch(site, host, case, commit, files, fanout, poll, seed_fanout)
        deadline = time.monotonic() + 600
        while not all(ready(site, h) for h in active[1:]) and time.monotonic() < deadline:
            time.sleep(0.05)
    started = time.monotonic()
    for host in active:
        if host not in procs:
            procs[host] = launch(site, host, case, commit, files, fanout, poll, seed_fanout)
    finished = {}
    results = {}
    cpu = {}
    pending = dict(procs)
    while pending:  # note each host's end as it happens, not in launch order
        for host, proc in list(pending.items()):
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)  # `ip netns exec` execs: same pid
            if pid:
                proc.returncode = os.waitstatus_to_exitcode(status)
                finished[host] = time.monotonic()
                cpu[host] = round(usage.ru_utime + usage.ru_stime, 2)
                results[host] = result_of(proc)
                del pending[host]
        time.sleep(0.02)
    # t0: when the seed's module started its work (its end minus the run time it reports), so the
    # seconds a Python interpreter needs to start on this loaded shared 2-core machine (2 s idle,
    # 5-10 s while seven peers poll) are not counted; on a site every host has its own CPUs.
    seed = "h0"
    t0 = finished[seed] - float(results[seed].get("seconds") or 0) if not results[seed].get("failed") else started
    wall = max(finished.values()) - t0
    process_wall = max(finished.values()) - started
    hub_bytes = site.hub_bytes()
    bad = verify_all(site, active, files)
    failed = {h: r.get("msg") for h, r in results.items() if r.get("failed")}
    return {"case": case, "hosts": len(active), "fanout": fanout, "seed_fanout": seed_fanout, "wall": round(wall, 3),
            "process_wall": round(process_wall, 3), "seed_start_delay": round(t0 - started, 3), "hub_bytes": hub_bytes,
            "verified": not bad and not failed, "unverified": bad, "failed": failed,
            "per_host_seconds": dict((h, round(t - started, 3)) for h, t in sorted(finished.items())),
            "per_host_cpu_seconds": dict(sorted(cpu.items())), "load_after": os.getloadavg()[0],
            "seed_seconds": results[seed].get("seconds"), "seed_timings": results[seed].get("timings"),
            "bytes_by_source": dict((h, r.get("bytes_by_source")) for h, r in results.items()
                                    if r.get("bytes_by_source") is not None)}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n", maxsplit=1)[0])
    ap.add_argument("--quick", action="store_true", help="smaller repository (under 10 minutes here)")
    ap.add_argument("--json", metavar="FILE", help="write the figures as JSON")
    ap.add_argument("--hosts", type=int, default=8)
    ap.add_argument("--fanout", type=int, default=2, help="children per host of the measured tree (1 = chain)")
    ap.add_argument("--seed-fanout", type=int, default=1, help="children of the seed in the measured tree")
    ap.add_argument("--hub-rate", default="40mbit")
    ap.add_argument("--host-rate", default="100mbit")
    ap.add_argument("--shards", default=None, help="repository shards, e.g. 48x1MiB")
    ap.add_argument("--cases", default="single,fanout,star,independent", help=argparse.SUPPRESS)
    ap.add_argument("--verbose", action="store_true", help="print when each host finished")
    ap.add_argument("--poll", type=float, default=0.05, help="seconds between HEAD polls of a peer")
    ap.add_argument("--tag", default="bench", help="namespace names fo-TAG-* (1-6 letters/digits)")
    args = ap.parse_args(argv)
    shards = args.shards or ("12x4MiB" if args.quick else "24x4MiB")
    if os.geteuid() != 0:
        sys.exit("needs root (network namespaces, tc)")
    data_dir = os.path.join(REPO, ".cache", "fanout", "hub-" + shards)
    started = time.time()
    with Site(args.tag, hosts=args.hosts, host_rate=args.host_rate, hub_rate=args.hub_rate) as site:
        site.start_hub("%s:%s" % (REPO_ID, shards), data_dir)
        commit, files = site.listing(REPO_ID)
        repo_bytes = sum(f["size"] for f in files.values())
        print("site: %d hosts, Hub %s, hosts %s, %s (%.1f MiB), tree fan-out k=%d (seed: %d)"
              % (args.hosts, args.hub_rate, args.host_rate, shards, repo_bytes / 2**20, args.fanout, args.seed_fanout),
              flush=True)
        cases = {}
        star = args.hosts - 1
        for name, case, fanout, seed_fanout, hosts in (("single", "fanout", args.fanout, args.seed_fanout, 1),
                                                       ("fanout", "fanout", args.fanout, args.seed_fanout, args.hosts),
                                                       ("star", "fanout", star, star, args.hosts),
                                                       ("independent", "independent", 1, 1, args.hosts)):
            if name not in args.cases.split(","):
                continue
            cases[name] = run_case(site, commit, files, case, fanout, hosts, args.poll, seed_fanout)
            print("  %-12s wall %7.2f s (process wall %6.2f s)  hub %7.1f MiB  verified %s"
                  % (name, cases[name]["wall"], cases[name]["process_wall"], cases[name]["hub_bytes"] / 2**20,
                     cases[name]["verified"]), flush=True)
            if args.verbose:
                print("    done at (s): %s" % cases[name]["per_host_seconds"], flush=True)
                print("    cpu (s):     %s  load %.1f" % (cases[name]["per_host_cpu_seconds"], cases[name]["load_after"]),
                      flush=True)
                print("    seed module %s s: %s" % (cases[name]["seed_seconds"], cases[name]["seed_timings"]), flush=True)
    if len(cases) < 4:
        return 0
    one = cases["single"]
    figures = {
        "hub_bytes_ratio": round(cases["fanout"]["hub_bytes"] / one["hub_bytes"], 4),
        "wall_8_over_1": round(cases["fanout"]["wall"] / one["wall"], 3),
        "independent_8_over_1": round(cases["independent"]["wall"] / one["wall"], 3),
        "star_8_over_1": round(cases["star"]["wall"] / one["wall"], 3),
        "independent_hub_bytes_ratio": round(cases["independent"]["hub_bytes"] / one["hub_bytes"], 4),
        "star_hub_bytes_ratio": round(cases["star"]["hub_bytes"] / one["hub_bytes"], 4),
        "all_verified": all(c["verified"] for c in cases.values()),
        "process_wall_8_over_1": round(cases["fanout"]["process_wall"] / one["process_wall"], 3),
        "process_star_8_over_1": round(cases["star"]["process_wall"] / one["process_wall"], 3),
        "process_independent_8_over_1": round(cases["independent"]["process_wall"] / one["process_wall"], 3),
    }
    print("hub bytes ratio (site / one copy): %.2f   (goal 1.00)" % figures["hub_bytes_ratio"])
    print("wall(%d)/wall(1) tree k=%d:        %.2f   (goal <= 1.15)" % (args.hosts, args.fanout, figures["wall_8_over_1"]))
    print("control star (k=%d):              %.2f" % (args.hosts - 1, figures["star_8_over_1"]))
    print("control independent:              %.2f" % figures["independent_8_over_1"])
    print("all verified:                     %s" % figures["all_verified"])
    print("process walls (incl. interpreter start): tree %.2f, star %.2f, independent %.2f"
          % (figures["process_wall_8_over_1"], figures["process_star_8_over_1"],
             figures["process_independent_8_over_1"]))
    if args.json:
        doc = dict(figures, config={"hosts": args.hosts, "fanout": args.fanout, "seed_fanout": args.seed_fanout,
                                    "hub_rate": args.hub_rate,
                                    "host_rate": args.host_rate, "shards": shards, "repo_bytes": repo_bytes,
                                    "quick": args.quick, "data_path": "network namespaces + Debian nginx + modules "
                                                                      "as processes (no SSH/systemd hosts)"},
                   cases=cases, started=started, seconds=round(time.time() - started, 1),
                   load=os.getloadavg())
        with open(args.json, "w") as handle:
            json.dump(doc, handle, indent=1, sort_keys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
