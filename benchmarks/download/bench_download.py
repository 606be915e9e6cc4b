#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""hf_download benchmark against the local Hub (real HTTP on loopback), all figures from ONE run.

Measures, each against a baseline taken in the same run:

1. throughput: ct200.deploy.hf_download vs ``hf download`` (huggingface_hub's CLI) vs
   parallel ``curl`` of the same CDN URLs, on a synthetic repo (default 4 x 1 GiB);
2. re-run time with everything present: 1 GiB vs 8 GiB of weights in the same number
   of files; then the re-verify after ``touch``-ing every file (every touched file is
   re-hashed in full) as a ratio to ``sha256sum`` run in parallel (``xargs -P nproc``)
   over the same files in the same round (huggingface_hub's own re-run of the same
   directories is measured for contrast: it re-hashes touched files too);
3. per-call cost of a no-op hf_download task vs a builtin ``stat`` task, through
   ansible-playbook on localhost (a branch revision and a pinned commit).

It prints a table and the ratios against the issue's targets and writes JSON. It never
fails on wall time (exit 1 only if a tool fails or produces wrong bytes). Data lives under
``--data`` (default ``<repo>/.cache/bench``): the Hub's generated repos are kept for the
next run (``--clean`` removes them), downloaded copies are deleted at the end.

Usage::

    .venv/bin/python benchmarks/download/bench_download.py [--repeat 3] [--quick]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
VENV_BIN = os.path.dirname(sys.executable)
MODULE = os.path.join(REPO_ROOT, "plugins", "modules", "hf_download.py")
GIB = 1 << 30

TARGETS = {
    "throughput_vs_hf": (">=", 2.0),
    "throughput_vs_curl": (">=", 0.7),
    "rerun_8g_over_1g": ("<=", 1.2),
    # sha256sum time / our re-verify time, same files, same round: >= 1 means no slower than coreutils
    "reverify_after_touch_vs_parallel_sha256sum": (">=", 1.0),
    "noop_over_stat": ("<=", 1.3),
}


def log(msg):
    sys.stderr.write("[bench] %s\n" % msg)
    sys.stderr.flush()


# ----------------------------------------------------------------------- local Hub
class Hub(object):
    def __init__(self, data_dir, repos):
        self.data_dir = data_dir
        self.repos = repos
        self.proc = None
        self.state = None

    def __enter__(self):
        state_file = os.path.join(self.data_dir, "state.json")
        if os.path.exists(state_file):
            os.unlink(state_file)
        cmd = [sys.executable, "-m", "localhub", "serve", "--host", "127.0.0.1", "--port", "0", "--no-defaults",
               "--data-dir", os.path.join(self.data_dir, "hub"), "--state-file", state_file]
        for spec in self.repos:
            cmd += ["--repo", spec]
        env = dict(os.environ, PYTHONPATH=os.path.join(REPO_ROOT, "tests", "support"))  # the package localhub
        self.log = open(os.path.join(self.data_dir, "hub.log"), "ab")
        self.proc = subprocess.Popen(cmd, cwd=REPO_ROOT, env=env, stdout=self.log, stderr=subprocess.STDOUT)
        log("starting the local Hub (first run generates %s; later runs reuse it)" % ", ".join(self.repos))
        deadline = time.monotonic() + 1800
        while not os.path.exists(state_file):
            if self.proc.poll() is not None:
                raise SystemExit("local Hub exited with %s, see %s/hub.log" % (self.proc.returncode, self.data_dir))
            if time.monotonic() > deadline:
                raise SystemExit("local Hub did not start within 30 min")
            time.sleep(0.5)
        with open(state_file) as handle:
            self.state = json.load(handle)
        log("local Hub at %s" % self.state["url"])
        return self

    def __exit__(self, *exc):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self.log.close()

    @property
    def url(self):
        return self.state["url"]

    @property
    def cdn_url(self):
        return self.state["cdn_url"]

    def get(self, path):
        import urllib.request

        with urllib.request.urlopen(self.url + path, timeout=30) as resp:
            return json.loads(resp.read().decode())

    def tree(self, repo_id):
        return [e for e in self.get("/api/models/%s/tree/main?recursive=true" % repo_id) if e["type"] == "file"]

    def commit(self, repo_id):
        return self.get("/api/models/%s/revision/main" % repo_id)["sha"]


# ----------------------------------------------------------------------- helpers
def clean_dir(path):
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path)
    os.sync()


