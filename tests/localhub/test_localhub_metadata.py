# SPDX-License-Identifier: Apache-2.0
"""model_info, tree (pagination), paths-info, revisions -- through the real client."""

from __future__ import annotations

import http.client
import json
from urllib.parse import urlsplit

from localhub_testdata import MANY_FILES, MANY_REPO

from localhub import DRAFTER_REPO, KIMI_CLAIMED_TOTAL_SIZE, TARGET_REPO


def _raw(hub, method: str, path: str, headers: dict | None = None, body: bytes | None = None):
    parts = urlsplit(hub.url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    finally:
        conn.close()


def test_model_info_sizes_only_with_files_metadata(hub, hf):
    repo = hub.repo(TARGET_REPO)
    result = hf(f"""
        plain = api.model_info("{TARGET_REPO}")
        full = api.model_info("{TARGET_REPO}", files_metadata=True)
        RESULT["plain"] = {{s.rfilename: s.size for s in plain.siblings}}
        RESULT["full"] = {{s.rfilename: [s.size, s.lfs.sha256 if s.lfs else None, s.blob_id] for s in full.siblings}}
        RESULT["sha"] = full.sha
        RESULT["gated"] = full.gated
        RESULT["private"] = full.private
        RESULT["st_total"] = full.safetensors.total
    """)
    assert set(result["plain"]) == set(repo.files)
    assert all(size is None for size in result["plain"].values()), result["plain"]
    for path, f in repo.files.items():
        size, lfs_sha, blob_id = result["full"][path]
        assert size == f.size
        assert blob_id == f.oid
        assert lfs_sha == (f.sha256 if f.lfs else None)
    assert result["sha"] == repo.commit
    assert result["gated"] is False and result["private"] is False
    # safetensors.total is a parameter count, not a byte size
    assert result["st_total"] != KIMI_CLAIMED_TOTAL_SIZE


def test_gated_metadata_is_public_but_lfs_oid_masked(hub, hf):
    repo = hub.repo(DRAFTER_REPO)
    shard = repo.files["model.safetensors"]
    result = hf(f"""
        def tree(tok):
            return {{f.path: [f.size, f.lfs.sha256 if f.lfs else None]
                    for f in api.list_repo_tree("{DRAFTER_REPO}", recursive=True, token=tok)}}
        RESULT["anon"] = tree(False)
        RESULT["never"] = tree(token_for("never_requested"))
        RESULT["granted"] = tree(token_for("granted"))
        info = api.model_info("{DRAFTER_REPO}", files_metadata=True, token=False)
        RESULT["info_lfs"] = [s.lfs.sha256 for s in info.siblings if s.lfs]
        RESULT["gated"] = info.gated
        RESULT["paths_anon"] = [[p.path, p.size, p.lfs.sha256] for p in
                                api.get_paths_info("{DRAFTER_REPO}", ["model.safetensors"], token=False)]
        RESULT["readme_anon"] = attempt(hf_hub_download, "{DRAFTER_REPO}", "README.md", token=False)
    """)
    assert result["gated"] == "manual"
    for who in ("anon", "never"):
        assert result[who]["model.safetensors"] == [shard.size, "*" * 64]
    assert result["granted"]["model.safetensors"] == [shard.size, shard.sha256]
    assert result["info_lfs"] == ["*" * 64]
    assert result["paths_anon"] == [["model.safetensors", shard.size, "*" * 64]]
    assert result["readme_anon"]["ok"], result["readme_anon"]


def test_tree_recursive_pagination(clean_hub, hf):
    repo = clean_hub.repo(MANY_REPO)
    result = hf(f"""
        entries = list(api.list_repo_tree("{MANY_REPO}", recursive=True))
        RESULT["files"] = {{e.path: [e.size, e.blob_id] for e in entries if hasattr(e, "size")}}
        RESULT["dirs"] = {{e.path: e.tree_id for e in entries if not hasattr(e, "size")}}
        RESULT["top"] = sorted(e.path for e in api.list_repo_tree("{MANY_REPO}"))
        RESULT["sub"] = [e.path for e in api.list_repo_tree("{MANY_REPO}", path_in_repo="data/03")]
        RESULT["expand"] = [[e.path, e.last_commit.oid, e.security.safe] for e in
                            api.list_repo_tree("{MANY_REPO}", path_in_repo="data/00", expand=True)][:2]
        RESULT["missing"] = attempt(lambda: list(api.list_repo_tree("{MANY_REPO}", path_in_repo="nope")))
    """)
    assert len(result["files"]) == len(repo.files) == MANY_FILES + 2  # + weights + .gitattributes
    assert {p: [f.size, f.oid] for p, f in repo.files.items()} == result["files"]
    assert result["dirs"] == {d: oid for d, oid in repo.dirs.items() if d}
    assert result["top"] == [".gitattributes", "data", "weights"]
    assert result["sub"] == [f"data/03/row_{i:04d}.txt" for i in range(300, 400)]
    assert result["expand"][0][1] == repo.commit and result["expand"][0][2] is True
    assert result["missing"]["cls"] == "RemoteEntryNotFoundError"
    tree_requests = [r for r in clean_hub.requests_log() if r["kind"] == "tree"]
    # recursive: 1224 entries -> 2 pages; top; data/03; data/00 with expand: 100 entries -> 2 pages of 50; missing
    assert len(tree_requests) == 7, tree_requests
    assert len([r for r in tree_requests if "cursor=" in r["path"]]) == 2


def test_tree_link_header_and_cursor(hub):
    status, headers, body = _raw(hub, "GET", f"/api/models/{MANY_REPO}/tree/main?recursive=true&limit=10")
    assert status == 200 and len(json.loads(body)) == 10
    link = headers["link"]
    assert link.endswith('>; rel="next"') and "cursor=" in link and link.startswith(f"<{hub.url}/api/models/")
    next_path = link[1:link.index(">")][len(hub.url):]
    status, _unused, body2 = _raw(hub, "GET", next_path)
    assert status == 200
    assert json.loads(body2)[0]["path"] != json.loads(body)[0]["path"]
    status, headers, body = _raw(hub, "GET", f"/api/models/{MANY_REPO}/tree/main?cursor=%%%")
    assert status == 400 and b"cursor" in body


def test_paths_info(hub, hf):
    repo = hub.repo(TARGET_REPO)
    result = hf(f"""
        info = api.get_paths_info("{TARGET_REPO}", ["config.json", "does/not/exist", "model-00002-of-000004.safetensors"])
        RESULT["entries"] = [[i.path, i.size, i.blob_id, i.lfs.sha256 if i.lfs else None] for i in info]
        many = api.get_paths_info("{MANY_REPO}", ["data/01", "data/01/row_0100.txt"])
        RESULT["many"] = [[type(i).__name__, i.path] for i in many]
    """)
    shard = repo.files["model-00002-of-000004.safetensors"]
    assert result["entries"] == [
        ["config.json", repo.files["config.json"].size, repo.files["config.json"].oid, None],
        [shard.path, shard.size, shard.oid, shard.sha256],
    ]
    assert result["many"] == [["RepoFolder", "data/01"], ["RepoFile", "data/01/row_0100.txt"]]


def test_revisions_tag_commit_and_unknown(hub, hf):
    repo = hub.repo(TARGET_REPO)
    result = hf(f"""
        RESULT["tag"] = api.model_info("{TARGET_REPO}", revision="v1.0").sha
        RESULT["commit"] = api.model_info("{TARGET_REPO}", revision="{repo.commit}").sha
        RESULT["bad"] = attempt(api.model_info, "{TARGET_REPO}", revision="no-such-branch")
        RESULT["bad_dl"] = attempt(hf_hub_download, "{TARGET_REPO}", "config.json", revision="no-such-branch")
        RESULT["refs"] = [b.target_commit for b in api.list_repo_refs("{TARGET_REPO}").branches]
        RESULT["missing_repo"] = attempt(api.model_info, "nobody/nothing")
        p = hf_hub_download("{TARGET_REPO}", "model.safetensors.index.json", revision="v1.0")
        RESULT["index_total"] = json.load(open(p))["metadata"]["total_size"]
        RESULT["entry"] = attempt(hf_hub_download, "{TARGET_REPO}", "missing.json")
    """)
    assert result["tag"] == result["commit"] == repo.commit
    for key in ("bad", "bad_dl"):
        assert result[key]["cls"] == "RevisionNotFoundError", result[key]
        assert result[key]["status"] == 404
    assert result["refs"] == [repo.commit]
    assert result["missing_repo"]["cls"] == "RepositoryNotFoundError"
    assert result["missing_repo"]["status"] == 401  # anonymous -> 401 RepoNotFound
    assert result["index_total"] == KIMI_CLAIMED_TOTAL_SIZE
    assert result["entry"]["cls"] == "RemoteEntryNotFoundError"


def test_entry_not_found_carries_commit_and_error_headers(hub):
    repo = hub.repo(TARGET_REPO)
    status, headers, body = _raw(hub, "HEAD", f"/{TARGET_REPO}/resolve/main/nope.bin")
    assert status == 404
    assert headers["x-error-code"] == "EntryNotFound"
    assert headers["x-repo-commit"] == repo.commit
    status, headers, body = _raw(hub, "GET", f"/{TARGET_REPO}/resolve/main/nope.bin")
    assert json.loads(body) == {"error": headers["x-error-message"]}


def test_no_xet_headers_anywhere(hub):
    shard = next(f for f in hub.repo(TARGET_REPO).files.values() if f.lfs)
    status, headers, _unused = _raw(hub, "HEAD", f"/{TARGET_REPO}/resolve/main/{shard.path}")
    assert status == 302
    assert not [h for h in headers if "xet" in h], headers
    assert "xet" not in headers.get("link", "")
    assert headers["x-linked-etag"] == f'"{shard.sha256}"'
    assert headers["x-linked-size"] == str(shard.size)
    assert headers["location"] == f"{hub.cdn_url}/cdn/{shard.sha256}"
    assert headers["location"].startswith("http://localhost:")
    _unused, _unused, body = _raw(hub, "GET", f"/api/models/{TARGET_REPO}/tree/main")
    assert b"xetHash" not in body and b"xet" not in body.lower()
