# SPDX-License-Identifier: Apache-2.0
"""Staged side by side, never in place (issue 13): one directory per commit, unchanged files hard-linked.

hf_download against its own local Hub: a first commit into ``<root>/snapshots/<c1>``, then a commit that changes only
config.json into ``<root>/snapshots/<c2>``.  The second costs config.json's bytes from the Hub, the old snapshot is
untouched (inode and mtime of every file), and both snapshots stay verified without a re-hash.
"""

from __future__ import annotations

import json
import os
import stat

import pytest

from dlhelpers import run_download
from localhub import LocalHub

from ansible_collections.ct200.deploy.plugins.module_utils import disk_preflight, hf_manifest

REPO = "ct200test/staged"
FILES = {
    "config.json": json.dumps({"model_type": "toy", "rev": 1}).encode(),
    "tokenizer.json": json.dumps({"vocab": list(range(200))}).encode(),
    "model-00001-of-00002.safetensors": os.urandom(3 << 20),
    "model-00002-of-00002.safetensors": os.urandom(2 << 20),
    "sub/adapter.safetensors": os.urandom(1 << 20),
}
NEW_CONFIG = json.dumps({"model_type": "toy", "rev": 2, "note": "only this file changes"}).encode()


def new_commit(hub, files, message):
    """A commit on main changing ``files`` (LocalHub.commit when present; else the repo re-added with them)."""
    if hasattr(hub, "commit"):
        return hub.commit(REPO, files, message)
    merged = dict(FILES)
    merged.update(files)
    return hub.add_repo(REPO, merged).commit


@pytest.fixture()
def shub(tmp_path):
    hub = LocalHub(str(tmp_path / "hub"), include_defaults=False)
    hub.add_repo(REPO, dict(FILES))
    hub.start()
    yield hub
    hub.stop()


def hub_bytes(hub):
    """File bytes the Hub sent (2xx answers of /resolve and the CDN; a redirect's small body is not a file's)."""
    return sum(r["bytes_sent"] for r in hub.requests_log()
               if r["kind"] in ("resolve_get", "cdn_get") and 200 <= r["status"] < 300)


def file_ids(directory):
    out = {}
    for path in FILES:
        st = os.lstat(os.path.join(directory, path))
        out[path] = (st.st_ino, st.st_mtime_ns, st.st_size, stat.S_IMODE(st.st_mode))
    return out


def download(hub, root, **kw):
    failed, res = run_download(hub, root, repo_id=REPO, layout="snapshots", **kw)
    assert not failed, res
    return res


def test_revision_bump_costs_only_the_changed_file_and_leaves_the_old_snapshot_untouched(shub, tmp_path):
    root = tmp_path / "models" / REPO
    first = download(shub, root)
    c1 = first["commit"]
    old = str(root / "snapshots" / c1)
    assert first["local_dir"] == old and first["root_dir"] == str(root)
    assert hf_manifest.Manifest.load(old).complete == c1
    before = file_ids(old)
    assert all(mode == 0o444 for _i, _m, _s, mode in before.values()), before  # a verified snapshot is read-only

    c2 = new_commit(shub, {"config.json": NEW_CONFIG}, "config only")
    assert c2 != c1
    # the plan counts only the new bytes; the rest would be linked
    failed, plan = run_download(shub, root, repo_id=REPO, layout="snapshots", check_mode=True)
    assert not failed, plan
    assert plan["local_dir"] == str(root / "snapshots" / c2)
    assert plan["bytes_to_download"] == len(NEW_CONFIG) and plan["files_to_link"] == first["files"] - 1
    assert plan["disk"]["needed_bytes"] == len(NEW_CONFIG)
    assert plan["disk"]["reused_bytes"] == plan["bytes_total"] - len(NEW_CONFIG)
    assert not os.path.exists(plan["local_dir"])  # check mode writes nothing

    shub.reset_stats()
    second = download(shub, root)
    new = second["local_dir"]
    assert new == str(root / "snapshots" / c2) and second["commit"] == c2
    got = hub_bytes(shub)
    assert abs(got - len(NEW_CONFIG)) <= 0.01 * len(NEW_CONFIG), (got, len(NEW_CONFIG))
    assert second["files_linked"] == first["files"] - 1 and second["files_downloaded"] == 1
    assert file_ids(old) == before  # the old snapshot: same inode and mtime of every file
    with open(os.path.join(old, "config.json"), "rb") as handle:
        assert handle.read() == FILES["config.json"]
    now = file_ids(new)
    for path in FILES:
        if path == "config.json":
            assert now[path][0] != before[path][0]
        else:
            assert now[path][0] == before[path][0]  # the same blocks: hard-linked
    with open(os.path.join(new, "config.json"), "rb") as handle:
        assert handle.read() == NEW_CONFIG
    assert hf_manifest.Manifest.load(new).complete == c2

    # both snapshots are verified by their manifests alone: no re-hash, no byte moved
    shub.reset_stats()
    again = download(shub, root, revision=c2)
    assert not again["changed"] and again["files_hashed"] == 0 and hub_bytes(shub) == 0
    back = download(shub, root, revision=c1)
    assert not back["changed"] and back["files_hashed"] == 0 and back["local_dir"] == old
    assert hub_bytes(shub) == 0


