# SPDX-License-Identifier: Apache-2.0
"""hf_download on hostile ground (issue 7): changed files, planted symlinks, two runs at once,
a full disk and bad input.  Each run is its own process against the local Hub over real HTTP;
every case fails on the code before the fix."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess

import pytest

from dlhelpers import (
    BIG,
    WEIGHTS,
    assert_tree_matches,
    hub_files,
    kill,
    read_progress,
    run_download,
    sha256_of,
    start_module,
    finish_module,
    wait_for,
)
from ansible_collections.ct200.deploy.plugins.module_utils import hf_manifest
from ansible_collections.ct200.deploy.plugins.module_utils.hf_transfer_engine import part_key

SHARD2 = "model-00002-of-00003.safetensors"
BIG1 = "model-00001-of-00002.safetensors"


def snapshot(root):
    """relative path -> (kind, sha256 or link target) of everything under ``root``."""
    out = {}
    for dirpath, dirnames, names in os.walk(root):
        for name in names + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]:
            full = os.path.join(dirpath, name)
            rel = os.path.relpath(full, root)
            if os.path.islink(full):
                out[rel] = ("link", os.readlink(full))
            else:
                out[rel] = ("file", sha256_of(full))
    return out


# ------------------------------------------------------------------ integrity
def _offset_outside_samples(size):
    spans = [(o, o + hf_manifest.SAMPLE_BLOCK) for o in hf_manifest.sample_offsets(size)]
    offset = spans[3][1] + 4096
    assert not any(lo <= offset < hi or lo <= offset + 8 < hi for lo, hi in spans)
    return offset


@pytest.mark.parametrize("restore_mtime", [False, True], ids=["touched", "mtime-restored"])
def test_bytes_flipped_outside_every_sampled_block_are_found_and_refetched(hub, tmp_path, restore_mtime):
    dest = tmp_path / "w"
    assert not run_download(hub, dest)[0]
    target = dest / SHARD2
    before = os.stat(target)
    with open(target, "r+b") as handle:
        handle.seek(_offset_outside_samples(before.st_size))
        data = handle.read(8)
        handle.seek(-8, os.SEEK_CUR)
        handle.write(bytes(b ^ 0xFF for b in data))
    if restore_mtime:
        os.utime(target, ns=(before.st_atime_ns, before.st_mtime_ns))
        assert os.stat(target).st_mtime_ns == before.st_mtime_ns
    else:
        os.utime(target, ns=(before.st_atime_ns + 10**9, before.st_mtime_ns + 10**9))
    hub.reset_stats()
    failed, res = run_download(hub, dest)
    assert not failed, res["msg"]
    assert res["downloaded"] == [SHARD2] and res["files_hashed"] == 1
    assert_tree_matches(hub, WEIGHTS, dest)
    entry = json.loads((dest / ".ct200" / "manifest.json").read_text())["files"][SHARD2]
    st = os.stat(target)
    assert (entry["ctime_ns"], entry["ino"], entry["mtime_ns"]) == (st.st_ctime_ns, st.st_ino, st.st_mtime_ns)


# ------------------------------------------------------------------- symlinks
def _victim(tmp_path, text=b"precious root-owned bytes\n"):
    victim = tmp_path / "outside" / "victim"
    victim.parent.mkdir()
    victim.write_bytes(text)
    return victim


def test_a_planted_part_symlink_is_never_written_through(hub, tmp_path):
    victim = _victim(tmp_path)
    size, sha = hub_files(hub, WEIGHTS)[SHARD2]
    tmp = tmp_path / "w" / ".ct200" / "tmp"
    tmp.mkdir(parents=True)
    key = part_key(SHARD2, sha)
    os.symlink(victim, tmp / (key + ".part"))
    (tmp / (key + ".state")).write_text(json.dumps(
        {"path": SHARD2, "oid": sha, "size": size, "segments": [[0, size, 0]]}))
    failed, res = run_download(hub, tmp_path / "w")
    assert not failed, res["msg"]
    assert victim.read_bytes() == b"precious root-owned bytes\n"
    assert_tree_matches(hub, WEIGHTS, tmp_path / "w")


def test_a_planted_state_temp_symlink_is_never_truncated(hub, tmp_path):
    victim = _victim(tmp_path)
    size, sha = hub_files(hub, BIG)[BIG1]
    tmp = tmp_path / "b" / ".ct200" / "tmp"
    tmp.mkdir(parents=True)
    key = part_key(BIG1, sha)
    os.symlink(victim, tmp / (key + ".state.tmp"))  # the fixed temp name the old writer used
    # a pause mid-file makes the resume state be saved while the file is in flight
    hub.set_faults([{"kind": "stall", "path_glob": "/cdn/%s" % sha, "fraction": 0.3, "seconds": 4, "count": 1}])
    failed, res = run_download(hub, tmp_path / "b", repo_id=BIG, max_workers=1)
    assert not failed, res["msg"]
    assert victim.read_bytes() == b"precious root-owned bytes\n"
    assert_tree_matches(hub, BIG, tmp_path / "b")


def test_a_directory_symlink_inside_local_dir_is_refused_not_followed(hub, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    dest = tmp_path / "w"
    dest.mkdir()
    os.symlink(outside, dest / "extra")  # the repo has extra/adapter.bin
    failed, res = run_download(hub, dest)
    assert failed and res["code"] == "unsafe_path", res
    assert "extra" in res["msg"] and "symlink" in res["msg"]
    assert os.listdir(outside) == []


def test_a_symlinked_state_dir_is_refused_not_followed(hub, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    dest = tmp_path / "w"
    dest.mkdir()
    os.symlink(outside, dest / ".ct200")
    failed, res = run_download(hub, dest)
    assert failed and res["code"] == "unsafe_path", res
    assert os.listdir(outside) == []


def test_a_symlink_where_a_file_belongs_is_replaced_not_followed(hub, tmp_path):
    victim = _victim(tmp_path, b'{"model_type": "toy", "hidden_size": 64}')  # even the right content
    dest = tmp_path / "w"
    dest.mkdir()
    os.symlink(victim, dest / "config.json")
    failed, res = run_download(hub, dest)
    assert not failed, res["msg"]
    assert not os.path.islink(dest / "config.json") and "config.json" in res["downloaded"]
    assert victim.read_bytes() == b'{"model_type": "toy", "hidden_size": 64}'
    assert_tree_matches(hub, WEIGHTS, dest)


# ------------------------------------------------------------ lock before plan
def test_a_second_run_waits_for_the_lock_then_plans_from_what_the_first_left(hub, tmp_path):
    sha = hub_files(hub, BIG)[BIG1][1]
    hub.set_faults([{"kind": "stall", "path_glob": "/cdn/%s" % sha, "fraction": 0.5, "seconds": 6, "count": 1}])
    dest = tmp_path / "b"
    first = start_module(dict(repo_id=BIG, local_dir=str(dest), endpoint=hub.url, min_free_bytes=0))
    try:
        assert wait_for(lambda: (read_progress(dest / ".ct200" / "progress.json") or {}).get("state") == "running", 30)
        second = start_module(dict(repo_id=BIG, local_dir=str(dest), endpoint=hub.url, min_free_bytes=0,
                                   lock_timeout=120))
        failed1, res1 = finish_module(first, timeout=120)
        failed2, res2 = finish_module(second, timeout=120)
    finally:
        kill(first)
    assert not failed1 and res1["files_downloaded"] == len(hub_files(hub, BIG)), res1.get("msg")
    assert not failed2, res2["msg"]
    assert res2["changed"] is False and res2["files_downloaded"] == 0, "the second run re-fetched verified files"
    assert res2["files_hashed"] == 0, "the second run planned from the first run's manifest"
    lfs = [p for p in hub_files(hub, BIG) if p.endswith(".safetensors")]
    assert len([r for r in hub.requests_log() if r.get("kind") == "cdn_get"]) == len(lfs)
    assert_tree_matches(hub, BIG, dest)


def test_a_second_run_without_lock_timeout_fails_clearly_and_changes_nothing(hub, tmp_path):
    sha = hub_files(hub, BIG)[BIG1][1]
    hub.set_faults([{"kind": "stall", "path_glob": "/cdn/%s" % sha, "fraction": 0.2, "seconds": 8, "count": 1}])
    dest = tmp_path / "b"
    first = start_module(dict(repo_id=BIG, local_dir=str(dest), endpoint=hub.url, min_free_bytes=0))
    try:
        assert wait_for(lambda: (read_progress(dest / ".ct200" / "progress.json") or {}).get("state") == "running", 30)
        failed, res = run_download(hub, dest, repo_id=BIG)
        assert failed and res["code"] == "busy" and "lock_timeout" in res["msg"], res
        failed1, res1 = finish_module(first, timeout=120)
    finally:
        kill(first)
    assert not failed1 and res1["files_downloaded"] == len(hub_files(hub, BIG)), res1.get("msg")
    assert_tree_matches(hub, BIG, dest)


# ------------------------------------------------------------------ disk full
@pytest.fixture()
def small_fs(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mnt = tmp_path / "small"
    mnt.mkdir()
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=120m", "tmpfs", str(mnt)], capture_output=True,
                          text=True, check=False)
    if proc.returncode != 0:
        pytest.skip("cannot mount tmpfs: %s" % proc.stderr.strip())
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_disk_filled_during_the_download_gives_one_clear_error(hub, small_fs):
    sha = hub_files(hub, BIG)[BIG1][1]
    hub.set_faults([{"kind": "stall", "path_glob": "/cdn/%s" % sha, "fraction": 0.25, "seconds": 8, "count": 1}])
    dest = small_fs / "b"
    proc = start_module(dict(repo_id=BIG, local_dir=str(dest), endpoint=hub.url, min_free_bytes=0, max_workers=1,
                             direct_io=False))
    try:
        assert wait_for(lambda: (read_progress(dest / ".ct200" / "progress.json") or {}).get("bytes_fetched", 0) > 0,
                        30)
        # another process fills the filesystem after the preflight passed
        with open(small_fs / "filler", "wb") as handle:
            try:
                while True:
                    handle.write(b"\0" * (1 << 20))
                    handle.flush()
            except OSError:
                pass
        failed, res = finish_module(proc, timeout=120)
    finally:
        kill(proc)
    assert failed and res["code"] == "disk_full", res
    assert "full" in res["msg"] and str(dest) in res["msg"] and "free space" in res["fix"]
    assert "(tmpfs on %s, " % small_fs in res["msg"], res["msg"]
    assert "Errno" not in res["msg"].split("stopped")[0]
    progress = read_progress(dest / ".ct200" / "progress.json")
    assert progress["state"] == "failed" and progress["error"]
    leftovers = [p for p in snapshot(dest) if p.endswith((".tmp", ".ct200tmp"))]
    assert leftovers == []


# ------------------------------------------------------------------ bad input
@pytest.mark.parametrize("repo_id", ["a/..", "../x", "org/my model", "org/a--b", "a/b/c", ".hidden/x"])
def test_invalid_repo_ids_are_refused_as_such(hub, tmp_path, repo_id):
    failed, res = run_download(hub, tmp_path / "w", repo_id=repo_id)
    assert failed and res["code"] == "bad_argument", res
    assert "not a valid repo id" in res["msg"]
    assert not (tmp_path / "w").exists()


def test_an_infinite_min_free_bytes_is_refused(hub, tmp_path):
    failed, res = run_download(hub, tmp_path / "w", min_free_bytes=1.5e400)
    assert failed and res["code"] == "bad_argument" and "min_free_bytes" in res["msg"] and "finite" in res["msg"], res
    assert not (tmp_path / "w").exists()


def test_a_non_http_endpoint_is_refused(hub, tmp_path):
    failed, res = run_download(hub, tmp_path / "w", endpoint="ftp://127.0.0.1:21/")
    assert failed and res["code"] == "bad_argument" and "http" in res["msg"], res


@pytest.mark.parametrize("where", ["option", "env"])
def test_credentials_in_an_endpoint_are_never_echoed(hub, tmp_path, where):
    secret = "s3cr" + hashlib.sha256(b"endpoint").hexdigest()[:10]
    url = hub.url.replace("http://", "http://alice:%s@" % secret)
    args = dict(repo_id=WEIGHTS, local_dir=str(tmp_path / "w"), min_free_bytes=0)
    env = None
    if where == "option":
        args["endpoint"] = url
    else:
        env = {"HF_ENDPOINT": url}
    proc = start_module(args, env=env)
    out = proc.stdout.read()
    err = proc.stderr.read()
    proc.wait(timeout=60)
    proc.stdout.close()
    proc.stderr.close()
    result = json.loads(out[out.index("{"):])
    assert result.get("failed") and result["code"] == "bad_argument", result
    assert "credentials" in result["msg"] and "***@" in result["msg"]
    assert secret not in out and secret not in err
