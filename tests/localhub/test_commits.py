# SPDX-License-Identifier: Apache-2.0
"""LocalHub.commit: a new commit moves main, older commits stay resolvable, unchanged files keep
their oid -- checked through the real huggingface_hub client over HTTP."""
import json

import pytest
from huggingface_hub import HfApi, hf_hub_download

from localhub import LocalHub
from localhub.repos import DRAFTER_REPO, TARGET_REPO


@pytest.fixture()
def hub(tmp_path):
    with LocalHub(tmp_path / "hub") as hub:
        yield hub


def _oids(api, repo_id, revision, token=None):
    return {f.path: f.blob_id for f in api.list_repo_tree(repo_id, revision=revision, recursive=True, token=token)
            if hasattr(f, "blob_id")}


def test_commit_moves_main_and_keeps_the_old_commit_and_unchanged_oids(hub, tmp_path):
    api = HfApi(endpoint=hub.url)
    before = api.model_info(TARGET_REPO).sha
    old_oids = _oids(api, TARGET_REPO, before)
    new_config = {"model_type": "kimi_k25", "note": "second revision"}
    sha = hub.commit(TARGET_REPO, {"config.json": json.dumps(new_config).encode()}, "Update config.json")
    assert sha != before and len(sha) == 40
    assert api.model_info(TARGET_REPO).sha == sha
    assert api.model_info(TARGET_REPO, revision=before).sha == before
    new_oids = _oids(api, TARGET_REPO, sha)
    changed = {p for p in new_oids if new_oids[p] != old_oids.get(p)}
    assert changed == {"config.json"}
    assert set(new_oids) == set(old_oids)
    old_file = hf_hub_download(TARGET_REPO, "config.json", revision=before, cache_dir=tmp_path / "c1", endpoint=hub.url)
    new_file = hf_hub_download(TARGET_REPO, "config.json", revision=sha, cache_dir=tmp_path / "c2", endpoint=hub.url)
    assert json.load(open(new_file)) == new_config
    assert json.load(open(old_file))["model_type"] == "kimi_k25" and "note" not in json.load(open(old_file))
    # the tag stays on the commit it named
    refs = api.list_repo_refs(TARGET_REPO)
    assert {t.name: t.target_commit for t in refs.tags} == {"v1.0": before}
    assert [b.target_commit for b in refs.branches] == [sha]


def test_commit_deletes_a_path_and_refuses_an_unknown_one(hub):
    api = HfApi(endpoint=hub.url)
    token = hub.token("granted")
    first = hub.commit(DRAFTER_REPO, {"standin.json": b'{"accept_length": 1.0}'}, "bad drafter")
    second = hub.commit(DRAFTER_REPO, {"standin.json": None}, "revert")
    assert first != second
    assert "standin.json" in _oids(api, DRAFTER_REPO, first, token)
    assert "standin.json" not in _oids(api, DRAFTER_REPO, second, token)
    with pytest.raises(KeyError, match="not in the repo"):
        hub.commit(DRAFTER_REPO, {"missing.bin": None}, "nothing")