def timed(cmd, env=None, cwd=None, stdin=None):
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, cwd=cwd, input=stdin, capture_output=True, text=True, check=False)
    dt = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit("command failed (%s): %s\n%s\n%s" % (
            proc.returncode, " ".join(cmd)[:300], proc.stdout[-2000:], proc.stderr[-2000:]))
    return dt, proc


def hf_env(hub, home):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGING_FACE"))}
    env.update(HF_ENDPOINT=hub.url, HF_HOME=home, HF_HUB_DISABLE_XET="1", HF_HUB_DISABLE_TELEMETRY="1",
               HF_HUB_DISABLE_PROGRESS_BARS="1", HF_HUB_DISABLE_UPDATE_CHECK="1")
    return env


def run_module(hub, repo_id, local_dir, **kw):
    args = dict(repo_id=repo_id, local_dir=local_dir, endpoint=hub.url, min_free_bytes=0)
    args.update(kw)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGING_FACE"))}
    env["PYTHONPATH"] = os.path.join(REPO_ROOT, "collections")
    dt, proc = timed([sys.executable, MODULE], env=env, stdin=json.dumps({"ANSIBLE_MODULE_ARGS": args}))
    out = proc.stdout
    result = json.loads(out[out.index("{"):])
    if result.get("failed"):
        raise SystemExit("hf_download failed: %s" % result.get("msg"))
    return dt, result


def verify_files(local_dir, entries, name_of=lambda e: e["path"]):
    """Sizes of every file, and the sha256 of the LFS files (so 'fast' cannot mean 'wrong')."""
    for e in entries:
        path = os.path.join(local_dir, name_of(e))
        if os.path.getsize(path) != e["size"]:
            raise SystemExit("%s: wrong size" % path)
        if e.get("lfs"):
            h = hashlib.sha256()
            with open(path, "rb") as handle:
                for block in iter(lambda: handle.read(8 << 20), b""):
                    h.update(block)
            if h.hexdigest() != e["lfs"]["oid"]:
                raise SystemExit("%s: wrong content" % path)


