# SPDX-License-Identifier: Apache-2.0
"""Hub metadata resolved once on the controller and handed to the hosts (issue 9 item 3).

hf_repo_meta resolves a branch with one API call, a commit with none, and lists a tree with one
more; hf_download given that commit and listing fetches and verifies the files with no API call of
its own, still refuses a hostile path in a handed listing, and (HF_HUB_OFFLINE) answers "complete"
or "must fetch" from its manifest alone."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from dlhelpers import REPO_ROOT, WEIGHTS, assert_tree_matches, module_env, run_download

META = os.path.join(REPO_ROOT, "plugins", "modules", "hf_repo_meta.py")


def repo_meta(hub, repos, list_tree=()):
    payload = json.dumps({"ANSIBLE_MODULE_ARGS": dict(repos=repos, list_tree=list(list_tree), endpoint=hub.url)})
    proc = subprocess.run([sys.executable, META], input=payload, capture_output=True, text=True, timeout=120,
                          env=module_env(), check=False)
    return json.loads(proc.stdout[proc.stdout.index("{"):])


def test_controller_meta_costs_one_call_per_branch_and_none_per_commit(hub):
    res = repo_meta(hub, [{"repo_id": WEIGHTS, "revision": "main"}])
    assert not res.get("failed"), res
    commit = res["commits"][WEIGHTS]
    assert len(commit) == 40 and res["network_calls"] == 1 and hub.stats()["api"] == 1
    hub.reset_stats()
    res = repo_meta(hub, [{"repo_id": WEIGHTS, "revision": commit}])
    assert res["commits"] == {WEIGHTS: commit} and res["network_calls"] == 0 and hub.stats()["api"] == 0
    res = repo_meta(hub, [{"repo_id": WEIGHTS, "revision": commit}], list_tree=[WEIGHTS])
    assert res["network_calls"] == 1 and hub.stats()["api"] == 1
    paths = {e["path"] for e in res["listings"][WEIGHTS]}
    assert "config.json" in paths and "extra/adapter.bin" in paths


def test_download_with_a_handed_listing_makes_no_api_call(hub, tmp_path):
    meta = repo_meta(hub, [{"repo_id": WEIGHTS, "revision": "main"}], list_tree=[WEIGHTS])
    commit, listing = meta["commits"][WEIGHTS], meta["listings"][WEIGHTS]
    hub.reset_stats()
    dest = tmp_path / "w"
    failed, res = run_download(hub, dest, revision=commit, listing=listing)
    assert not failed, res["msg"]
    assert res["changed"] and res["commit"] == commit and res["network_calls"] == 0
    stats = hub.stats()
    assert stats["api"] == 0 and stats["resolve"] > 0, stats
    assert_tree_matches(hub, WEIGHTS, str(dest))

    # a re-run answers from the manifest: no call at all, listing or not
    hub.reset_stats()
    failed, res = run_download(hub, dest, revision=commit, listing=listing)
    assert not failed and not res["changed"] and res["planning"] == "manifest"
    assert hub.stats()["api"] == 0 and hub.stats()["resolve"] == 0


def test_offline_probe_says_complete_or_must_fetch_without_the_hub(hub, tmp_path):
    meta = repo_meta(hub, [{"repo_id": WEIGHTS, "revision": "main"}])
    commit = meta["commits"][WEIGHTS]
    dest = tmp_path / "w"
    hub.reset_stats()
    failed, res = run_download(hub, dest, revision=commit, check_mode=True, env={"HF_HUB_OFFLINE": "1"})
    assert failed and res["code"] == "offline"
    assert run_download(hub, dest, revision=commit)[0] is False
    hub.reset_stats()
    failed, res = run_download(hub, dest, revision=commit, check_mode=True, env={"HF_HUB_OFFLINE": "1"})
    assert not failed and res["planning"] == "manifest" and not res["changed"]
    os.remove(dest / "config.json")
    failed, res = run_download(hub, dest, revision=commit, check_mode=True, env={"HF_HUB_OFFLINE": "1"})
    assert failed and res["code"] == "offline"
    assert hub.stats()["api"] == 0


def test_a_handed_listing_is_checked_like_the_hubs(hub, tmp_path):
    meta = repo_meta(hub, [{"repo_id": WEIGHTS, "revision": "main"}], list_tree=[WEIGHTS])
    commit, listing = meta["commits"][WEIGHTS], meta["listings"][WEIGHTS]
    dest = tmp_path / "root" / "w"
    hostile = listing + [dict(listing[0], path="../escape.json")]
    failed, res = run_download(hub, dest, revision=commit, listing=hostile)
    assert failed and res["code"] == "unsafe_path" and "listing handed to hf_download" in res["msg"]
    assert "'..' segment" in res["msg"]
    assert not (tmp_path / "root" / "escape.json").exists() and not os.path.exists(dest / "config.json")

    no_size = [dict(e) for e in listing]
    del no_size[0]["size"]
    failed, res = run_download(hub, dest, revision=commit, listing=no_size)
    assert failed and res["code"] == "bad_listing"

    failed, res = run_download(hub, dest, revision="main", listing=listing)
    assert failed and res["code"] == "bad_argument" and "40-hex commit" in res["msg"]
