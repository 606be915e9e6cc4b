# SPDX-License-Identifier: Apache-2.0
"""A hostile Hub's listing is refused before any byte moves (issue 18, item 5): a path listed twice
(the handed ``listing`` option refuses that too), a path that is both a file and a directory, a name
component longer than a filesystem allows.  One message naming the cause and the fix; no file request,
nothing written, the previous download intact."""

from __future__ import annotations

import pytest

from sec_helpers import WEIGHTS, files_under, run_module

REPO = "sec/hostile"
V1 = {"config.json": {"v": 1}, "model.safetensors": "2MiB", "sub/adapter.bin": "1MiB"}
V2 = {"config.json": {"v": 2}, "model.safetensors": "2MiB", "sub/adapter.bin": "1MiB", "more.safetensors": "1MiB"}
CASES = [
    ("twice", [{"path": "config.json", "like": "model.safetensors"}], "bad_listing", "twice"),
    ("file_and_directory", [{"path": "sub", "like": "config.json"}], "bad_listing", "as if 'sub' were a directory"),
    ("long_component", [{"path": "sub/" + "n" * 300 + ".bin"}], "unsafe_path", "at most 255 bytes per name"),
]


@pytest.fixture()
def previous(hub, tmp_path):
    """A completed download of REPO at v1; the Hub then moves to v2 (a new commit, listed afresh)."""
    hub.add_repo(REPO, dict(V1))
    dest = tmp_path / "w"
    failed, res, _raw = run_module("hf_download", dict(repo_id=REPO, local_dir=str(dest), endpoint=hub.url,
                                                       min_free_bytes=0))
    assert not failed, res["msg"]
    hub.add_repo(REPO, dict(V2))
    return dest


@pytest.mark.parametrize("case, entries, code, words", CASES, ids=[c[0] for c in CASES])
def test_a_hostile_listing_is_refused_before_any_byte(hub, previous, case, entries, code, words):
    before = files_under(previous)
    hub.set_hostile(REPO, entries=entries)
    hub.reset_stats()
    failed, res, _raw = run_module("hf_download", dict(repo_id=REPO, local_dir=str(previous), endpoint=hub.url,
                                                       min_free_bytes=0))
    assert failed and res["code"] == code, res
    assert words in res["msg"] and REPO in res["msg"] and "nothing was written" in res["msg"], res["msg"]
    assert "compromised" in res["fix"], res["fix"]
    stats = hub.stats()
    assert stats["resolve_get"] == 0 and stats["cdn_get"] == 0, "bytes moved before the listing was refused"
    assert files_under(previous) == before


def test_the_handed_listing_gets_the_same_shape_check(hub, tmp_path):
    repo = hub.repo(WEIGHTS)
    listing = [{"path": f.path, "size": f.size, "oid": f.sha256 if f.lfs else f.oid, "lfs": f.lfs}
               for f in repo.files.values()]
    config = next(item for item in listing if item["path"] == "config.json")
    listing.append(dict(config, path="sub"))
    hub.reset_stats()
    failed, res, _raw = run_module("hf_download", dict(repo_id=WEIGHTS, revision=repo.commit, listing=listing,
                                                       local_dir=str(tmp_path / "w"), endpoint=hub.url,
                                                       min_free_bytes=0))
    assert failed and res["code"] == "bad_listing" and "as if 'sub' were a directory" in res["msg"], res
    assert hub.stats()["resolve_get"] == 0 and hub.stats()["cdn_get"] == 0
