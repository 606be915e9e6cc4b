# SPDX-License-Identifier: Apache-2.0
"""A hostile or compromised Hub (localhub's hostile mode) cannot make hf_download write outside
local_dir, or anywhere at all: the listing is refused before a byte is written, with the repo,
the revision, the path and the fix named, and the previous download left as it was.

The real huggingface_hub client is run against the same hostile listings to show the mode is
faithful: it refuses the traversal and absolute names too (``Invalid filename``)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from dlhelpers import REPO_ROOT, run_download
from test_security import snapshot

REPO = "ct200test/hostile"
V1 = {"config.json": {"v": 1}, "model.safetensors": "2MiB"}
V2 = {"config.json": {"v": 2}, "model.safetensors": "2MiB", "more.safetensors": "1MiB"}

CASES = [
    ("traversal", "unsafe_path", "'..' segment"),
    ("absolute", "unsafe_path", "absolute"),
    ("nul", "unsafe_path", "control character"),
    ("manifest", "unsafe_path", ".ct200/"),
    ("missing_size", "bad_listing", "size"),
    ("backslash", "unsafe_path", "backslash"),
    ("dot", "unsafe_path", "'.' segment"),
]


@pytest.fixture()
def previous(hub, tmp_path):
    """A completed download of REPO at v1 in a deep local_dir; the Hub then moves to v2."""
    hub.add_repo(REPO, dict(V1))
    root = tmp_path / "root"
    dest = root / "d1" / "w"
    failed, res = run_download(hub, dest, repo_id=REPO)
    assert not failed, res["msg"]
    (tmp_path / "victim").write_bytes(b"precious\n")
    hub.add_repo(REPO, dict(V2))
    return tmp_path, dest


@pytest.mark.parametrize("kind, code, words", CASES, ids=[c[0] for c in CASES])
def test_hostile_listing_is_refused_before_any_byte(hub, previous, kind, code, words):
    top, dest = previous
    before = snapshot(top)
    hub.set_hostile(REPO, [kind], target=str(top / "victim"))
    hub.reset_stats()
    failed, res = run_download(hub, dest, repo_id=REPO)
    assert failed and res["code"] == code, res
    msg = res["msg"]
    assert REPO in msg and "main" in msg and words in msg, msg
    assert "HF_ENDPOINT" in res["fix"] and "compromised" in res["fix"]
    assert hub.stats()["cdn_get"] == 0 and hub.stats()["resolve_get"] == 0
    after = snapshot(top)
    assert after == before, "something was written: %s" % sorted(set(after.items()) ^ set(before.items()))


def test_hostile_listing_with_an_existing_target_outside_is_left_alone_in_check_mode_too(hub, previous):
    top, dest = previous
    hub.set_hostile(REPO, ["traversal", "absolute"], target=str(top / "victim"))
    before = snapshot(top)
    failed, res = run_download(hub, dest, repo_id=REPO, check_mode=True)
    assert failed and res["code"] == "unsafe_path"
    assert snapshot(top) == before


def _hf_snapshot(hub, local_dir, home):
    code = ("import sys\nfrom huggingface_hub import snapshot_download\n"
            "try:\n    snapshot_download(%r, local_dir=%r)\nexcept Exception as exc:\n"
            "    print(type(exc).__name__, exc)\n    sys.exit(3)\n" % (REPO, str(local_dir)))
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    env.update(HF_ENDPOINT=hub.url, HF_HOME=str(home), HF_HUB_DISABLE_XET="1", PYTHONPATH=REPO_ROOT)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120,
                          check=False)


@pytest.mark.parametrize("kind", ["traversal", "absolute"])
def test_huggingface_hub_itself_refuses_the_same_listing(hub, previous, kind):
    top, _dest = previous
    hub.set_hostile(REPO, [kind], target=str(top / "victim"))
    before = snapshot(top)
    proc = _hf_snapshot(hub, top / "hf" / "w", top / "hf-home")
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "Invalid filename" in proc.stdout, proc.stdout
    written = {p for p in snapshot(top) if not p.startswith(("hf/w/", "hf-home/"))}
    assert written == set(before), "huggingface_hub wrote outside its local_dir"