# ----------------------------------------------------------------------- 1. throughput
def bench_throughput(hub, repo_id, work, repeat, verify, buffered=True):
    entries = hub.tree(repo_id)
    lfs = [e for e in entries if e.get("lfs")]
    total = sum(e["size"] for e in lfs)
    out = os.path.join(work, "tp")
    # warm the server side so every tool reads its blobs from the page cache
    for e in lfs:
        subprocess.run(["curl", "-s", "-o", "/dev/null", "%s/cdn/%s" % (hub.cdn_url, e["lfs"]["oid"])], check=True)

    def curl():
        clean_dir(out)
        procs = []
        t0 = time.perf_counter()
        for e in lfs:
            procs.append(subprocess.Popen(["curl", "-s", "--fail", "-o", os.path.join(out, e["lfs"]["oid"]),
                                           "%s/cdn/%s" % (hub.cdn_url, e["lfs"]["oid"])]))
        rcs = [p.wait() for p in procs]
        dt = time.perf_counter() - t0
        if any(rcs):
            raise SystemExit("curl failed: %s" % rcs)
        if verify:
            verify_files(out, lfs, name_of=lambda e: e["lfs"]["oid"])
        return dt, None

    def hf_cli():
        clean_dir(out)
        dt, _unused = timed([os.path.join(VENV_BIN, "hf"), "download", repo_id, "--local-dir", os.path.join(out, "hf")],
                            env=hf_env(hub, os.path.join(out, ".hfhome")))
        if verify:
            verify_files(os.path.join(out, "hf"), lfs)
        return dt, None

    def ours(**kw):
        clean_dir(out)
        dt, res = run_module(hub, repo_id, os.path.join(out, "ours"), **kw)
        if verify:
            verify_files(os.path.join(out, "ours"), lfs)
        return dt, res

    tools = [("curl_parallel", curl), ("hf_cli", hf_cli), ("hf_download", ours)]
    if buffered:  # the same module writing through the page cache like curl and hf do
        tools.append(("hf_download_buffered", lambda: ours(direct_io=False)))
    times = dict((name, []) for name, _unused in tools)
    rates = []
    for r in range(repeat):
        order = tools[r % len(tools):] + tools[:r % len(tools)]  # rotate: no tool always runs first
        for name, fn in order:
            dt, res = fn()
            times[name].append(dt)
            if res and name == "hf_download":
                rates.append(res["mean_rate"])
            log("throughput round %d %-20s %6.2f s  %6.0f MB/s" % (r + 1, name, dt, total / dt / 1e6))
    shutil.rmtree(out, ignore_errors=True)
    med = dict((k, statistics.median(v)) for k, v in times.items())
    return {
        "bytes": total,
        "files": len(lfs),
        "seconds": times,
        "median_mb_s": dict((k, round(total / v / 1e6, 1)) for k, v in med.items()),
        "hf_download_transfer_mb_s": round(statistics.median(rates) / 1e6, 1) if rates else None,
        "throughput_vs_hf": round(med["hf_cli"] / med["hf_download"], 2),
        "throughput_vs_curl": round(med["curl_parallel"] / med["hf_download"], 2),
        "buffered_vs_curl": round(med["curl_parallel"] / med["hf_download_buffered"], 2) if buffered else None,
        "buffered_vs_hf": round(med["hf_cli"] / med["hf_download_buffered"], 2) if buffered else None,
    }


# ----------------------------------------------------------------------- 2. re-runs
def weight_files(local):
    """Every file of the downloaded repository (not our .ct200/ state, not hf's .cache/)."""
    out = []
    for root, subdirs, names in os.walk(local):
        subdirs[:] = [d for d in subdirs if d not in (".ct200", ".cache")]
        out += [os.path.join(root, name) for name in names]
    return sorted(out)


