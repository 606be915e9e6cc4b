# SPDX-License-Identifier: Apache-2.0
"""Fleet benchmark: `ct200 rotate-token` and a no-op deploy on 1, 4 and 8 hosts, one run.

Prints wall times as ratios to 1 host and the Hub API calls of each run, counted by the local
Hub itself (GET /_admin/stats, "api" = whoami + model_info + auth_check + tree + paths_info +
refs). Every figure comes from this run; nothing fails on time.

    python benchmarks/fleet/bench_fleet.py --quick --json /tmp/fleet.json

Fleets: "ssh" (default): 8 sandbox hosts, each in its own network namespace with sshd,
reached over SSH as in production, the Hub in a namespace of its own (tests/support/netlab.py,
`tests/support/sandbox/sandbox.sh up N --netns`); "shared": hosts sharing the machine's network namespace,
entered with nsenter (`tests/support/sandbox/sandbox.sh up N --name cli-bench`).

The "no-op deploy" is the real playbooks/deploy_kimi.yml through `ct200 deploy --tags
hf_token,hf_gated_access,model_weights` (the preflight, which carries every phase tag, the token and
access play and the weights plays; the SGLang runtime and serving phases need a 2.3 GB venv per host
and make no Hub call) on hosts that already hold the token and the weights. The first deploy that
puts them there is not timed; it runs deploy_kimi.yml with the same tags and fanout_enabled=false
(the site fan-out needs nginx-light on the hosts, which this fleet does not install).
Rotations go 8, 4, 1 hosts with three valid tokens so that every host of each run changes, with
the playbook's default batches (a canary, then 25 % at a time: 5 batches on 8 hosts, as on 1,000);
the 8-host rotation runs a second time with a canary and then every other host at once
(`--batches 1,100%`), the choice for a small site, so the cost of a batch shows on its own.
`--quick` measures 1 and 8 hosts only (the JSON keys the issue names), one run each.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO), str(REPO / "tests" / "support"), str(REPO / "collections")]

from localhub import LocalHub  # noqa: E402
from localhub.personas import token_for  # noqa: E402

SANDBOX = REPO / "tests" / "support" / "sandbox" / "sandbox.sh"
DEPLOY = REPO / "playbooks" / "deploy_kimi.yml"
# Phases of deploy_kimi.yml the sandbox can run: everything that talks to the Hub.
DEPLOY_TAGS = "hf_token,hf_gated_access,model_weights"
SGLANG_WHEELHOUSE = REPO / ".cache" / "sglang-wheelhouse-0.5.23-cpu"
ROOTFS = os.environ.get("CT200_SANDBOX_ROOTFS", "/var/lib/ct200-sandbox/rootfs")
WHEELHOUSE = REPO / ".cache" / "wheelhouse"
SIZES = (1, 4, 8)
QUICK_SIZES = (1, 8)
# A canary, then every other host in one batch: the rollout a small site would choose.
CANARY_THEN_ALL = "1,100%"
# Three tokens that can read the gated drafter (A, B, C): every rotation moves every host it
# touches to a token it does not hold yet (A on all; 8 at once -> B; 8 -> C; 4 -> A; 1 -> B).
TOKENS = ("granted", "granted_write", "granted_fine_grained")


class Fleet:
    """The hosts and the Hub for one benchmark run."""

    def __init__(self, kind: str, workdir: Path, count: int, prefix: str):
        self.kind, self.workdir, self.count, self.prefix = kind, workdir, count, prefix
        self.state = workdir / "fleet.json"
        self.hub = None
        self.netlab_fleet = None

    def up(self) -> None:
        started = time.monotonic()
        binds = ["%s:/srv/wheelhouse:ro" % WHEELHOUSE] if WHEELHOUSE.is_dir() else []
        # the preflight of deploy_kimi.yml checks that the pinned SGLang is installable from there
        binds += ["%s:/srv/sglang-wheelhouse:ro" % SGLANG_WHEELHOUSE] if SGLANG_WHEELHOUSE.is_dir() else []
        if self.kind == "ssh":
            import netlab
            self.netlab_fleet = netlab.SshFleet(self.state, prefix=self.prefix, count=self.count, rootfs=ROOTFS,
                                                binds=tuple(binds), link_rate="1gbit", hub_rate="400mbit")
            self.netlab_fleet.up()
            self.hub = LocalHub(self.workdir / "hub", host="0.0.0.0", cdn_host=self.netlab_fleet.hub_cdn_address)
            netlab.in_netns(self.netlab_fleet.hub_namespace, self.hub.start)
            self.hub.host = self.netlab_fleet.hub_address
        else:
            argv = [str(SANDBOX), "up", str(self.count), "--name", self.prefix, "--state", str(self.state),
                    "--recreate"]
            for bind in binds:
                argv += ["--bind", bind]
            subprocess.run(argv, check=True, capture_output=True, text=True, timeout=300)
            self.hub = LocalHub(self.workdir / "hub")
            self.hub.start()
        print("fleet: %d %s hosts and the Hub up in %.1f s" % (self.count, self.kind, time.monotonic() - started),
              flush=True)

    def down(self) -> None:
        if self.hub is not None:
            self.hub.stop()
        if self.netlab_fleet is not None:
            self.netlab_fleet.down()
        elif self.state.exists():
            subprocess.run([str(SANDBOX), "down", "--state", str(self.state)], timeout=180, check=False)

    @property
    def hosts(self) -> list[str]:
        return ["%s-%d" % (self.prefix, i) for i in range(1, self.count + 1)]

    def admin(self, path: str, method: str = "GET") -> dict:
        req = urllib.request.Request(self.hub.url + path, method=method, data=b"" if method == "POST" else None)
        with urllib.request.urlopen(req, timeout=30) as resp:
            return json.load(resp)


def secret(workdir: Path, name: str, persona: str) -> Path:
    path = workdir / name
    path.write_text(token_for(persona) + "\n")
    path.chmod(0o600)
    return path


def fleet_env(fleet: Fleet, current_token: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")}
    env.update(ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), CT200_SANDBOX_STATE=str(fleet.state),
               CT200_HF_ENDPOINT=fleet.hub.url, CT200_HF_TOKEN_FILE=str(current_token), PYTHONPATH=str(REPO),
               ANSIBLE_NOCOLOR="1", PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
    return env


def ct200(fleet: Fleet, current_token: Path, *argv: str) -> tuple[float, int, str]:
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "ct200_fleet", *argv, "-i", str(REPO / "inventories" / "sandbox")],
                          cwd=REPO, env=fleet_env(fleet, current_token), capture_output=True, text=True,
                          timeout=3600, check=False)
    return time.monotonic() - started, proc.returncode, proc.stdout + proc.stderr


def ansible_playbook(fleet: Fleet, current_token: Path, *argv: str) -> tuple[float, int, str]:
    """The setup deploy: ansible-playbook itself, because it needs an extra var (fanout_enabled)
    that `ct200 deploy` does not take."""
    started = time.monotonic()
    proc = subprocess.run([os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), *argv,
                           "-i", str(REPO / "inventories" / "sandbox")],
                          cwd=REPO, env=fleet_env(fleet, current_token), capture_output=True, text=True,
                          timeout=3600, check=False)
    return time.monotonic() - started, proc.returncode, proc.stdout + proc.stderr


def limit(fleet: Fleet, n: int) -> str:
    return ",".join(fleet.hosts[:n])


def measure(fleet: Fleet, label: str, current: Path, *argv: str, runner=ct200) -> dict:
    fleet.admin("/_admin/stats/reset", "POST")
    wall, rc, out = runner(fleet, current, *argv)
    stats = fleet.admin("/_admin/stats")
    result = {"wall_s": round(wall, 2), "rc": rc, "hub_api_calls": stats["api"],
              "hub_calls_by_kind": {k: stats[k] for k in ("whoami", "model_info", "auth_check", "tree",
                                                          "paths_info", "refs") if stats.get(k)}}
    print("%-22s %7.1f s  rc=%d  Hub API calls %d %s" % (label, wall, rc, stats["api"], result["hub_calls_by_kind"]),
          flush=True)
    if rc != 0:
        print("\n".join(out.splitlines()[-25:]), flush=True)
    return result


def run(args) -> dict:
    workdir = Path(tempfile.mkdtemp(prefix="ct200-bench-fleet-"))
    fleet = Fleet(args.fleet, workdir, max(SIZES), args.prefix)
    sizes = QUICK_SIZES if args.quick else SIZES
    results: dict = {"fleet": args.fleet, "hosts": max(SIZES), "forks": args.forks, "quick": args.quick,
                     "sizes": list(sizes), "rotation_batches": "playbook default [1, '25%']",
                     "noop_deploy": {}, "rotation": {}}
    current = secret(workdir, "current-token", TOKENS[0])
    forks = ["--forks", str(args.forks)]
    try:
        fleet.up()
        print("setup: first deploy on all %d hosts (not timed)" % fleet.count, flush=True)
        setup = measure(fleet, "setup deploy x%d" % fleet.count, current, str(DEPLOY), "--tags", DEPLOY_TAGS,
                        "-e", "fanout_enabled=false",
                        "-e", "ct200_preflight_json=%s" % (workdir / "setup-preflight.json"), *forks,
                        runner=ansible_playbook)
        results["setup_deploy"] = setup
        if setup["rc"] != 0:
            raise SystemExit("bench: the setup deploy failed (see above); no figure would mean anything")
        for _round in range(args.repeat):
            for n in sizes:
                results["noop_deploy"].setdefault(str(n), []).append(measure(
                    fleet, "no-op deploy x%d" % n, current, "deploy", "--tags", DEPLOY_TAGS,
                    "--limit", limit(fleet, n), *forks))
        # canary, then the other 7 at once: every host moves from A to B
        results["rotation_canary_then_all_8"] = measure(
            fleet, "rotation x8 %s" % CANARY_THEN_ALL, current, "rotate-token", "--token-file",
            str(secret(workdir, "new-token-canary-all", TOKENS[1])), "--batches", CANARY_THEN_ALL,
            "--limit", limit(fleet, 8), *forks)
        # default batches, 8 -> 4 -> 1 hosts: B -> C, then A, then B, so every host touched changes
        for n, persona in zip(sorted(sizes, reverse=True), TOKENS[2:] + TOKENS[:2]):
            new = secret(workdir, "new-token-%d" % n, persona)
            results["rotation"][str(n)] = [measure(fleet, "rotation x%d" % n, current, "rotate-token", "--token-file",
                                                   str(new), "--limit", limit(fleet, n), *forks)]
    finally:
        fleet.down()
    return summarize(results)


def median_wall(runs: list[dict]) -> float:
    return statistics.median(r["wall_s"] for r in runs)


def summarize(results: dict) -> dict:
    for kind in ("noop_deploy", "rotation"):
        runs = results[kind]
        if "1" not in runs or not all(r["rc"] == 0 for rs in runs.values() for r in rs):
            continue
        base = median_wall(runs["1"])
        for n in SIZES[1:]:
            if str(n) in runs:
                results["%s_%d_over_1" % (kind, n)] = round(median_wall(runs[str(n)]) / base, 3)
    canary_all = results.get("rotation_canary_then_all_8")
    if canary_all and canary_all["rc"] == 0 and "1" in results["rotation"] and results["rotation"]["1"][0]["rc"] == 0:
        results["rotation_8_over_1_canary_then_all"] = round(
            canary_all["wall_s"] / median_wall(results["rotation"]["1"]), 3)
    for n in SIZES:
        if str(n) in results["noop_deploy"]:
            results["hub_api_calls_noop_deploy_%d" % n] = max(r["hub_api_calls"] for r in results["noop_deploy"][str(n)])
        if str(n) in results["rotation"]:
            results["hub_api_calls_rotation_%d" % n] = results["rotation"][str(n)][0]["hub_api_calls"]
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true",
                        help="1 and 8 hosts, one no-op deploy each (default: 1, 4, 8 hosts, --repeat 3)")
    parser.add_argument("--repeat", type=int, help="no-op deploys per size (median is used)")
    parser.add_argument("--fleet", choices=("ssh", "shared"), default="ssh",
                        help="ssh: own network namespaces + sshd (default); shared: nsenter, shared namespace")
    parser.add_argument("--forks", type=int, default=8, help="ansible forks (default 8: every host at once)")
    parser.add_argument("--prefix", default=os.environ.get("CT200_FLEET_PREFIX", "clibench"),
                        help="sandbox host name prefix: PREFIX-1..8 (default $CT200_FLEET_PREFIX or clibench)")
    parser.add_argument("--json", metavar="FILE", help="write the results as JSON")
    args = parser.parse_args()
    args.repeat = args.repeat or (1 if args.quick else 3)
    started = time.monotonic()
    load_before = [round(x, 2) for x in os.getloadavg()]
    results = run(args)
    results["bench_wall_s"] = round(time.monotonic() - started, 1)
    results["load_average"] = {"before": load_before, "after": [round(x, 2) for x in os.getloadavg()]}
    print("\nfleet: %s hosts, forks %d, load average before %s, after %s" % (
        results["fleet"], args.forks, " ".join(map(str, load_before)), " ".join(map(str, results["load_average"]["after"]))))
    for key in ("rotation_4_over_1", "rotation_8_over_1", "rotation_8_over_1_canary_then_all", "noop_deploy_4_over_1", "noop_deploy_8_over_1",
                "hub_api_calls_noop_deploy_1", "hub_api_calls_noop_deploy_4", "hub_api_calls_noop_deploy_8",
                "hub_api_calls_rotation_1", "hub_api_calls_rotation_8"):
        missing = "not measured (--quick)" if "_4" in key and args.quick else "n/a (a run failed, see above)"
        print("%-30s %s" % (key, results.get(key, missing)))
    print("benchmark wall time %.0f s" % results["bench_wall_s"])
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
