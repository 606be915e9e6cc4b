# SPDX-License-Identifier: Apache-2.0
"""ct200.deploy.release_gc on a fake host tree: release records, snapshots sharing blobs by hard links, venvs per
version, an installed unit and a fake /proc.  It keeps exactly what it must and frees only unshared blocks."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys

import pytest

from ansible_collections.ct200.deploy.plugins.module_utils import hf_manifest, release_gc

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODULE = os.path.join(REPO, "plugins", "modules", "release_gc.py")
C = dict((n, str(n) * 40) for n in range(1, 6))  # commits 1..5
SHARD = os.urandom(64 << 10)


def make_snapshot(root, commit, config, link_from=None):
    """A snapshot with a manifest vouching for its files; the shard hard-linked from ``link_from`` when given."""
    snap = os.path.join(root, "snapshots", commit)
    os.makedirs(snap)
    with open(os.path.join(snap, "config.json"), "wb") as handle:
        handle.write(config)
    shard = os.path.join(snap, "model.safetensors")
    if link_from:
        os.link(os.path.join(link_from, "model.safetensors"), shard)
    else:
        with open(shard, "wb") as handle:
            handle.write(SHARD)
    refresh_manifest(snap, commit)
    return snap


def refresh_manifest(snap, commit):
    manifest = hf_manifest.Manifest.load(snap)
    manifest.bind_repo("o/t", "model")
    for name in ("config.json", "model.safetensors"):
        path = os.path.join(snap, name)
        with open(path, "rb") as handle:
            digest = hashlib.sha256(handle.read()).hexdigest()
        manifest.record(name, os.lstat(path), digest, digest, commit, None)
    manifest.save()


def release(rdir, rid, target, venv, at):
    with open(os.path.join(rdir, rid + ".json"), "w") as handle:
        json.dump({"id": rid, "target": {"repo_id": "o/t", "commit": os.path.basename(target), "dir": target},
                   "drafter": None, "sglang_version": os.path.basename(venv), "venv": venv, "config_hash": "x",
                   "units": {}, "measured": {}, "recorded_at": at}, handle)


@pytest.fixture()
def host(tmp_path):
    root = str(tmp_path / "models" / "o" / "t")
    s1 = make_snapshot(root, C[1], b'{"r": 1}')
    s2 = make_snapshot(root, C[2], b'{"r": 2}', link_from=s1)
    s3 = make_snapshot(root, C[3], b'{"r": 3}', link_from=s1)
    s4 = make_snapshot(root, C[4], b'{"r": 4}', link_from=s1)
    s5 = make_snapshot(root, C[5], b'{"r": 5}')  # its own shard: not shared
    for n, snap in enumerate((s1, s2, s3, s4), 1):  # each link changed the shared inode's ctime (hf_download records it)
        refresh_manifest(snap, C[n])
    venvs = str(tmp_path / "opt" / "sglang")
    for version in ("0.5.21", "0.5.22", "0.5.23", "0.5.24"):
        os.makedirs(os.path.join(venvs, version, "bin"))
    os.symlink(s1, os.path.join(root, "snapshots", "f" * 40))  # never followed nor removed
    rdir = str(tmp_path / "releases")
    os.makedirs(rdir)
    release(rdir, "r000000000001", s1, os.path.join(venvs, "0.5.21"), "2026-01-01T00:00:00Z")
    release(rdir, "r000000000002", s2, os.path.join(venvs, "0.5.22"), "2026-01-02T00:00:00Z")
    release(rdir, "r000000000003", s3, os.path.join(venvs, "0.5.23"), "2026-01-03T00:00:00Z")
    with open(os.path.join(rdir, "state.json"), "w") as handle:
        json.dump({"current": "r000000000003", "previous": "r000000000002", "keep": 2}, handle)
    units = str(tmp_path / "systemd")
    os.makedirs(units)
    proc = str(tmp_path / "proc")
    os.makedirs(os.path.join(proc, "4242"))
    with open(os.path.join(proc, "4242", "cmdline"), "wb") as handle:  # a process still running release 4's files
        handle.write(b"/usr/bin/python\0-m\0sglang.launch_server\0--model-path\0" + s4.encode() + b"/\0")
    return dict(root=root, s=[None, s1, s2, s3, s4, s5], venvs=venvs, rdir=rdir, units=units, proc=proc, tmp=tmp_path)


def blocks_of(top):
    return [os.lstat(os.path.join(d, n)) for d, _dirs, names in os.walk(top) for n in names]


def gc_plan(h, **kw):
    return release_gc.plan(h["rdir"], [h["root"]], [h["venvs"]], unit_dir=h["units"], proc_root=h["proc"], **kw)


def test_keeps_current_previous_unit_and_process_references_and_deletes_the_rest(host):
    s = host["s"]
    with open(os.path.join(host["units"], "sglang@kimi.service"), "w") as handle:
        handle.write("[Service]\nExecStart=%s/0.5.24/bin/python -m sglang.launch_server\n" % host["venvs"])
    result = gc_plan(host)
    kept = dict((k["path"], k["why"]) for k in result["keep"])
    assert sorted(d["path"] for d in result["delete"]) == sorted([s[1], s[5], os.path.join(host["venvs"], "0.5.21")])
    assert kept[s[3]] == kept[os.path.join(host["venvs"], "0.5.23")] == "release r000000000003"
    assert kept[s[2]] == "release r000000000002"
    assert "running process" in kept[s[4]] and "unit" in kept[os.path.join(host["venvs"], "0.5.24")]
    assert [k["path"] for k in result["skipped"]] == [os.path.join(host["root"], "snapshots", "f" * 40)]
    # s1's shard is still linked from kept snapshots: only its config and s5's files are freed
    expected = sum(st.st_blocks * 512 for top in (s[1], s[5]) for st in blocks_of(top)
                   if not (top == s[1] and st.st_nlink > 1))
    assert result["bytes_freed"] == expected > 0
    before_ids = dict((p, os.lstat(os.path.join(p, "model.safetensors")).st_ino) for p in (s[2], s[3], s[4]))

    assert release_gc.apply(result) == []
    assert not os.path.exists(s[1]) and not os.path.exists(s[5])
    assert os.path.islink(os.path.join(host["root"], "snapshots", "f" * 40))  # the link itself stays
    for path, ino in before_ids.items():  # the shared blob stays, and its manifests still vouch for it (no re-hash)
        st = os.lstat(os.path.join(path, "model.safetensors"))
        assert st.st_ino == ino
        manifest = hf_manifest.Manifest.load(path)
        entry = manifest.entry("model.safetensors")
        assert manifest.stat_check("model.safetensors", entry["oid"], entry["size"])[0] == hf_manifest.OK

    again = gc_plan(host)  # idempotent
    assert again["delete"] == [] and again["bytes_freed"] == 0


def test_keep_counts_the_most_recent_records_beyond_current_and_previous(host):
    result = gc_plan(host, keep=3)
    assert result["kept_releases"] == ["r000000000003", "r000000000002", "r000000000001"]
    assert host["s"][1] not in [d["path"] for d in result["delete"]]


def test_no_state_means_nothing_is_deleted(host):
    os.unlink(os.path.join(host["rdir"], "state.json"))
    result = gc_plan(host)
    assert result["delete"] == [] and "nothing is deleted" in result["warnings"][0]


def test_a_missing_current_record_stops_the_collection(host):
    os.unlink(os.path.join(host["rdir"], "r000000000003.json"))
    with pytest.raises(release_gc.GcError, match="current release r000000000003 has no readable record"):
        gc_plan(host)


def test_a_snapshot_being_downloaded_is_kept(host):
    from ansible_collections.ct200.deploy.plugins.module_utils.hf_transfer_lock import DirLock

    lock = DirLock(host["s"][5]).acquire()
    try:
        kept = dict((k["path"], k["why"]) for k in gc_plan(host)["keep"])
    finally:
        lock.release()
    assert kept[host["s"][5]] == "a download holds its lock"


def test_module_check_mode_and_diff_change_nothing(host):
    args = {"release_dir": host["rdir"], "weights_roots": [host["root"]], "venv_roots": [host["venvs"]],
            "unit_dir": host["units"], "proc_root": host["proc"], "_ansible_check_mode": True, "_ansible_diff": True}
    env = dict(os.environ, PYTHONPATH=os.path.join(REPO, "collections"))
    out = subprocess.run([sys.executable, MODULE], input=json.dumps({"ANSIBLE_MODULE_ARGS": args}), text=True,
                         capture_output=True, env=env, timeout=60, check=False)
    result = json.loads(out.stdout)
    assert result["changed"] is True and result["bytes_freed"] > 0, result
    assert host["s"][1] + "\n" in result["diff"]["before"] and host["s"][1] not in result["diff"]["after"]
    assert os.path.isdir(host["s"][1]) and os.path.isdir(host["s"][5])
