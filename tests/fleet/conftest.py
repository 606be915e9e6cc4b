# SPDX-License-Identifier: Apache-2.0
"""One SSH fleet per test session, shared by every test under tests/fleet/.

``ssh_fleet`` boots 8 sandbox hosts (``fleet-1..8``), each in its own network
namespace with sshd, reached by Ansible's ``ssh`` connection through
inventories/sandbox (as production hosts are), and a local Hub in a namespace
of its own behind a slower link (``ct200-hub`` in the hosts' /etc/hosts).
Tests share the hosts: leave them as you found them (sshd running, links at
the session rates) or restore in a ``finally``.

Environment knobs: CT200_FLEET_SIZE (8), CT200_FLEET_PREFIX (fleet; change it
when two checkouts run fleet tests at the same time), CT200_FLEET_LINK_RATE
(1gbit), CT200_FLEET_HUB_RATE (400mbit), CT200_FLEET_STATE (state file; the
default lives in .cache/sandbox/ so a killed session is cleaned by the next).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "support"))

import netlab  # noqa: E402

ROOTFS = os.environ.get("CT200_SANDBOX_ROOTFS", "/var/lib/ct200-sandbox/rootfs")
FLEET_SIZE = int(os.environ.get("CT200_FLEET_SIZE", "8"))
PREFIX = os.environ.get("CT200_FLEET_PREFIX", "fleet")
STATE = Path(os.environ.get("CT200_FLEET_STATE", REPO / ".cache" / "sandbox" / "ssh-fleet.json"))
WHEELHOUSE = REPO / ".cache" / "wheelhouse"
# deploy_kimi.yml's preflight (every phase tag runs it) checks that the pinned SGLang is installable
# from there (inventories/sandbox: sglang_runtime_wheelhouse); nothing is installed from it by tag hf_token
SGLANG_WHEELHOUSE = REPO / ".cache" / "sglang-wheelhouse-0.5.23-cpu"
# A second SGLang build for the served-fleet rollout of an SGLang version (tests/fleet/test_fleet_rollout.py):
# scripts/sglang-wheelhouse.sh builds it (real sglang wheel from PyPI) when the served scenarios are asked for.
NEXT_SGLANG_VERSION = "0.5.22"
NEXT_SGLANG_WHEELHOUSE = REPO / ".cache" / f"sglang-wheelhouse-{NEXT_SGLANG_VERSION}-cpu"
NEXT_SGLANG_MOUNT = f"/srv/sglang-wheelhouse-{NEXT_SGLANG_VERSION}"
APT_REPO = REPO / ".cache" / "apt-repo"
# One SGLang venv per version for the whole fleet (served_fleet): a 2.3 GB install per host is what
# the single served host (tests/integration) proves; eight copies would prove nothing more and cost
# minutes. The first host installs it through the role, the others find it complete (the role's stamp).
# The same for huggingface_hub's venv (hf_client): eight creations and pip runs cost ~20 s of each deploy.
SHARED = REPO / ".cache" / "sandbox" / f"{PREFIX}-shared"
SHARED_MOUNT = "/srv/ct200-shared"
DEPLOY = REPO / "playbooks" / "deploy_kimi.yml"
RELEASES = "/var/lib/ct200/releases"


class FleetSession:
    """What fleet tests get: the hosts, the Hub, and ways to drive both."""

    def __init__(self, fleet: netlab.SshFleet, hub):
        self.fleet = fleet
        self.hub = hub
        self.inventory = netlab.INVENTORY
        self.state_path = fleet.state_path
        self.hosts: list[str] = fleet.hosts
        self.addresses: dict[str, str] = {h: fleet.address(h) for h in self.hosts}
        self.hub_url: str = hub.url
        self.up_seconds = fleet.up_seconds

    def env(self, extra: dict | None = None) -> dict:
        """Environment for Ansible runs: the sandbox inventory's group_vars read
        the Hub endpoint (and token *file paths*) from it."""
        return {"CT200_HF_ENDPOINT": self.hub_url, **(extra or {})}

    def run_playbook(self, path, extra_vars_file=None, limit=None, env=None, args=(), timeout=900) -> netlab.Run:
        return self.fleet.run_playbook(path, extra_vars_file=extra_vars_file, limit=limit,
                                       env=self.env(env), args=tuple(args), timeout=timeout)

    def popen_playbook(self, path, env=None, args=()):
        return self.fleet.popen_playbook(path, env=self.env(env), args=tuple(args))

    def ansible(self, pattern, module, module_args=None, *extra, env=None, timeout=300) -> netlab.Run:
        return self.fleet.ansible(pattern, module, module_args, *extra, env=self.env(env), timeout=timeout)

    def leader_pid(self, host) -> int:
        """PID (in the machine's namespace) of HOST's systemd."""
        return self.fleet.host(host)["leader_pid"]

    def exec(self, host, cmd, input=None, timeout=60):
        return self.fleet.exec(host, cmd, input=input, timeout=timeout)

    def ssh(self, host, cmd, input=None, timeout=30):
        return self.fleet.ssh(host, cmd, input=input, timeout=timeout)

    def release_state(self, host) -> dict:
        """HOST's releases/state.json ({} when it has none yet)."""
        out = self.exec(host, f"cat {RELEASES}/state.json").stdout
        return json.loads(out) if out.strip() else {}

    def release_record(self, host, rid) -> dict:
        """HOST's record of release RID (releases/RID.json), which must exist."""
        res = self.exec(host, f"cat {RELEASES}/{rid}.json")
        assert res.returncode == 0, (host, rid, res.stderr)
        return json.loads(res.stdout)

    def stop_sshd(self, host):
        self.fleet.stop_sshd(host)

    def start_sshd(self, host, timeout=30):
        self.fleet.start_sshd(host, timeout=timeout)

    def hub_stats(self) -> dict:
        return self.hub.stats()

    def reset_token(self, persona: str) -> None:
        """Test cleanup, not the product path: every host's download-user token file holds PERSONA's token
        (no backups), whatever an earlier test on the shared hosts left there."""
        from localhub import token_for

        token_dir = "/root/.cache/huggingface"
        for host in self.hosts:
            res = self.exec(host, f"mkdir -p {token_dir}; rm -rf {token_dir}/token.* {token_dir}/.token* "
                                  f"; umask 077; cat > {token_dir}/token.reset && "
                                  f"mv {token_dir}/token.reset {token_dir}/token", input=token_for(persona) + "\n")
            assert res.returncode == 0, res.stderr

    def hub_reset(self) -> None:
        self.hub.reset_stats()


def start_hub_in_namespace(fleet: netlab.SshFleet, data_dir: Path):
    """LocalHub inside the fleet's Hub namespace, on both of its addresses:
    ``.2`` for the API and ``.3`` as the CDN origin of LFS redirects (another
    origin, so clients drop Authorization as with the real CDN)."""
    from localhub import LocalHub

    hub = LocalHub(data_dir, host="0.0.0.0", cdn_host=fleet.hub_cdn_address)
    netlab.in_netns(fleet.hub_namespace, hub.start)
    # Clients use the API address (hub.url): 0.0.0.0 only names the bind, and
    # the namespace has no other interface than its link to the lab bridge.
    hub.host = fleet.hub_address
    return hub


def require_fleet_prereqs() -> None:
    if os.geteuid() != 0:
        pytest.skip("the SSH fleet needs root (network namespaces, systemd-nspawn)")
    if not os.access(os.path.join(ROOTFS, "usr/sbin/sshd"), os.X_OK):
        pytest.fail(f"the rootfs {ROOTFS} has no sshd: run tests/support/sandbox/build-rootfs.sh "
                    "(or point CT200_SANDBOX_ROOTFS at a rootfs built by the current script)")


def served_scenarios() -> bool:
    return os.environ.get("CT200_FLEET_SCENARIOS") == "1"


def build_next_sglang_wheelhouse() -> bool:
    """The second SGLang build's wheelhouse (idempotent, ~15 s); False (the version rollout then skips) when
    PyPI cannot be reached."""
    run = subprocess.run([str(REPO / "scripts" / "sglang-wheelhouse.sh"), NEXT_SGLANG_VERSION], capture_output=True,
                         text=True, timeout=900, check=False)
    if run.returncode != 0:
        print("sglang-wheelhouse %s failed: %s" % (NEXT_SGLANG_VERSION, run.stderr[-2000:]))
    return run.returncode == 0 and (NEXT_SGLANG_WHEELHOUSE / "requirements.txt").is_file()


@pytest.fixture(scope="session")
def ssh_fleet(tmp_path_factory):
    require_fleet_prereqs()
    from tests.fanout.netns_site import apt_repo
    apt_repo()  # nginx-light for the fan-out tests, bound at /srv/apt-repo (bootstrap builds it; this makes sure)
    binds = (f"{WHEELHOUSE}:/srv/wheelhouse:ro",) if WHEELHOUSE.is_dir() else ()
    binds += (f"{SGLANG_WHEELHOUSE}:/srv/sglang-wheelhouse:ro",) if SGLANG_WHEELHOUSE.is_dir() else ()
    binds += (f"{APT_REPO}:/srv/apt-repo:ro",) if APT_REPO.is_dir() else ()
    if served_scenarios() and build_next_sglang_wheelhouse():
        binds += (f"{NEXT_SGLANG_WHEELHOUSE}:{NEXT_SGLANG_MOUNT}:ro",)
    SHARED.mkdir(parents=True, exist_ok=True)
    binds += (f"{SHARED}:{SHARED_MOUNT}",)
    fleet = netlab.SshFleet(STATE, prefix=PREFIX, count=FLEET_SIZE, rootfs=ROOTFS, binds=binds,
                            link_rate=os.environ.get("CT200_FLEET_LINK_RATE", "1gbit"),
                            hub_rate=os.environ.get("CT200_FLEET_HUB_RATE", "400mbit"))
    hub = None
    try:
        fleet.up()
        hub = start_hub_in_namespace(fleet, tmp_path_factory.mktemp("fleet-hub"))
        yield FleetSession(fleet, hub)
    finally:
        if hub is not None:
            hub.stop()
        fleet.down()


class ServedFleet:
    """The SSH fleet after one full deploy_kimi.yml: every host serves its instance (the SGLang
    stand-in, weights from the fleet's Hub). Tests may change releases but must leave every host
    serving when they finish."""

    def __init__(self, session: FleetSession, extra_vars_file: Path, env: dict, deploy_seconds: float):
        self.session = session
        self.hosts = session.hosts
        self.extra_vars_file = extra_vars_file
        self.env = env
        self.deploy_seconds = deploy_seconds
        # each host's release state and current record as the full deploy left them (read_deployed_releases):
        # later tests roll releases forward and back, so what the deploy recorded is kept from before they run
        self.deployed_releases: dict = {}
        # the second SGLang build a version rollout goes to: version, its wheelhouse on the hosts, its venv
        self.next_sglang = {"version": NEXT_SGLANG_VERSION, "wheelhouse": NEXT_SGLANG_MOUNT,
                            "venv": f"{SHARED_MOUNT}/sglang/{NEXT_SGLANG_VERSION}"}

    def port(self, host: str) -> int:
        return 30000 + self.hosts.index(host) + 1  # inventories/sandbox: 30000 + ct200_sandbox_index

    def base_url(self, host: str) -> str:
        """The instance's URL as seen from HOST itself (it listens on loopback)."""
        return f"http://127.0.0.1:{self.port(host)}"

    def run_playbook(self, path, limit=None, env=None, args=(), timeout=900) -> netlab.Run:
        return self.session.run_playbook(path, extra_vars_file=self.extra_vars_file, limit=limit,
                                         env={**self.env, **(env or {})}, args=args, timeout=timeout)

    def deploy(self, limit=None, args=(), timeout=1200) -> netlab.Run:
        return self.run_playbook(DEPLOY, limit=limit, args=args, timeout=timeout)

    def read_deployed_releases(self) -> None:
        """Keep what /var/lib/ct200/releases holds on every host now: its state.json and current record."""
        for host in self.hosts:
            state = self.session.release_state(host)
            current = state.get("current")
            record = self.session.release_record(host, current) if current else None
            self.deployed_releases[host] = {"state": state, "record": record}


SERVED_VARS = f"""---
# served_fleet (tests/fleet/conftest.py): one venv per SGLang version, shared by the fleet's hosts, and one
# huggingface_hub venv (the first host's deploy creates both; the others find them complete by their stamps)
sglang_runtime_venv: "{SHARED_MOUNT}/sglang/{{{{ sglang_runtime_version }}}}"
hf_client_venv: "{SHARED_MOUNT}/hf-client-venv"
ct200_preflight_json: "{{{{ lookup('ansible.builtin.env', 'CT200_SERVED_PREFLIGHT') }}}}"
"""


@pytest.fixture(scope="session")
def served_fleet(ssh_fleet, tmp_path_factory):
    """Every fleet host serving after one full deploy_kimi.yml (the first host installs the shared
    venv through the role first, so that eight hosts do not install into it at once)."""
    if not served_scenarios():
        # One full deploy of 8 hosts is ~500 s here and the rollout and router scenarios on it ~20-40 min more:
        # together they would take the suite past CI's limit. They run on demand and in the benchmarks.
        pytest.skip("served-fleet scenarios (full 8-host deploy, rollouts, router) run with CT200_FLEET_SCENARIOS=1")
    import time

    from localhub import token_for

    tmp = tmp_path_factory.mktemp("served-fleet")
    token = tmp / "token"
    token.write_text(token_for("granted") + "\n")
    token.chmod(0o600)
    extra = tmp / "served.yml"
    extra.write_text(SERVED_VARS)
    env = {"CT200_HF_TOKEN_FILE": str(token), "CT200_SERVED_PREFLIGHT": str(tmp / "preflight.json")}
    prepare = REPO / "tests" / "fleet" / "served_prepare.yml"
    started = time.monotonic()
    run = ssh_fleet.run_playbook(prepare, env=env)
    assert run.rc == 0, run.out[-5000:]
    served = ServedFleet(ssh_fleet, extra, env, 0.0)
    try:
        first = served.deploy(limit=ssh_fleet.hosts[0], args=("--tags", "sglang_runtime"))
        assert first.rc == 0, first.out[-8000:]
        full = served.deploy()
        assert full.rc == 0, full.out[-8000:]
        served.deploy_seconds = time.monotonic() - started
        served.read_deployed_releases()
        print("served_fleet: fleet up %.0f s; prepare %.0f s, runtime on %s %.0f s, full deploy %.0f s (%.0f s in all)"
              % (ssh_fleet.up_seconds or 0, run.seconds, ssh_fleet.hosts[0], first.seconds, full.seconds,
                 served.deploy_seconds))
        yield served
    finally:
        served.run_playbook(DEPLOY, args=("--tags", "sglang_service", "-e", "sglang_service_state=stopped"),
                            timeout=600)
        ssh_fleet.run_playbook(prepare, env=env, args=("-e", "served_state=absent"))
