# SPDX-License-Identifier: Apache-2.0
"""benchmarks/scale/bench_controller.py's setup: the state one deployed host left, replicated into another
(hard-linked data, its own .ct200 state and token), passes the manifest's own stat check on both; a file
changed after it was verified is not vouched for (the setup fails instead of hiding a re-hash)."""

import hashlib
import importlib.util
import json
import os
from pathlib import Path

import pytest

from ansible_collections.ct200.deploy.plugins.module_utils import hf_manifest

REPO = Path(__file__).resolve().parents[2]
COMMIT = "c" * 40


def _bench():
    spec = importlib.util.spec_from_file_location("bench_controller", REPO / "benchmarks" / "scale" / "bench_controller.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _deployed(home):
    """A host's state as the first deploy leaves it: one verified file, its manifest, progress, lock, token."""
    local_dir = home / "models" / "o" / "t" / "snapshots" / COMMIT
    local_dir.mkdir(parents=True)
    data = b"weights" * 1000
    (local_dir / "model.safetensors").write_bytes(data)
    manifest = hf_manifest.Manifest(str(local_dir))
    oid = hashlib.sha256(data).hexdigest()
    manifest.bind_repo("o/t", "model")
    manifest.record("model.safetensors", os.lstat(local_dir / "model.safetensors"), oid, oid, COMMIT, "s")
    manifest.mark_complete(COMMIT)
    manifest.save()
    state = local_dir / hf_manifest.STATE_DIR
    (state / "lock").write_text("")
    (state / "progress.json").write_text(json.dumps({"state": "done", "local_dir": str(local_dir)}))
    (home / "hf").mkdir()
    (home / "hf" / "token").write_text("hf_x\n")
    (home / "hf" / "token").chmod(0o600)
    return local_dir, oid, len(data)


def _checked(local_dir, oid, size):
    return hf_manifest.Manifest.load(str(local_dir)).stat_check("model.safetensors", oid, size)[0]


def test_a_replica_and_its_source_pass_the_stat_check(tmp_path):
    bench = _bench()
    hosts = bench.Hosts(tmp_path, 3)
    src_dir, oid, size = _deployed(hosts.host_dir(1))
    for i in (2, 3):
        (hosts.host_dir(i) / "models").mkdir(parents=True)
    out = hosts.replicate(1)
    assert out["replicated_hosts"] == 2 and out["links"] == 2 and out["manifest_entries_checked"] == 3
    for i in (1, 2, 3):
        local_dir = hosts.host_dir(i) / "models" / "o" / "t" / "snapshots" / COMMIT
        assert _checked(local_dir, oid, size) == hf_manifest.OK
        state = local_dir / hf_manifest.STATE_DIR
        assert json.loads((state / "progress.json").read_text())["local_dir"] == str(local_dir)
        if i > 1:
            assert os.stat(local_dir / "model.safetensors").st_ino == os.stat(src_dir / "model.safetensors").st_ino
            for name in ("lock", "manifest.json", "progress.json"):
                assert os.stat(state / name).st_ino != os.stat(src_dir / hf_manifest.STATE_DIR / name).st_ino
            token = hosts.host_dir(i) / "hf" / "token"
            assert token.read_text() == "hf_x\n" and token.stat().st_mode & 0o777 == 0o600
            assert token.stat().st_ino != (hosts.host_dir(1) / "hf" / "token").stat().st_ino


def test_a_file_changed_after_its_verification_fails_the_setup(tmp_path):
    bench = _bench()
    hosts = bench.Hosts(tmp_path, 2)
    src_dir, oid, size = _deployed(hosts.host_dir(1))
    (hosts.host_dir(2) / "models").mkdir(parents=True)
    st = os.stat(src_dir / "model.safetensors")
    (src_dir / "model.safetensors").write_bytes(b"x" * size)
    os.utime(src_dir / "model.safetensors", ns=(st.st_atime_ns, st.st_mtime_ns + 1))
    with pytest.raises(SystemExit, match="does not pass its manifest's stat check"):
        hosts.replicate(1)
