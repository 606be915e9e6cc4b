# SPDX-License-Identifier: Apache-2.0
"""The fetcher on the local disk, with hf_download's guarantees: the local_dir lock is taken before
anything is planned, no symlink under local_dir is followed, a file whose stat changed is hashed
again in full.  No source is reachable here: everything these tests need is already on disk."""

from __future__ import annotations

import hashlib
import os
import threading
import time

import pytest

from ansible_collections.ct200.deploy.plugins.module_utils import fanout, hf_manifest, hf_transfer

DEAD_PEER = "http://127.0.0.1:9/fo"  # discard port: connection refused, the source is "down" at once
CONTENT = {"model-00001.safetensors": b"A" * 4096, "model-00002.safetensors": b"B" * 5000}


def listing():
    return dict((path, {"size": len(data), "oid": hashlib.sha256(data).hexdigest(), "lfs": True})
                for path, data in CONTENT.items())


def fetcher(local_dir, **kw):
    sources = [fanout.Source("seed", "seed", DEAD_PEER)]
    return fanout.Fetcher(str(local_dir), "fo/site", "c" * 40, listing(), sources, peer_wait=0, **kw)


def place(local_dir, paths=None):
    for path in CONTENT if paths is None else paths:
        (local_dir / path).write_bytes(CONTENT[path])


def test_a_run_waits_for_the_lock_and_plans_from_what_the_holder_left(tmp_path, monkeypatch):
    """Planned before the lock, the run would see missing files and try its (dead) source."""
    waiting = threading.Event()

    class SignallingLock(hf_transfer.DirLock):
        def __init__(self, *args, **kw):
            super().__init__(*args, sleep=self._sleep, **kw)

        def _sleep(self, seconds):
            waiting.set()
            time.sleep(seconds)

    monkeypatch.setattr(hf_transfer, "DirLock", SignallingLock)
    local_dir = tmp_path / "m"
    holder = hf_transfer.DirLock(str(local_dir)).acquire()
    outcome = {}

    def run():
        try:
            outcome["result"] = fetcher(local_dir, lock_timeout=60).run()
        except Exception as exc:  # reported to the main thread
            outcome["error"] = exc

    worker = threading.Thread(target=run)
    worker.start()
    assert waiting.wait(60), "the fetcher never waited for the lock"
    place(local_dir)
    holder.release()
    worker.join(60)
    assert "error" not in outcome, outcome.get("error")
    assert outcome["result"]["changed"] is False and outcome["result"]["bytes_fetched"] == 0


def test_a_held_lock_without_lock_timeout_fails_as_busy_and_writes_nothing(tmp_path):
    local_dir = tmp_path / "m"
    holder = hf_transfer.DirLock(str(local_dir)).acquire()
    try:
        run = fetcher(local_dir)
        with pytest.raises(hf_transfer.DownloadError) as err:
            run.run()
    finally:
        holder.release()
    assert err.value.code == "busy" and run.plan is None
    assert not os.path.exists(hf_manifest.manifest_path(str(local_dir)))


def test_a_symlink_where_a_file_belongs_is_planned_for_replacement_never_followed(tmp_path):
    local_dir = tmp_path / "m"
    local_dir.mkdir()
    victim = tmp_path / "victim"
    victim.write_bytes(CONTENT["model-00001.safetensors"])  # even the right bytes behind a link do not count
    os.symlink(victim, local_dir / "model-00001.safetensors")
    place(local_dir, ["model-00002.safetensors"])
    res = fetcher(local_dir).preview()
    assert [f["path"] for f in res["would_fetch"]] == ["model-00001.safetensors"]
    assert "not a regular file" in res["would_fetch"][0]["reason"]
    with pytest.raises(fanout.FanoutError, match="no source could deliver model-00001"):
        fetcher(local_dir).run()
    assert victim.read_bytes() == CONTENT["model-00001.safetensors"]


def test_a_directory_symlink_inside_local_dir_is_refused_as_unsafe_path(tmp_path):
    local_dir = tmp_path / "m"
    local_dir.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    os.symlink(outside, local_dir / "sub")
    files = {"sub/model.safetensors": listing()["model-00001.safetensors"]}
    run = fanout.Fetcher(str(local_dir), "fo/site", "c" * 40, files, [fanout.Source("seed", "seed", DEAD_PEER)])
    with pytest.raises(hf_transfer.DownloadError) as err:
        run.run()
    assert err.value.code == "unsafe_path" and os.listdir(outside) == []


def test_a_symlinked_local_dir_is_refused(tmp_path):
    real = tmp_path / "real"
    real.mkdir()
    os.symlink(real, tmp_path / "m")
    with pytest.raises(hf_transfer.DownloadError) as err:
        fetcher(tmp_path / "m").run()
    assert err.value.code == "bad_argument" and "symlink" in err.value.message


def test_a_file_changed_in_place_with_its_mtime_restored_is_hashed_again(tmp_path):
    local_dir = tmp_path / "m"
    local_dir.mkdir()
    place(local_dir)
    first = fetcher(local_dir).run()  # adopts both files by hashing them in full
    assert first["changed"] is False
    path = local_dir / "model-00002.safetensors"
    before = path.stat()
    with open(path, "r+b") as handle:
        handle.seek(4000)
        handle.write(b"X")
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    res = fetcher(local_dir).preview()
    assert [f["path"] for f in res["would_fetch"]] == ["model-00002.safetensors"]
    assert "content differs" in res["would_fetch"][0]["reason"]


def test_too_little_disk_fails_as_disk_full_before_any_byte(tmp_path):
    local_dir = tmp_path / "m"
    local_dir.mkdir()
    run = fetcher(local_dir, min_free_bytes="999999TB")
    with pytest.raises(hf_transfer.DownloadError) as err:
        run.run()
    assert err.value.code == "disk_full" and "min_free_bytes" in err.value.fix
    assert os.listdir(local_dir) == []  # not even the state directory the failed run created