def bench_reruns(hub, small, large, work, repeat, with_hf):
    res = {}
    dirs = {}
    for label, repo_id in (("1g", small), ("8g", large)):
        local = os.path.join(work, "rerun-" + label)
        clean_dir(local)
        dt, first = run_module(hub, repo_id, local)
        dirs[label] = (repo_id, local)
        res[label] = {"bytes": first["bytes_total"], "files": first["files"], "first_download_s": round(dt, 2),
                      "first_download_mb_s": round(first["bytes_total"] / dt / 1e6, 1)}
        log("re-run %s: first download %.1f s" % (label, dt))

    def ours_rerun(label, **kw):
        repo_id, local = dirs[label]
        dt, r = run_module(hub, repo_id, local, **kw)
        assert r["changed"] is False and r["bytes_downloaded"] == 0, r
        return dt, r

    def hf_rerun(label):
        repo_id, local = dirs[label]
        dt, _unused = timed([os.path.join(VENV_BIN, "hf"), "download", repo_id, "--local-dir", local],
                            env=hf_env(hub, os.path.join(work, ".hfhome")))
        return dt

    for label in ("1g", "8g"):
        res[label]["rerun_s"] = [round(ours_rerun(label)[0], 3) for _unused in range(repeat)]
        commit = hub.commit(dirs[label][0])
        res[label]["rerun_pinned_s"] = [round(ours_rerun(label, revision=commit)[0], 3) for _unused in range(repeat)]
        if with_hf:
            res[label]["hf_adopt_s"] = round(hf_rerun(label), 2)  # hf hashes files it has no metadata for
            res[label]["hf_rerun_s"] = [round(hf_rerun(label), 3) for _unused in range(repeat)]
    # touch every file, then re-run: ours re-hashes every touched file in full (so does hf); the
    # baseline is coreutils sha256sum over the same files, one process per core, in the same round

    def touch_all(local):
        now = time.time() + 60 + time.monotonic() % 1000
        for path in weight_files(local):
            os.utime(path, (now, now))
        os.sync()

    def parallel_sha256sum(local):
        files = weight_files(local)
        cmd = ["xargs", "-0", "-P", str(os.cpu_count() or 1), "-n", "1", "sha256sum"]
        dt, proc = timed(cmd, stdin="\0".join(files))
        if len(proc.stdout.splitlines()) != len(files):
            raise SystemExit("sha256sum did not hash every file")
        return dt

    for label in ("1g", "8g"):
        _repo, local = dirs[label]
        res[label]["touched_rerun_s"] = []
        res[label]["parallel_sha256sum_s"] = []
        for round_no in range(repeat):
            # alternate who goes first, so neither always reads from a cache the other warmed
            order = ("ours", "sha256sum") if round_no % 2 == 0 else ("sha256sum", "ours")
            for who in order:
                if who == "sha256sum":
                    res[label]["parallel_sha256sum_s"].append(round(parallel_sha256sum(local), 3))
                    continue
                touch_all(local)
                dt, r = ours_rerun(label)
                res[label]["touched_rerun_s"].append(round(dt, 3))
                res[label]["touched_refreshed_files"] = r["files_refreshed"]
                res[label]["touched_hashed_files"] = r["files_hashed"]
                if r["files_hashed"] != len(weight_files(local)):
                    raise SystemExit("after touch every file must be re-hashed, got %s" % r["files_hashed"])
        res[label]["after_touch_rerun_s"] = round(ours_rerun(label)[0], 3)
        if with_hf:
            touch_all(local)
            res[label]["hf_touched_rerun_s"] = round(hf_rerun(label), 3)
        log("re-run %s: %s" % (label, json.dumps(res[label])))
    for label in ("1g", "8g"):
        shutil.rmtree(dirs[label][1], ignore_errors=True)
    shutil.rmtree(os.path.join(work, ".hfhome"), ignore_errors=True)

    def med(label, key):
        value = res[label][key]
        return statistics.median(value) if isinstance(value, list) else value

    out = {"sizes": res}
    out["rerun_8g_over_1g"] = round(med("8g", "rerun_s") / med("1g", "rerun_s"), 2)
    out["rerun_pinned_8g_over_1g"] = round(med("8g", "rerun_pinned_s") / med("1g", "rerun_pinned_s"), 2)
    out["reverify_after_touch_vs_parallel_sha256sum"] = round(
        med("8g", "parallel_sha256sum_s") / med("8g", "touched_rerun_s"), 2)
    out["reverify_after_touch_vs_parallel_sha256sum_1g"] = round(
        med("1g", "parallel_sha256sum_s") / med("1g", "touched_rerun_s"), 2)
    if with_hf:
        out["hf_rerun_8g_over_1g"] = round(med("8g", "hf_rerun_s") / med("1g", "hf_rerun_s"), 2)
        out["hf_touched_8g_over_1g"] = round(med("8g", "hf_touched_rerun_s") / med("1g", "hf_touched_rerun_s"), 2)
    return out


# ----------------------------------------------------------------------- 3. no-op task cost
PLAYBOOK = """
- name: per-call cost of a no-op hf_download task vs a builtin stat task
  hosts: localhost
  connection: local
  gather_facts: false
  vars:
    ansible_python_interpreter: %(python)s
    calls: "{{ range(%(calls)d) | list }}"
    dl: {repo_id: %(repo)s, local_dir: %(local)s, endpoint: %(endpoint)s, min_free_bytes: 0}
  tasks:
    - {name: t0, ansible.builtin.set_fact: {t0: "{{ now().timestamp() }}"}}
    - name: builtin stat
      ansible.builtin.stat: {path: %(local)s/config.json}
      loop: "{{ calls }}"
    - {name: t1, ansible.builtin.set_fact: {t1: "{{ now().timestamp() }}"}}
    - name: hf_download no-op, branch revision
      ct200.deploy.hf_download: "{{ dl }}"
      loop: "{{ calls }}"
    - {name: t2, ansible.builtin.set_fact: {t2: "{{ now().timestamp() }}"}}
    - name: hf_download no-op, pinned commit
      ct200.deploy.hf_download: "{{ dl | combine({'revision': '%(commit)s'}) }}"
      loop: "{{ calls }}"
    - {name: t3, ansible.builtin.set_fact: {t3: "{{ now().timestamp() }}"}}
    - name: write timings
      ansible.builtin.copy:
        dest: %(out)s
        content: "{{ {'stat': t1|float - t0|float, 'noop_branch': t2|float - t1|float, 'noop_commit': t3|float - t2|float} | to_json }}"
        mode: "0644"
"""


