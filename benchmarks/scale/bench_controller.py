# SPDX-License-Identifier: Apache-2.0
"""Controller cost at scale: CPU seconds and wall per host of a no-op deploy_kimi at N = 8, 64, 256.

    .venv/bin/python benchmarks/scale/bench_controller.py --json /tmp/scale.json [--quick] [--label before]

Hosts: `ansible_connection=local` inventory hosts, each with its own paths under one temporary root
(ROOT/hosts/hNNNN/: token file, models dir, SGLang venv path, its own Python wrapper as
ansible_python_interpreter). They are real hosts to Ansible (every task, module transfer and
result goes through a worker fork and a local connection) but cost no container, no sshd and no
network namespace. One huggingface_hub venv (ROOT/venv) serves them all: the hf_client role only
checks it on a no-op.

The no-op: the real playbooks/deploy_kimi.yml with `--tags hf_token,hf_gated_access,model_weights`
(the preflight, which carries every phase tag, the token and access play, the weights play; the
SGLang runtime and serving phases need a 2.3 GB venv per host and make no Hub call), against a
local Hub (tests/support/localhub).

Setup (not timed): a first deploy on the first --real-hosts hosts (default 8; with fanout_enabled=false:
the site fan-out would start a web server per host) installs the token and downloads both repositories
into each of their models dirs; their state is then replicated into the other hosts (Hosts.replicate:
weights and config files hard-linked, each .ct200 state dir and the token file copied, progress files
rewritten to name the host's own dir, manifests brought to the ctime the links left, as ct200's own
hf_manifest.refresh_ctime does for links it makes; every manifest entry must then pass the manifest's
stat check). At 256 hosts: 94 s (a first deploy on all 256 took 2111 s). Each measured
run uses an inventory of exactly N of those hosts (no --limit, so the site is the N hosts) and must
report changed=0 and failed=0 on every host in its recap, else the bench exits non-zero: that run is
what proves the replicated state is a deployed host's.

CPU: getrusage(RUSAGE_CHILDREN) deltas around each ansible-playbook run (user + sys of the whole
process tree: the controller process, its worker forks, and, because the connection is local,
the modules the "hosts" run). The host side is measured apart: each host's interpreter wrapper
appends the CPU of the module it ran (bash `times`), so controller CPU = tree - modules. CPU
seconds stand against other load on the machine; wall does not: the load average is reported.

The site plan alone (plugins/module_utils/site_plan.py: site_layout, peer_list for every host, report
over 10,000 rows) is timed in this process.

Nothing fails on time; the goals are reported (growth_exponent <= 1.05, site_plan_10000_s < 2).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO), str(REPO / "tests" / "support"), str(REPO / "collections")]

from localhub import LocalHub  # noqa: E402
from localhub.personas import token_for  # noqa: E402

DEPLOY = REPO / "playbooks" / "deploy_kimi.yml"
DEPLOY_TAGS = "hf_token,hf_gated_access,model_weights"
SANDBOX_GROUP_VARS = REPO / "inventories" / "sandbox" / "group_vars" / "ct200.yml"
WHEELHOUSE = REPO / ".cache" / "wheelhouse"
SGLANG_WHEELHOUSE = REPO / ".cache" / "sglang-wheelhouse-0.5.23-cpu"
SYSTEM_PYTHON = "/usr/bin/python3"
HF_CLIENT_PACKAGES = yaml.safe_load((REPO / "roles" / "hf_client" / "defaults" / "main.yml").read_text())["hf_client_packages"]
SIZES = (8, 64, 256)
QUICK_SIZES = (8, 64)
RECAP = re.compile(r"^(\S+)\s+:\s+ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)\s+skipped=(\d+)")
# the estimate for 1,000 hosts at forks 50 (see the README): the controller's CPU per host spread over its
# cores, or the waves of the play, whichever is longer, plus the fixed part of one run
ESTIMATE_FORMULA = ("T(1000, forks 50) = T_fixed + max(1000 * c_ctrl / cores, waves * t_task) with c_ctrl = controller "
                    "CPU per host (slope of controller CPU over N, modules excluded), cores = 4 (a small AWX node), "
                    "waves = host_tasks * ceil(1000 / 50) with host_tasks = module runs per host (round trips; controller-only "
                    "tasks are in c_ctrl), t_task = 1.0 s (one task over SSH with pipelining), "
                    "T_fixed = controller CPU of a run at N = 0 (intercept)")
ESTIMATE_CORES = 4
ESTIMATE_T_TASK = 1.0

# the host's interpreter: its own token path (huggingface_hub's HF_TOKEN_PATH, as a host with its own
# home would have), then the CPU of the module it ran, for the controller/host split
WRAPPER = """#!/bin/bash
export HF_TOKEN_PATH={token}
{python} "$@"
rc=$?
times >> {cpu_log}
exit $rc
"""


def host_name(i: int) -> str:
    return "h%04d" % i


class Hosts:
    """N cheap hosts under ROOT, a shared huggingface_hub venv, and the local Hub."""

    def __init__(self, root: Path, count: int):
        self.root, self.count = root, count
        self.hub = LocalHub(root / "hub")
        self.token_file = root / "token"
        self.venv = root / "venv"
        self.cpu_logs = root / "cpu"
        self.venv_python = str(self.venv / "bin" / "python3")

    def up(self) -> None:
        self.hub.start()
        self.token_file.write_text(token_for("granted") + "\n")
        self.token_file.chmod(0o600)
        self.cpu_logs.mkdir()
        # the huggingface_hub venv all hosts share, as the hf_client role would install it
        subprocess.run([SYSTEM_PYTHON, "-m", "venv", str(self.venv)], check=True, timeout=300)
        subprocess.run([str(self.venv / "bin" / "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                        "--no-index", "--find-links", str(WHEELHOUSE)] + HF_CLIENT_PACKAGES, check=True, timeout=600)
        for i in range(1, self.count + 1):
            home = self.host_dir(i)
            (home / "models").mkdir(parents=True)
            # the host's Pythons: the system one (ansible_python_interpreter) and its huggingface_hub venv
            # (hf_client_venv: a bin/python of its own that runs the shared venv's interpreter)
            (home / "venv" / "bin").mkdir(parents=True)
            for wrapper, python in ((home / "python3", SYSTEM_PYTHON), (home / "venv" / "bin" / "python", self.venv_python)):
                wrapper.write_text(WRAPPER.format(token=home / "hf" / "token", python=python,
                                                  cpu_log=self.cpu_logs / host_name(i)))
                wrapper.chmod(0o755)

    def down(self) -> None:
        self.hub.stop()

    def replicate(self, real: int) -> dict:
        """Give hosts real+1..count the state the first deploy left on hosts 1..real (host i copies host
        (i-1) % real + 1): the weights and config files as hard links (what a copy of the same bytes is to a
        stat check, at no disk or CPU cost), each `.ct200` state dir (manifest, progress, lock) and the token
        file as files of the host's own. Then every host's manifests (the real hosts' too: a new link changes
        an inode's ctime) vouch for their files at the ctime the links left, as hf_manifest.refresh_ctime does
        for links ct200 makes itself (same inode, same mtime, so the same bytes), and each progress file names
        its own host's dir. Every file entry must then pass the manifest's own stat check (same_identity),
        else the setup fails; the measured no-op proves the rest (changed=0 on every host)."""
        from ansible_collections.ct200.deploy.plugins.module_utils import hf_manifest
        started = time.monotonic()
        links = copies = entries = 0
        for i in range(real + 1, self.count + 1):
            made = link_state(self.host_dir((i - 1) % real + 1), self.host_dir(i))
            links, copies = links + made[0], copies + made[1]
        for i in range(1, self.count + 1):
            entries += vouch_state(self.host_dir((i - 1) % real + 1), self.host_dir(i))
        # no state file of a host names another host's dir (the progress files did, before the rewrite above)
        named = re.compile(re.escape(str(self.root / "hosts")) + r"/(h\d{4})")
        left = sorted(str(p) for p in (self.root / "hosts").glob("*/**/%s/*" % hf_manifest.STATE_DIR)
                      if set(named.findall(p.read_text(errors="replace"))) - {p.relative_to(self.root / "hosts").parts[0]})
        if left:
            raise SystemExit("bench: replicated state still names another host's dir: %s" % ", ".join(left[:5]))
        return {"real_hosts": real, "replicated_hosts": self.count - real, "links": links, "copies": copies,
                "manifest_entries_checked": entries, "replicate_s": round(time.monotonic() - started, 2)}

    def host_dir(self, i: int) -> Path:
        return self.root / "hosts" / host_name(i)

    def inventory(self, n: int) -> Path:
        group_vars = yaml.safe_load(SANDBOX_GROUP_VARS.read_text())
        group_vars.update(
            hf_client_pip_extra_args="--no-index --find-links %s" % WHEELHOUSE,
            sglang_runtime_wheelhouse=str(SGLANG_WHEELHOUSE),
            sglang_runtime_requirements=str(SGLANG_WHEELHOUSE / "requirements.txt"),
            ct200_download_user="root",
        )
        hosts = {}
        for i in range(1, n + 1):
            home = self.host_dir(i)
            hosts[host_name(i)] = {
                "ansible_connection": "local", "ansible_python_interpreter": str(home / "python3"),
                "ct200_sandbox_index": i, "ct200_models_dir": str(home / "models"),
                "hf_token_path": str(home / "hf" / "token"), "rotate_token_path": str(home / "hf" / "token"),
                "sglang_runtime_venv": str(home / "sglang-venv"),
                "hf_client_venv": str(home / "venv"),
            }
        path = self.root / ("inventory-%d.yml" % n)
        path.write_text(yaml.safe_dump({"all": {"children": {"ct200": {"hosts": hosts, "vars": group_vars}}}}))
        return path

    def module_cpu(self) -> tuple:
        """CPU seconds of the modules the hosts ran since the last call (children of their interpreter wrappers),
        and the most module runs one host made (each a round trip to a real host)."""
        total, runs = 0.0, 0
        for log in self.cpu_logs.iterdir():
            children = log.read_text().splitlines()[1::2]  # `times`: shell line, then children line
            runs = max(runs, len(children))
            for line in children:
                for part in line.split():
                    m = re.match(r"(\d+)m([\d.]+)s", part)
                    total += int(m.group(1)) * 60 + float(m.group(2)) if m else 0.0
            log.unlink()
        return total, runs


def link_state(src: Path, dst: Path) -> tuple:
    """A deployed host's state (models, preflight cache, token) from SRC into DST: data files hard-linked,
    the token and each .ct200 state dir copied (a host's own lock, manifest and progress). (links, copies)."""
    from ansible_collections.ct200.deploy.plugins.module_utils import hf_manifest
    links = copies = 0
    for sub in ("models", "preflight-cache", "hf"):
        for dirpath, _dirnames, filenames in os.walk(src / sub):
            rel = Path(dirpath).relative_to(src)
            (dst / rel).mkdir(exist_ok=True)
            shutil.copymode(dirpath, dst / rel)
            for name in filenames:
                if sub == "hf" or hf_manifest.STATE_DIR in rel.parts:
                    shutil.copy2(Path(dirpath) / name, dst / rel / name)
                    copies += 1
                else:
                    os.link(Path(dirpath) / name, dst / rel / name)
                    links += 1
    return links, copies


def vouch_state(src: Path, home: Path) -> int:
    """HOME's manifests vouch for its files as they are after the links (refresh_ctime: same inode and
    mtime, new ctime) and its progress files name HOME's dirs, not SRC's. Every entry must pass the
    manifest's stat check, else SystemExit. Returns the entries checked."""
    from ansible_collections.ct200.deploy.plugins.module_utils import hf_manifest
    entries = 0
    for manifest_file in sorted(home.glob("**/%s/%s" % (hf_manifest.STATE_DIR, hf_manifest.MANIFEST_NAME))):
        local_dir = str(manifest_file.parent.parent)
        manifest = hf_manifest.Manifest.load(local_dir)
        if manifest.warning or not manifest.files:
            raise SystemExit("bench: %s: no manifest to replicate (%s)" % (manifest_file, manifest.warning))
        for path, entry in list(manifest.files.items()):
            st = os.lstat(os.path.join(local_dir, path))
            manifest.refresh_ctime(st.st_ino, st.st_mtime_ns, entry["ctime_ns"], st.st_ctime_ns)
        for path, entry in manifest.files.items():
            st = os.lstat(os.path.join(local_dir, path))
            if not (hf_manifest.same_identity(entry, st) and entry["size"] == st.st_size):
                raise SystemExit("bench: replicated %s/%s does not pass its manifest's stat check" % (local_dir, path))
            entries += 1
        if manifest.dirty:
            manifest.save()
        progress_file = manifest_file.parent / "progress.json"
        if progress_file.exists() and src != home:
            tmp = progress_file.with_name(".progress.json.bench")
            tmp.write_text(progress_file.read_text().replace(str(src) + "/", str(home) + "/"))
            shutil.copymode(progress_file, tmp)
            os.replace(tmp, progress_file)
    return entries


def playbook(hosts: Hosts, inventory: Path, *argv: str, env_extra: dict | None = None, timeout: int = 7200) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_TOKEN_PATH")}
    env.update(ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), CT200_HF_ENDPOINT=hosts.hub.url,
               CT200_HF_TOKEN_FILE=str(hosts.token_file), PYTHONPATH=str(REPO), ANSIBLE_NOCOLOR="1",
               PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
    env.update(env_extra or {})
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    load = os.getloadavg()
    started = time.monotonic()
    proc = subprocess.run([os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), str(DEPLOY),
                           "-i", str(inventory), "--tags", DEPLOY_TAGS, *argv],
                          cwd=hosts.root, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    wall = time.monotonic() - started
    log = hosts.root / ("run-%d.log" % len(list(hosts.root.glob("run-*.log"))))
    log.write_text(proc.stdout + proc.stderr)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    recap = {}
    for line in proc.stdout.split("PLAY RECAP")[-1].splitlines():
        m = RECAP.match(line.strip())
        if m:
            recap[m.group(1)] = dict(zip(("ok", "changed", "unreachable", "failed", "skipped"), map(int, m.groups()[1:])))
    return {"rc": proc.returncode, "wall_s": round(wall, 2), "cpu_s": round(cpu, 2),
            "cpu_user_s": round(after.ru_utime - before.ru_utime, 2), "cpu_sys_s": round(after.ru_stime - before.ru_stime, 2),
            "load_average_before": [round(x, 2) for x in load], "load_average_after": [round(x, 2) for x in os.getloadavg()],
            "recap": recap, "log": str(log),
            "tail": proc.stdout[-3000:] + proc.stderr[-2000:]}


def noop_verdict(run: dict, n: int) -> str | None:
    hosts = {h: r for h, r in run["recap"].items() if h != "localhost"}
    if run["rc"] != 0:
        return "rc=%d" % run["rc"]
    if len(hosts) != n:
        return "recap names %d hosts, not %d" % (len(hosts), n)
    bad = sorted(h for h, r in run["recap"].items() if r["changed"] or r["failed"] or r["unreachable"])
    return "changed/failed/unreachable on %s" % ", ".join(bad[:10]) if bad else None


def task_counts(run: dict) -> dict:
    """ok + skipped per host (the tasks each host walked), min and max over the hosts."""
    counts = [r["ok"] + r["skipped"] for h, r in run["recap"].items() if h != "localhost"]
    return {"min": min(counts), "max": max(counts)} if counts else {}


def site_plan_10000(count: int = 10000) -> dict:
    """The controller-side stages of the site plan over COUNT hosts, as plugins/action/site_plan.py calls them:
    site (layout and the peer list of each repository), fetch (what each host lacks) and report (one row per host)."""
    from ansible_collections.ct200.deploy.plugins.module_utils import site_plan
    group = ["host%05d" % i for i in range(count)]
    repos = ["moonshotai/Kimi-K2.6", "z-lab/Kimi-K2.6-DFlash"]
    commit = "c" * 40
    runtime = {"gpu_count": 8, "gpus": [{"name": "RTX", "memory_gib": 96, "numa_node": 0}] * 8, "gpu_numa": [0] * 8,
               "numa_nodes": 1, "driver_version": "580.95.05", "cuda_driver_version": "13.0", "nvcc_version": "12.9",
               "no_gpu_standin": False, "installed_version": "0.5.23", "pinned_version": "0.5.23", "installable": True,
               "source": "index", "dflash": True, "ddtree": None, "failed_checks": []}
    probe = {"results": [{"item": {"repo_id": r}, "planning": "manifest"} for r in repos]}
    fingerprint = "sha256:aaaaaaaaaaaa"
    timings = {}
    started = time.perf_counter()
    layout = site_plan.site_layout(group, group, None, None, 2)
    addresses = dict((h, site_plan.peer_address(["10.%d.%d.%d" % (i >> 16 & 255, i >> 8 & 255, i & 255)], h))
                     for i, h in enumerate(layout["hosts"]))
    ports = dict((h, 8790) for h in layout["hosts"])
    peers = dict((name, site_plan.peer_list(layout["hosts"], addresses, ports, name)) for name in ("target", "drafter"))
    timings["site_s"] = time.perf_counter() - started
    t0 = time.perf_counter()
    fetch = site_plan.fetch_plan(repos, group, dict((h, probe) for h in group),
                                 dict((h, {"fingerprint": fingerprint}) for h in group), fingerprint, "/models",
                                 dict((r, commit) for r in repos), layout)
    hub = site_plan.hub_facts({"commits": dict((r, commit) for r in repos)}, None, None, fetch["fetch"], None, repos)
    timings["fetch_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    kept = site_plan.kept_layout(layout, group, group)
    rows = []
    for host in kept["hosts"]:
        fit = {"fit": {"pool_tokens": 110000, "context_length": 65536}}
        disk = {"filesystems": [{"free_bytes": 2 * 10**12}]}
        failed = site_plan.failed_checks([("runtime", runtime["failed_checks"])], None, hub, len(repos), None, disk, fit)
        rows.append(site_plan.host_row(host, runtime, {"fingerprint": fingerprint}, hub, repos, None, disk, fit, failed))
    out = site_plan.report(rows, kept)
    timings["report_s"] = time.perf_counter() - t0
    total = time.perf_counter() - started
    assert out["ok"] and len(out["rows"]) == count and not fetch["fetch"], "the 10,000-host plan is not a no-op"
    return dict({"site_plan_10000_s": round(total, 3), "site_plan_peer_urls": sum(len(p) for p in peers.values()),
                 "site_plan_report_json_bytes": len(out["json"])},
                **dict(("site_plan_10000_" + k, round(v, 3)) for k, v in timings.items()))


def slope(xs, ys) -> float:
    """Least-squares slope of ys over xs."""
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)


def summarize(results: dict) -> None:
    runs = results["noop_deploy"]
    ns = sorted(int(n) for n, r in runs.items() if r.get("verdict") is None)
    for n in ns:
        r = runs[str(n)]
        results["cpu_s_per_host_%d" % n] = round(r["cpu_s"] / n, 3)
        results["controller_cpu_s_per_host_%d" % n] = round(r["controller_cpu_s"] / n, 3)
        results["wall_s_per_host_%d" % n] = round(r["wall_s"] / n, 3)
    if len(ns) >= 2:
        xs = [math.log(n) for n in ns]
        results["growth_exponent"] = round(slope(xs, [math.log(runs[str(n)]["cpu_s"]) for n in ns]), 3)
        results["growth_exponent_controller"] = round(slope(xs, [math.log(runs[str(n)]["controller_cpu_s"]) for n in ns]), 3)
        c_ctrl = slope(ns, [runs[str(n)]["controller_cpu_s"] for n in ns])
        fixed = runs[str(ns[0])]["controller_cpu_s"] - c_ctrl * ns[0]
        # round trips per host: the module runs one host made (controller-only tasks are in c_ctrl), else every task
        tasks = runs[str(ns[-1])].get("module_runs_per_host") or runs[str(ns[-1])]["tasks_per_host"]["max"]
        waves = tasks * math.ceil(1000 / 50)
        estimate = max(fixed, 0) + max(1000 * c_ctrl / ESTIMATE_CORES, waves * ESTIMATE_T_TASK)
        results["noop_deploy_1000_hosts_forks50_estimate_s"] = round(estimate, 1)
        results["noop_deploy_1000_hosts_forks50_formula"] = ESTIMATE_FORMULA
        results["noop_deploy_1000_hosts_forks50_inputs"] = {
            "c_ctrl_s_per_host": round(c_ctrl, 3), "T_fixed_s": round(fixed, 2), "host_tasks": tasks,
            "waves": waves, "cores": ESTIMATE_CORES, "t_task_s": ESTIMATE_T_TASK,
            "cpu_bound_s": round(1000 * c_ctrl / ESTIMATE_CORES, 1), "wave_bound_s": round(waves * ESTIMATE_T_TASK, 1)}


def setup_hosts(hosts: Hosts, results: dict, root: Path, forks: list, real: int) -> None:
    """The first deploy (not timed) on hosts 1..real: token, weights, the preflight's state; then that state
    replicated into the other hosts (Hosts.replicate)."""
    hosts.up()
    real = min(real, hosts.count)
    print("setup: first deploy on %d of %d hosts (not timed)" % (real, hosts.count), flush=True)
    # Without fan-out each host fetches its config files into its own snapshot (the preflight's fetch stage reads
    # every host's own ct200_models_dir): one run on all hosts. A second try only if a host failed for another reason.
    for attempt in range(2):
        setup = playbook(hosts, hosts.inventory(real), "-e", "fanout_enabled=false",
                         "-e", "ct200_preflight_json=%s" % (root / ("setup-preflight-%d.json" % attempt)), *forks)
        results["setup_deploy_%d" % attempt] = {k: v for k, v in setup.items() if k not in ("tail", "recap")}
        print("setup deploy %d: %.1f s wall, %.1f s CPU, rc=%d, load %s" % (
            attempt, setup["wall_s"], setup["cpu_s"], setup["rc"], setup["load_average_before"]), flush=True)
        if setup["rc"] == 0:
            break
    if setup["rc"] != 0:
        print(setup["tail"])
        raise SystemExit("bench: the setup deploy failed (see above); no figure would mean anything")
    if real < hosts.count:
        results["setup_replicate"] = hosts.replicate(real)
        print("setup: replicated into %(replicated_hosts)d hosts: %(links)d hard links, %(copies)d state files, "
              "%(manifest_entries_checked)d manifest entries pass the stat check, %(replicate_s).1f s" % results["setup_replicate"],
              flush=True)
    hosts.module_cpu()  # drop the setup's


def run(args) -> dict:
    sizes = tuple(sorted(args.sizes)) if args.sizes else QUICK_SIZES if args.quick else SIZES
    root = Path(args.reuse) if args.reuse else Path(tempfile.mkdtemp(prefix="ct200-bench-scale-"))
    hosts = Hosts(root, max(*sizes, args.hosts or 0))
    results: dict = {"label": args.label, "quick": args.quick, "sizes": list(sizes), "forks": args.forks,
                     "hosts": "ansible_connection=local, per-host paths under one tmp root", "tags": DEPLOY_TAGS,
                     "noop_deploy": {}}
    results.update(site_plan_10000())
    print("site plan at 10,000 hosts: %.3f s (site %.3f, fetch %.3f, report %.3f)" % (
        results["site_plan_10000_s"], results["site_plan_10000_site_s"], results["site_plan_10000_fetch_s"],
        results["site_plan_10000_report_s"]), flush=True)
    forks = ["--forks", str(args.forks)]
    failed = None
    try:
        if args.reuse:
            # the hosts a kept run (--keep) set up, for a second measurement (after a change to the playbooks)
            # without a second setup; the Hub's repositories are generated alike, so the commits are the same
            hosts.hub.start()
            hosts.module_cpu()
            results["reused_setup"] = str(root)
        else:
            setup_hosts(hosts, results, root, forks, args.real_hosts)
        for n in sizes:
            inv = hosts.inventory(n)
            extra = {"ANSIBLE_CALLBACKS_ENABLED": "ansible.posix.profile_tasks"} if args.profile else {}
            r = playbook(hosts, inv, "-e", "ct200_preflight_json=%s" % (root / ("preflight-%d.json" % n)), *forks,
                         env_extra=extra)
            module_cpu, r["module_runs_per_host"] = hosts.module_cpu()
            r["module_cpu_s"] = round(module_cpu, 2)
            r["controller_cpu_s"] = round(r["cpu_s"] - r["module_cpu_s"], 2)
            r["verdict"] = noop_verdict(r, n)
            r["tasks_per_host"] = task_counts(r)
            tail = r.pop("tail")
            if args.profile:
                (Path(args.profile) / ("profile-%d.txt" % n)).write_text(tail)
            recap = r.pop("recap")
            r["recap_localhost"] = recap.get("localhost")
            results["noop_deploy"][str(n)] = r
            print("no-op deploy x%-4d %7.1f s wall  %7.1f s CPU (controller %.1f, modules %.1f)  %.3f s CPU/host  "
                  "tasks/host %s  load %s  %s" % (
                      n, r["wall_s"], r["cpu_s"], r["controller_cpu_s"], r["module_cpu_s"], r["cpu_s"] / n,
                      r["tasks_per_host"], r["load_average_before"][0], r["verdict"] or "changed=0"), flush=True)
            if r["verdict"]:
                print(tail)
                failed = "no-op deploy x%d is not a no-op: %s" % (n, r["verdict"])
                break
    finally:
        hosts.down()
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    summarize(results)
    if failed:
        results["failed"] = failed
    return results


def merge(paths: list) -> dict:
    """One result from several invocations (one per N, each its own process): their no-op runs side by
    side and the keys over all of them (growth_exponent needs two N at least); the site plan of the last."""
    parts = [json.loads(Path(p).read_text()) for p in paths]
    results = {"merged_from": [str(p) for p in paths], "noop_deploy": {}, "invocations": []}
    for part in parts:
        results["noop_deploy"].update(part.get("noop_deploy") or {})
        results["invocations"].append(dict((k, part.get(k)) for k in (
            "label", "sizes", "forks", "load_average", "bench_wall_s", "reused_setup", "site_plan_10000_s")))
        results.update(dict((k, v) for k, v in part.items() if k.startswith("site_plan_10000")
                            or k in ("hosts", "tags", "forks", "label")))
    results["sizes"] = sorted(int(n) for n in results["noop_deploy"])
    summarize(results)
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="N = 8 and 64 only")
    parser.add_argument("--sizes", type=int, nargs="+", help="other host counts (a trial run; the JSON keys follow them)")
    parser.add_argument("--forks", type=int, default=8, help="ansible forks (default 8)")
    parser.add_argument("--label", default="", help="a name for this run (before, after, ...), kept in the JSON")
    parser.add_argument("--profile", metavar="DIR", help="enable profile_tasks and keep each run's output tail in DIR")
    parser.add_argument("--reuse", metavar="ROOT", help="measure on the hosts a --keep run left in ROOT (no setup run)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary root (hosts, inventories)")
    parser.add_argument("--hosts", type=int, help="set up this many hosts (a later --reuse may measure up to it)")
    parser.add_argument("--real-hosts", type=int, default=8,
                        help="deploy this many hosts for real in the setup and replicate their state into the others "
                             "(default 8; the number of hosts for a first deploy on every host)")
    parser.add_argument("--merge", metavar="JSON", nargs="+", help="combine the JSON of runs at other N; runs nothing")
    parser.add_argument("--json", metavar="FILE", help="write the results as JSON")
    args = parser.parse_args()
    started = time.monotonic()
    load_before = [round(x, 2) for x in os.getloadavg()]
    if args.merge:
        results = merge(args.merge)
        args.forks = results.get("forks") or args.forks
    else:
        results = run(args)
        results["bench_wall_s"] = round(time.monotonic() - started, 1)
        results["load_average"] = {"before": load_before, "after": [round(x, 2) for x in os.getloadavg()]}
    print("\nscale: %s, forks %d, load average %s" % (results["hosts"], args.forks, results.get("load_average")))
    for key in ("cpu_s_per_host_8", "cpu_s_per_host_64", "cpu_s_per_host_256", "controller_cpu_s_per_host_8",
                "controller_cpu_s_per_host_64", "controller_cpu_s_per_host_256", "wall_s_per_host_8", "wall_s_per_host_64",
                "wall_s_per_host_256", "growth_exponent", "growth_exponent_controller", "site_plan_10000_s",
                "noop_deploy_1000_hosts_forks50_estimate_s"):
        print("%-42s %s" % (key, results.get(key, "not measured")))
    print("goals: growth_exponent <= 1.05: %s; site_plan_10000_s < 2: %s" % (
        results.get("growth_exponent", "n/a") if "growth_exponent" not in results else results["growth_exponent"] <= 1.05,
        results["site_plan_10000_s"] < 2))
    print("benchmark wall time %s s" % results.get("bench_wall_s"))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2, sort_keys=True) + "\n")
    if results.get("failed"):
        print("bench: " + results["failed"], file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
