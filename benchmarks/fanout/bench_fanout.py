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

``--quick`` runs single and fanout 3 times, alternating (each ratio under the same load), and
reports the median ratio with the three values and the load averages.  ``hop_lag_s``: seconds
from a source's rename of a file (the file's ctime) to the first byte of it at the host that took
it from there (``file_times`` of hf_fanout_fetch); ``hop_lag_by_turn_s`` splits it into the first
host to take each file from each source (the pipelining) and the later ones (they waited for their
sender's earlier copies, by design).  ``--shape kimi``: 64 shards on 8 workers.

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
import shutil
import statistics
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path[:0] = [REPO, os.path.join(REPO, "tests", "support"), os.path.join(REPO, "collections")]

from tests.fanout.netns_site import Site, result_of, verify_all  # noqa: E402

REPO_ID = "bench/fanout"


SHAPES = {  # --shape: shards (quick, full), seed workers
    "default": ("12x4MiB", "24x4MiB", 8),
    # Kimi-K2.6: 64 shards of ~9.3 GB fetched by 8 workers; the same count, shrunk to fit this machine
    "kimi": ("64x1MiB", "64x2MiB", 8),
}


def split_size(files, workers):
    """The seed's min_split_size, scaled like the shards: with hf_download's default (64 MiB) the
    engine cuts a Kimi shard of 9.3 GB into 4 ranges per worker (32 on 8 workers); the same here."""
    return max(64 << 10, max(f["size"] for f in files.values()) // (workers * 4))


def launch(site, host, case, commit, files, fanout, poll, seed_fanout, seed_opts=None):
    if host == "h0" or case == "independent":
        args = dict(site.seed_args(REPO_ID, commit, host), **(seed_opts or {}))
        return site.module(host, "hf_download", args, wait=False)
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


def renamed_at(site, host, files):
    """{path: when it was renamed into place} from the file's ctime (rename(2) sets it; nothing
    writes to a verified file after that), wall clock like the fetchers' ``file_times``."""
    times = {}
    for path in files:
        try:
            times[path] = os.lstat(os.path.join(site.local_dir(host), path)).st_ctime_ns / 1e9
        except OSError:
            pass
    return times


def hop_takes(site, files, results):
    """(lag, source, path) for every (host, file) a peer delivered: seconds from the source's rename of
    the file to the first byte of it at the host that took it from there."""
    renamed = dict((host, renamed_at(site, host, files)) for host in results)
    takes = []
    for host, res in sorted(results.items()):
        for path, seen in sorted((res.get("file_times") or {}).items()):
            source = seen.get("source")
            if source in renamed and path in renamed[source] and seen.get("first_byte") is not None:
                takes.append((round(seen["first_byte"] - renamed[source][path], 4), source, path))
    return takes


def lags_by_turn(takes):
    """{"first": lags of the first host to take each file from each source, "later": the others}.  A
    first taker measures the pipelining (a file waited for no wave); a later one waited, by design, for
    the copies its sender made before it (an earlier sibling's, the final file's earlier receivers')."""
    turns = {"first": [], "later": []}
    seen = set()
    for lag, source, path in sorted(takes):
        turns["later" if (source, path) in seen else "first"].append(lag)
        seen.add((source, path))
    return turns


def timeline_of(site, files, results, t0_wall):
    """{host: {path: [source, first byte, verified]}} in seconds after the clock's start, and each
    host's renames under "renamed": where a file waited shows here (the tail of the tree)."""
    out = {}
    for host, res in sorted(results.items()):
        rows = dict((path, [seen.get("source"), _rel(seen.get("first_byte"), t0_wall), _rel(seen.get("verified"), t0_wall)])
                    for path, seen in sorted((res.get("file_times") or {}).items()))
        rows["renamed"] = dict((path, _rel(when, t0_wall)) for path, when in sorted(renamed_at(site, host, files).items()))
        out[host] = rows
    return out


def _rel(when, t0_wall):
    return None if when is None else round(when - t0_wall, 3)


def lag_stats(lags):
    if not lags:
        return {"n": 0, "median": None, "max": None}
    return {"n": len(lags), "median": round(statistics.median(lags), 3), "max": round(max(lags), 3),
            "p90": round(sorted(lags)[int(0.9 * (len(lags) - 1))], 3)}


def result_written(proc):
    """When the module wrote its result (monotonic clock): a loaded machine took up to 4 s more to tear
    the seed's interpreter down, and children that finished meanwhile were not counted as later."""
    try:
        written = os.stat(proc.out_path).st_mtime
    except OSError:
        return time.monotonic()
    return written - (time.time() - time.monotonic())


def run_case(site, commit, files, case, fanout, hosts, poll, seed_fanout, seed_opts=None):
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
    load_before = os.getloadavg()
    active = site.hosts[:hosts]
    procs = {}
    if case != "independent":
        for host in active[1:]:
            procs[host] = launch(site, host, case, commit, files, fanout, poll, seed_fanout, seed_opts)
        deadline = time.monotonic() + 600
        while not all(ready(site, h) for h in active[1:]) and time.monotonic() < deadline:
            time.sleep(0.05)
    started = time.monotonic()
    for host in active:
        if host not in procs:
            procs[host] = launch(site, host, case, commit, files, fanout, poll, seed_fanout, seed_opts)
    finished = {}
    results = {}
    cpu = {}
    pending = dict(procs)
    while pending:  # note each host's end as it happens, not in launch order
        for host, proc in list(pending.items()):
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)  # `ip netns exec` execs: same pid
            if pid:
                proc.returncode = os.waitstatus_to_exitcode(status)
                finished[host] = min(time.monotonic(), result_written(proc))
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
    # from the seed's first Hub byte request: its imports and planning (0.3 s idle, up to 8 s at
    # load 20 here) are CPU time a real seed has to itself; reported beside wall, not instead
    timings = results[seed].get("timings") or {}
    fetch_t0 = finished[seed] - float(timings.get("fetch") or 0) - float(timings.get("finish") or 0)
    fetch_wall = max(finished.values()) - (fetch_t0 if timings else t0)
    hub_bytes = site.hub_bytes()
    takes = hop_takes(site, files, results)
    lags = [lag for lag, _source, _path in takes]
    turns = lags_by_turn(takes)
    timeline = timeline_of(site, files, results, t0 + (time.time() - time.monotonic()))
    bad = verify_all(site, active, files)
    failed = {h: r.get("msg") for h, r in results.items() if r.get("failed")}
    return {"case": case, "hosts": len(active), "fanout": fanout, "seed_fanout": seed_fanout, "wall": round(wall, 3), "fetch_wall": round(fetch_wall, 3),
            "process_wall": round(process_wall, 3), "seed_start_delay": round(t0 - started, 3), "hub_bytes": hub_bytes,
            "verified": not bad and not failed, "unverified": bad, "failed": failed,
            "per_host_seconds": dict((h, round(t - started, 3)) for h, t in sorted(finished.items())),
            "per_host_cpu_seconds": dict(sorted(cpu.items())), "load_after": os.getloadavg()[0],
            "load_before": list(load_before), "hop_lag_s": lag_stats(lags), "hop_lags": lags,
            "hop_lag_turns": turns, "hop_lag_by_turn_s": dict((k, lag_stats(v)) for k, v in turns.items()),
            "timeline": timeline,
            "seed_done_to_last_host_s": round(max(finished.values()) - finished[seed], 3),
            "seed_seconds": results[seed].get("seconds"), "seed_timings": results[seed].get("timings"),
            "bytes_by_source": dict((h, r.get("bytes_by_source")) for h, r in results.items()
                                    if r.get("bytes_by_source") is not None)}


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n", maxsplit=1)[0])
    ap.add_argument("--quick", action="store_true", help="smaller repository; the measured case 3 times (median)")
    ap.add_argument("--json", metavar="FILE", help="write the figures as JSON")
    ap.add_argument("--hosts", type=int, default=8)
    ap.add_argument("--fanout", type=int, default=2, help="children per host of the measured tree (1 = chain)")
    ap.add_argument("--seed-fanout", type=int, default=2, help="children of the seed in the measured tree")
    ap.add_argument("--hub-rate", default="40mbit")
    ap.add_argument("--host-rate", default="100mbit")
    # 100 ms since 2026-12-04: a Hub reached over a WAN has its bottleneck in a router with tens to hundreds of
    # milliseconds of buffer; a 10 ms tbf queue on a zero-RTT veth made the Hub's BBR flows lose 2-6 % of their
    # segments (benchmarks/fanout/README.md, third pass). --hub-queue-ms 10 gives the earlier test bed.
    ap.add_argument("--hub-queue-ms", type=int, default=100,
                    help="the Hub link's shaper queue in ms (tbf latency; the hosts' links keep 10 ms)")
    ap.add_argument("--shape", choices=sorted(SHAPES), default="default",
                    help="kimi: 64 shards on 8 workers, Kimi-K2.6's proportion (waves of files show)")
    ap.add_argument("--shards", default=None, help="repository shards, e.g. 48x1MiB (overrides --shape)")
    ap.add_argument("--workers", type=int, default=None, help="the seed's max_workers (default: the shape's)")
    ap.add_argument("--split", default=None, help="the seed's min_split_size (default: largest shard / workers / 4)")
    ap.add_argument("--repeat", type=int, default=None, help="runs of single+fanout (default 3 with --quick, else 1)")
    ap.add_argument("--cases", default="single,fanout,star,independent", help=argparse.SUPPRESS)
    ap.add_argument("--verbose", action="store_true", help="print when each host finished")
    ap.add_argument("--poll", type=float, default=0.05, help="seconds between HEAD polls of a peer")
    ap.add_argument("--tag", default="bench", help="namespace names fo-TAG-* (1-6 letters/digits)")
    ap.add_argument("--stress", type=int, default=0, metavar="N",
                    help="run stress-ng --cpu N for the whole benchmark (the loaded run), recorded in the JSON")
    ap.add_argument("--note", default="", help="free text stored in the JSON (e.g. the load that ran)")
    ap.add_argument("--nice", type=int, default=0,
                    help="niceness of the whole site (modules, nginx, Hub inherit it); recorded in the JSON. Measured "
                         "here: below 0 it made the fan-out slower, not faster (the kernel's packet work for the "
                         "shaped links runs at 0)")
    args = ap.parse_args(argv)
    quick_shards, full_shards, workers = SHAPES[args.shape]
    args.shards = args.shards or (quick_shards if args.quick else full_shards)
    args.workers = args.workers or workers
    args.repeat = args.repeat or (3 if args.quick else 1)
    return args


def show(name, case, verbose):
    print("  %-12s wall %7.2f s (process wall %6.2f s)  hub %7.1f MiB  verified %s  hop lag %s  load %.1f"
          % (name, case["wall"], case["process_wall"], case["hub_bytes"] / 2**20, case["verified"],
             case["hop_lag_s"], case["load_before"][0]), flush=True)
    if verbose:
        print("    done at (s): %s" % case["per_host_seconds"], flush=True)
        print("    cpu (s):     %s  load %.1f" % (case["per_host_cpu_seconds"], case["load_after"]), flush=True)
        print("    seed module %s s: %s" % (case["seed_seconds"], case["seed_timings"]), flush=True)


def run_all(site, args, commit, files, seed_opts):
    """{case: result}: single and fanout ``--repeat`` times, alternating (the ratio of each pair is
    measured under the same load), then the controls once.  ``runs`` holds every pair."""
    wanted = args.cases.split(",")
    star = args.hosts - 1
    runs = []
    for _run in range(args.repeat if "single" in wanted and "fanout" in wanted else 1):
        pair = {}
        for name, hosts in (("single", 1), ("fanout", args.hosts)):
            if name in wanted:
                pair[name] = run_case(site, commit, files, "fanout", args.fanout, hosts, args.poll, args.seed_fanout,
                                      seed_opts)
                show(name, pair[name], args.verbose)
        if len(pair) == 2:
            pair["ratio"] = round(pair["fanout"]["wall"] / pair["single"]["wall"], 3)
            pair["fetch_ratio"] = round(pair["fanout"]["fetch_wall"] / pair["single"]["fetch_wall"], 3)
            print("    wall(%d)/wall(1) this run: %.3f (from the seed's fetch start: %.3f)"
                  % (args.hosts, pair["ratio"], pair["fetch_ratio"]), flush=True)
        runs.append(pair)
    cases = {}
    if "ratio" in runs[0]:  # the pair whose ratio is the median stands for single/fanout
        median_pair = sorted(runs, key=lambda r: r["ratio"])[(len(runs) - 1) // 2]
        cases.update(single=median_pair["single"], fanout=median_pair["fanout"])
    else:
        cases.update((k, v) for k, v in runs[0].items() if k in ("single", "fanout"))
    for name, case, fanout, seed_fanout in (("star", "fanout", star, star), ("independent", "independent", 1, 1)):
        if name in wanted:
            cases[name] = run_case(site, commit, files, case, fanout, args.hosts, args.poll, seed_fanout, seed_opts)
            show(name, cases[name], args.verbose)
    return cases, runs


def figures_of(cases, runs):
    one = cases["single"]
    ratios = [r["ratio"] for r in runs]
    lags = [lag for r in runs for lag in r["fanout"]["hop_lags"]]
    figures = {
        "hub_bytes_ratio": round(cases["fanout"]["hub_bytes"] / one["hub_bytes"], 4),
        "wall_8_over_1": round(statistics.median(ratios), 3),
        "wall_8_over_1_runs": ratios,
        "fetch_8_over_1": round(statistics.median([r["fetch_ratio"] for r in runs]), 3),
        "fetch_8_over_1_runs": [r["fetch_ratio"] for r in runs],
        "load_avg_runs": [r["fanout"]["load_before"] for r in runs],
        "hop_lag_s": lag_stats(lags),
        "hop_lag_by_turn_s": dict((turn, lag_stats([lag for r in runs for lag in r["fanout"]["hop_lag_turns"][turn]]))
                                  for turn in ("first", "later")),
        "seed_done_to_last_host_s": [r["fanout"]["seed_done_to_last_host_s"] for r in runs],
        "all_verified": all(c["verified"] for c in cases.values()) and all(
            r[k]["verified"] for r in runs for k in ("single", "fanout")),
        "process_wall_8_over_1": round(cases["fanout"]["process_wall"] / one["process_wall"], 3),
    }
    for name in ("star", "independent"):  # the controls (None when --cases left them out)
        case = cases.get(name)
        figures["%s_8_over_1" % name] = round(case["wall"] / one["wall"], 3) if case else None
        figures["%s_hub_bytes_ratio" % name] = round(case["hub_bytes"] / one["hub_bytes"], 4) if case else None
        figures["process_%s_8_over_1" % name] = round(case["process_wall"] / one["process_wall"], 3) if case else None
    return figures


def main(argv=None):
    args = parse_args(argv)
    if os.geteuid() != 0:
        sys.exit("needs root (network namespaces, tc)")
    if args.nice:
        os.nice(args.nice)
    data_dir = os.path.join(REPO, ".cache", "fanout", "hub-" + args.shards)
    started = time.time()
    load_at_start = os.getloadavg()
    stress = start_stress(args.stress)
    try:
        cases, runs, seed_opts, repo_bytes = measure(args, data_dir, load_at_start)
    finally:
        if stress is not None:
            stress.terminate()
            stress.wait(timeout=30)
    if "single" not in cases or "fanout" not in cases:
        return 0
    report(args, cases, runs, seed_opts, repo_bytes, started, load_at_start)
    return 0


class BusyLoops(object):
    """``cpus`` Python processes spinning at nice 0: the load where Debian's stress-ng is not installed."""

    def __init__(self, cpus):
        self.procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _cpu in range(cpus)]

    def terminate(self):
        for proc in self.procs:
            proc.terminate()

    def wait(self, timeout=None):
        for proc in self.procs:
            proc.wait(timeout=timeout)


def start_stress(cpus):
    """stress-ng (else BusyLoops) burning ``cpus`` CPUs at nice 0 for the loaded run (None without --stress)."""
    if not cpus:
        return None
    if shutil.which("stress-ng"):
        proc = subprocess.Popen(["stress-ng", "--cpu", str(cpus), "--quiet"], stdout=subprocess.DEVNULL)
    else:
        proc = BusyLoops(cpus)
    time.sleep(5)  # the load average starts to show it
    return proc


def measure(args, data_dir, load_at_start):
    with Site(args.tag, hosts=args.hosts, host_rate=args.host_rate, hub_rate=args.hub_rate,
              hub_queue_ms=args.hub_queue_ms) as site:
        site.start_hub("%s:%s" % (REPO_ID, args.shards), data_dir)
        commit, files = site.listing(REPO_ID)
        repo_bytes = sum(f["size"] for f in files.values())
        seed_opts = {"max_workers": args.workers, "min_split_size": args.split or split_size(files, args.workers)}
        print("site: %d hosts, Hub %s, hosts %s, %s (%.1f MiB), tree fan-out k=%d (seed: %d), seed %s, load %s"
              % (args.hosts, args.hub_rate, args.host_rate, args.shards, repo_bytes / 2**20, args.fanout,
                 args.seed_fanout, seed_opts, load_at_start), flush=True)
        cases, runs = run_all(site, args, commit, files, seed_opts)
    return cases, runs, seed_opts, repo_bytes


def report(args, cases, runs, seed_opts, repo_bytes, started, load_at_start):
    figures = figures_of(cases, runs)
    print("hub bytes ratio (site / one copy): %.2f   (goal 1.00)" % figures["hub_bytes_ratio"])
    print("wall(%d)/wall(1) tree k=%d:        %.3f   (goal <= 1.15; median of %s)"
          % (args.hosts, args.fanout, figures["wall_8_over_1"], figures["wall_8_over_1_runs"]))
    print("  from the seed's fetch start:     %.3f   (median of %s)" % (
        figures["fetch_8_over_1"], figures["fetch_8_over_1_runs"]))
    print("hop lag (rename -> first byte):  %s" % figures["hop_lag_s"])
    turns = figures["hop_lag_by_turn_s"]
    print("  first taker of a file / later:   %s / %s" % (turns["first"], turns["later"]))
    print("control star (k=%d):              %s" % (args.hosts - 1, figures["star_8_over_1"]))
    print("control independent:              %s" % figures["independent_8_over_1"])
    print("all verified:                     %s" % figures["all_verified"])
    print("process walls (incl. interpreter start): tree %s, star %s, independent %s"
          % (figures["process_wall_8_over_1"], figures["process_star_8_over_1"],
             figures["process_independent_8_over_1"]))
    print("load average: start %s, end %s" % (load_at_start, os.getloadavg()))
    if args.json:
        runs_doc = [dict(ratio=r["ratio"], fetch_ratio=r["fetch_ratio"], **dict((k, dict((f, r[k][f]) for f in (
            "wall", "fetch_wall", "process_wall", "seed_timings", "per_host_seconds", "hop_lag_s", "hop_lag_by_turn_s",
            "load_before", "seed_done_to_last_host_s", "verified"))) for k in ("single", "fanout"))) for r in runs]
        doc = dict(figures, config={"hosts": args.hosts, "fanout": args.fanout, "seed_fanout": args.seed_fanout,
                                    "hub_rate": args.hub_rate, "hub_queue_ms": args.hub_queue_ms, "shape": args.shape, "seed_options": seed_opts,
                                    "host_rate": args.host_rate, "shards": args.shards, "repo_bytes": repo_bytes,
                                    "quick": args.quick, "repeat": args.repeat, "note": args.note, "nice": args.nice,
                                    "stress_ng_cpus": args.stress,
                                    "stress_tool": ("stress-ng" if shutil.which("stress-ng") else "busy loops") if args.stress else None,
                                    "data_path": "network namespaces + Debian nginx + modules "
                                                 "as processes (no SSH/systemd hosts)"},
                   cases=cases, runs=runs_doc, started=started, seconds=round(time.time() - started, 1),
                   load=os.getloadavg(), load_at_start=load_at_start)
        with open(args.json, "w") as handle:
            json.dump(doc, handle, indent=1, sort_keys=True)


if __name__ == "__main__":
    sys.exit(main())