def bench_noop(hub, repo_id, work, calls, repeat):
    local = os.path.join(work, "noop")
    clean_dir(local)
    run_module(hub, repo_id, local)
    commit = hub.commit(repo_id)
    play_dir = tempfile.mkdtemp(dir=work)
    out = os.path.join(play_dir, "timings.json")
    play = os.path.join(play_dir, "noop.yml")
    with open(play, "w") as handle:
        handle.write(PLAYBOOK % dict(python=sys.executable, calls=calls, repo=repo_id, local=local, endpoint=hub.url,
                                     commit=commit, out=out))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGING_FACE"))}
    env.update(ANSIBLE_CONFIG=os.path.join(REPO_ROOT, "ansible.cfg"), PATH=VENV_BIN + os.pathsep + env.get("PATH", ""))
    rounds = []
    for r in range(repeat + 1):  # the first round warms caches and is discarded
        timed([os.path.join(VENV_BIN, "ansible-playbook"), "-i", "localhost,", play], env=env, cwd=REPO_ROOT)
        with open(out) as handle:
            t = json.load(handle)
        if r:
            rounds.append(t)
        log("no-op round %d: %s" % (r, json.dumps(dict((k, round(v / calls * 1000, 1)) for k, v in t.items()))))
    shutil.rmtree(play_dir, ignore_errors=True)
    shutil.rmtree(local, ignore_errors=True)
    per = dict((k, statistics.median(x[k] for x in rounds) / calls) for k in rounds[0])
    return {
        "calls": calls,
        "ms_per_call": dict((k, round(v * 1000, 1)) for k, v in per.items()),
        "noop_over_stat": round(per["noop_branch"] / per["stat"], 2),
        "noop_commit_over_stat": round(per["noop_commit"] / per["stat"], 2),
    }


