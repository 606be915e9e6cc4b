# SPDX-License-Identifier: Apache-2.0
"""playbooks/fanout_weights.yml (the model_weights role fanning out) end to end over SSH on the 8-host fleet (each host in its own network
namespace, the Hub in another one behind a slower link).

One repository of 8 LFS shards: the seed downloads it from the Hub, the seven others fetch it from their
peers through a binary tree.  Every file on every host must hash to the Hub's sha256 (the LFS oid), the
Hub must have sent exactly one copy of the repository for the whole site (its own counters), every host
must have shown progress, and no weight server may be left running afterwards.

nginx-light comes from the shared flat apt repository of scripts/local-apt-repo.sh (the one the
netns fan-out tests use too), bind-mounted into the hosts by the ssh_fleet fixture; tests/fleet/fanout_prepare.yml
points apt at it.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from localhub.personas import token_for

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
PLAYBOOK = REPO / "playbooks" / "fanout_weights.yml"
PREPARE = REPO / "tests" / "fleet" / "fanout_prepare.yml"
REPO_ID = "ff/fanout"
MODELS = "/srv/ff-models"
LOCAL_DIR = f"{MODELS}/{REPO_ID}"
SERVICE = "ct200-weight-peer"
PORT = 8790
PERSONA = "granted"


@pytest.fixture(scope="module")
def site(ssh_fleet, tmp_path_factory):
    """The fleet with the repository on its Hub, nginx-light installable and the Hub client venv."""
    tmp = tmp_path_factory.mktemp("ff")
    token_file = tmp / "hub.token"
    token_file.write_text(token_for(PERSONA) + "\n")
    token_file.chmod(0o600)
    repo = ssh_fleet.hub.add_repo(f"{REPO_ID}:8x1MiB")
    env = {"CT200_HF_TOKEN_FILE": str(token_file)}
    common = ("-e", f"fo_models_dir={MODELS}")
    try:
        run = ssh_fleet.run_playbook(PREPARE, env=env, args=common,
                                     timeout=1200)
        assert run.rc == 0, run.out[-5000:]
        yield ssh_fleet, repo, env
    finally:
        ssh_fleet.run_playbook(PREPARE, env=env, args=("-e", "fo_state=absent", *common))


def host_digests(fleet, host) -> dict[str, str]:
    """sha256 of every regular file of the repository's snapshot on HOST (<root>/snapshots/<commit>, one commit
    here; its state directory aside)."""
    res = fleet.exec(host, f"cd {LOCAL_DIR}/snapshots/*/ && find . -path ./.ct200 -prune -o -type f -print0 | xargs -0r sha256sum")
    assert res.returncode == 0, res.stderr
    return dict((line.split(None, 1)[1].strip()[2:], line.split()[0]) for line in res.stdout.splitlines())


def server_left(fleet, host) -> list[str]:
    """What is left of the weight server on HOST: an active unit, its unit file, a listener on its port."""
    left = []
    if fleet.exec(host, f"systemctl is-active --quiet {SERVICE}").returncode == 0:
        left.append("unit active")
    if fleet.exec(host, f"test -e /etc/systemd/system/{SERVICE}.service").returncode == 0:
        left.append("unit file")
    probe = (f"import socket; s=socket.socket(); s.settimeout(3); "
             f"print(s.connect_ex(('{fleet.addresses[host]}', {PORT})))")
    res = fleet.exec(host, ["python3", "-c", probe])
    if res.stdout.strip() == "0":
        left.append(f"a listener on port {PORT}")
    return left


def test_fanout_playbook_one_hub_copy_every_host_verified_servers_removed(site, tmp_path):
    fleet, repo, env = site
    fleet.hub_reset()
    extra = tmp_path / "fanout.json"
    extra.write_text(json.dumps({
        "fanout_hosts": "ct200",
        "fanout_degree": 2,
        "fanout_poll_interval": 1,
        "model_weights_repos": [{"name": "fo", "repo_id": REPO_ID, "revision": "main", "local_dir": LOCAL_DIR}],
    }))
    run = fleet.run_playbook(PLAYBOOK, extra_vars_file=extra, env=env, timeout=1800)
    assert run.rc == 0, run.out[-6000:]
    assert token_for(PERSONA) not in run.out

    expected = dict((path, f.sha256) for path, f in repo.files.items())
    lfs = dict((path, f) for path, f in repo.files.items() if f.lfs)
    assert len(lfs) == 8
    seed, peers = fleet.hosts[0], fleet.hosts[1:]
    got = dict((host, host_digests(fleet, host)) for host in fleet.hosts)
    assert got[seed] == expected  # the seed has all of it, from the Hub
    fanned = dict((p, d) for p, d in expected.items() if not any(part.startswith(".") for part in p.split("/")))
    for host in peers:
        assert got[host] == fanned, host  # peers: every served file, each sha256-equal to the Hub's

    stats = fleet.hub_stats()
    assert stats["cdn_get"] == len(lfs)  # every shard left the Hub once, for the whole site
    assert stats["cdn_bytes_sent"] == sum(f.size for f in lfs.values())
    # file bytes the Hub delivered (200/206 answers; a /resolve 302 to the CDN carries a small body of its own)
    delivered = sum(r["bytes_sent"] for r in fleet.hub.stats_obj.requests_log()
                    if r["kind"] in ("cdn_get", "resolve_get") and r["status"] in (200, 206))
    assert delivered == sum(f.size for f in repo.files.values())  # one copy of the repository for the site

    for host in fleet.hosts:
        assert host in run.out.split("wait, printing one progress line", 1)[1], host  # per-host progress
        assert server_left(fleet, host) == [], host


def test_two_slices_of_the_site_each_fan_out_inside_their_own_run(site, tmp_path):
    """AWX job slicing runs a site as separate ansible-playbook runs (--limit here): each run's tree
    must stay inside it (its own seed, no parent in the other run) and say what the extra copy costs."""
    fleet, repo, env = site
    fleet.hub_reset()
    sliced_dir = f"{MODELS}/sliced"
    extra = tmp_path / "slices.json"
    extra.write_text(json.dumps({
        "fanout_hosts": "ct200", "fanout_degree": 2, "fanout_poll_interval": 1,
        "model_weights_repos": [{"name": "fo", "repo_id": REPO_ID, "revision": "main", "local_dir": sliced_dir}],
    }))
    halves = [fleet.hosts[:4], fleet.hosts[4:]]
    for half in halves:
        run = fleet.run_playbook(PLAYBOOK, extra_vars_file=extra, env=env, limit=",".join(half), timeout=1200)
        assert run.rc == 0, run.out[-6000:]
        said = " ".join(run.out.split())  # the yaml callback folds long lines (and doubles a quote)
        assert "this run covers 4 of the site" in said and "8 hosts (a job slice or --limit)" in said, said[-3000:]
        assert f"seeded by {half[0]}" in said
    lfs = [f for f in repo.files.values() if f.lfs]
    stats = fleet.hub_stats()
    assert stats["cdn_get"] == 2 * len(lfs)  # one Hub copy per slice, as the runs said
    expected = dict((p, f.sha256) for p, f in repo.files.items() if f.lfs)
    for host in fleet.hosts:
        # wherever the layout puts the files under the repository's directory (one revision here)
        res = fleet.exec(host, f"find {sliced_dir} -name 'model-*.safetensors' -not -path '*/.ct200/*' "
                               "-exec sha256sum {} +")
        got = dict((line.split()[1].rsplit("/", 1)[-1], line.split()[0]) for line in res.stdout.splitlines())
        assert got == expected, host
        assert server_left(fleet, host) == [], host