def test_a_snapshot_is_never_written_with_another_commits_files(shub, tmp_path):
    root = tmp_path / "m"
    c1 = download(shub, root)["commit"]
    c2 = new_commit(shub, {"config.json": NEW_CONFIG}, "config only")
    failed, res = run_download(shub, root / "snapshots" / c1, repo_id=REPO, revision=c2)
    assert failed and res["code"] == "snapshot_mismatch", res
    assert c1 in res["msg"] and c2 in res["msg"]
    with open(root / "snapshots" / c1 / "config.json", "rb") as handle:
        assert handle.read() == FILES["config.json"]


def test_a_changed_kept_file_is_downloaded_not_linked(shub, tmp_path):
    root = tmp_path / "m"
    c1 = download(shub, root)["commit"]
    shard = root / "snapshots" / c1 / "model-00002-of-00002.safetensors"
    st = os.stat(shard)
    os.utime(shard, ns=(st.st_atime_ns, st.st_mtime_ns))  # same mtime, new ctime: content no longer vouched for
    new_commit(shub, {"config.json": NEW_CONFIG}, "config only")
    shub.reset_stats()
    res = download(shub, root)
    assert res["files_linked"] == res["files"] - 2 and res["files_downloaded"] == 2
    assert hub_bytes(shub) == len(NEW_CONFIG) + len(FILES["model-00002-of-00002.safetensors"])
    assert os.stat(os.path.join(res["local_dir"], shard.name)).st_ino != st.st_ino


def test_a_symlinked_sibling_is_never_followed(shub, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    c1 = download(shub, elsewhere)["commit"]
    root = tmp_path / "m"
    (root / "snapshots").mkdir(parents=True)
    os.symlink(elsewhere / "snapshots" / c1, root / "snapshots" / ("0" * 40))
    new_commit(shub, {"config.json": NEW_CONFIG}, "config only")
    shub.reset_stats()
    res = download(shub, root)
    assert res["files_linked"] == 0 and res["files_downloaded"] == res["files"]
    assert hub_bytes(shub) == res["bytes_total"]


def test_reuse_dirs_links_from_a_flat_directory_verified_by_its_manifest(shub, tmp_path):
    flat = tmp_path / "flat"
    failed, res = run_download(shub, flat, repo_id=REPO)
    assert not failed, res
    new_commit(shub, {"config.json": NEW_CONFIG}, "config only")
    shub.reset_stats()
    res = download(shub, tmp_path / "m", reuse_dirs=[str(flat)])
    assert res["files_linked"] == res["files"] - 1 and hub_bytes(shub) == len(NEW_CONFIG)


def test_disk_preflight_counts_new_bytes_and_names_the_reused_ones():
    class Fs(object):
        device, mountpoint, fstype, free_bytes, total_bytes = "8:1", "/models", "ext4", 5 * 10**9, 10**12

        def as_dict(self):
            return {}

    with pytest.raises(disk_preflight.DiskSpaceError) as err:
        disk_preflight.check_requirements([("target@abc", "/models/t", 6 * 10**9, 590 * 10**9)], 10**9,
                                          fs_lookup=lambda _p: Fs())
    text = str(err.value)
    assert "need 6.0 GB more on /models" in text and "5.0 GB free" in text and "590.0 GB more are hard-linked" in text
    checks = disk_preflight.check_requirements([("target@abc", "/models/t", 1000, 590 * 10**9)], 10**9,
                                               fs_lookup=lambda _p: Fs())
    assert checks[0].needed_bytes == 1000 and checks[0].reused_bytes == 590 * 10**9


def test_a_staging_that_does_not_fit_beside_the_kept_snapshot_is_refused_with_the_numbers(shub, tmp_path):
    root = tmp_path / "m"
    download(shub, root)
    c2 = new_commit(shub, {"config.json": NEW_CONFIG}, "config only")
    # headroom above all that is free, with a margin no other test can free meanwhile (they share /tmp: a
    # headroom of exactly the free bytes passed once when a parallel test removed a venv between the two reads)
    free = disk_preflight.fs_info(str(root)).free_bytes
    failed, res = run_download(shub, root, repo_id=REPO, layout="snapshots", min_free_bytes=free + (1 << 40))
    assert failed and res["code"] == "disk_full", res
    assert "beside the kept snapshots" in res["msg"] and "need %d B more" % len(NEW_CONFIG) in res["msg"]
    assert "hard-linked from the kept snapshots" in res["msg"] and res["bytes_reused"] > 0
    assert not os.path.exists(root / "snapshots" / c2 / "config.json")