# ----------------------------------------------------------------------- main
def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n", maxsplit=1)[0])
    parser.add_argument("--data", default=os.path.join(REPO_ROOT, ".cache", "bench"))
    parser.add_argument("--throughput-repo", default="4x1GiB", help="COUNTxSIZE of the throughput repo")
    parser.add_argument("--rerun-small", default="8x128MiB", help="1 GiB of present weights")
    parser.add_argument("--rerun-large", default="8x1GiB", help="8 GiB of present weights (same file count)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--noop-calls", type=int, default=20)
    parser.add_argument("--no-hf-rerun", action="store_true", help="skip huggingface_hub's own re-run contrast")
    parser.add_argument("--no-verify", action="store_true", help="skip hashing every downloaded copy")
    parser.add_argument("--no-buffered", action="store_true",
                        help="skip the extra hf_download run with direct_io=false (page cache writes, like curl)")
    parser.add_argument("--only", choices=["throughput", "rerun", "noop"], action="append")
    parser.add_argument("--quick", action="store_true", help="2x256MiB / 4x32MiB vs 4x256MiB, 1 round: a smoke test")
    parser.add_argument("--json", help="write the results here (default: <data>/results.json)")
    parser.add_argument("--clean", action="store_true", help="remove the generated Hub data at the end")
    args = parser.parse_args(argv)
    if args.quick:
        args.throughput_repo, args.rerun_small, args.rerun_large, args.repeat = "2x256MiB", "4x32MiB", "4x256MiB", 1
        args.noop_calls = min(args.noop_calls, 5)
    only = set(args.only or ["throughput", "rerun", "noop"])
    os.makedirs(args.data, exist_ok=True)
    work = os.path.join(args.data, "work")
    os.makedirs(work, exist_ok=True)
    tp_repo, small, large = "bench/tp-" + args.throughput_repo, "bench/rr-" + args.rerun_small, "bench/rr-" + args.rerun_large
    repos = ["%s:%s" % (tp_repo, args.throughput_repo), "%s:%s" % (small, args.rerun_small), "%s:%s" % (large, args.rerun_large)]
    results = {"started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "host": {"cpus": os.cpu_count(), "load": os.getloadavg()},
               "args": vars(args)}
    with Hub(args.data, repos) as hub:
        if "throughput" in only:
            results["throughput"] = bench_throughput(hub, tp_repo, work, args.repeat, not args.no_verify,
                                                     buffered=not args.no_buffered)
        if "rerun" in only:
            results["rerun"] = bench_reruns(hub, small, large, work, args.repeat, not args.no_hf_rerun)
        if "noop" in only:
            results["noop"] = bench_noop(hub, small, work, args.noop_calls, args.repeat)
    results["host"]["load_after"] = os.getloadavg()
    shutil.rmtree(work, ignore_errors=True)
    if args.clean:
        shutil.rmtree(os.path.join(args.data, "hub"), ignore_errors=True)
    report(results)
    path = args.json or os.path.join(args.data, "results.json")
    with open(path, "w") as handle:
        json.dump(results, handle, indent=2)
    print("results written to %s" % path)
    return 0


def report(results):
    lines = []
    tp = results.get("throughput")
    if tp:
        lines.append("throughput, %d files, %.2f GiB (median of %d rounds, wall time of each tool incl. startup):"
                     % (tp["files"], tp["bytes"] / GIB, len(tp["seconds"]["hf_download"])))
        for k, v in tp["median_mb_s"].items():
            lines.append("  %-21s %8.1f MB/s" % (k, v))
        lines.append("  hf_download transfer phase only: %s MB/s" % tp["hf_download_transfer_mb_s"])
    rr = results.get("rerun")
    if rr:
        for label in ("1g", "8g"):
            s = rr["sizes"][label]
            hf_part = ("; hf re-run %s s, after touch %s s" % (statistics.median(s["hf_rerun_s"]), s["hf_touched_rerun_s"])
                       if "hf_rerun_s" in s else "")
            lines.append("re-run %s (%d files, %.2f GiB): ours %s s (pinned %s s), after touch %s s (%d files re-hashed; "
                         "parallel sha256sum %s s)%s" % (
                             label, s["files"], s["bytes"] / GIB, statistics.median(s["rerun_s"]),
                             statistics.median(s["rerun_pinned_s"]), statistics.median(s["touched_rerun_s"]),
                             s["touched_hashed_files"], statistics.median(s["parallel_sha256sum_s"]), hf_part))
    no = results.get("noop")
    if no:
        lines.append("per call via ansible-playbook (%d calls): %s" % (no["calls"], json.dumps(no["ms_per_call"])))
    lines.append("ratios vs targets:")
    flat = {}
    for section in ("throughput", "rerun", "noop"):
        flat.update(dict((k, v) for k, v in (results.get(section) or {}).items() if not isinstance(v, (dict, list))))
    for key, value in sorted(flat.items()):
        if key in ("bytes", "files", "calls", "hf_download_transfer_mb_s") or value is None:
            continue
        target = TARGETS.get(key)
        verdict = ""
        if target:
            op, bound = target
            ok = value >= bound if op == ">=" else value <= bound
            verdict = "  target %s %s: %s" % (op, bound, "met" if ok else "NOT met")
        lines.append("  %-26s %6s%s" % (key, value, verdict))
    results["report"] = lines
    print("\n".join(lines))


if __name__ == "__main__":
    sys.exit(main())
