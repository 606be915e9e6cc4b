# SPDX-License-Identifier: Apache-2.0
"""Downloads through the real client: bytes, CDN origin, Range, keep-alive."""

from __future__ import annotations

import hashlib
import http.client
from urllib.parse import urlsplit

from localhub_testdata import DATASET_REPO

from localhub import DRAFTER_REPO, TARGET_REPO


def test_snapshot_download_target_and_drafter_bytes_and_no_auth_on_cdn(clean_hub, hf):
    target, drafter = clean_hub.repo(TARGET_REPO), clean_hub.repo(DRAFTER_REPO)
    result = hf(f"""
        tok = token_for("granted")
        out = {{}}
        for repo in ("{TARGET_REPO}", "{DRAFTER_REPO}"):
            root = snapshot_download(repo, token=tok)
            out[repo] = {{}}
            for dirpath, _, names in os.walk(root):
                for n in names:
                    full = os.path.join(dirpath, n)
                    out[repo][os.path.relpath(full, root)] = sha256_of(full)
        RESULT["snap"] = out
        p = hf_hub_download("{DRAFTER_REPO}", "model.safetensors", token=tok, local_dir="ld")
        RESULT["local_dir"] = sha256_of(p)
        RESULT["verify"] = repr(api.verify_repo_checksums("{TARGET_REPO}", token=tok))
    """)
    for repo in (target, drafter):
        assert result["snap"][repo.repo_id] == {p: f.sha256 for p, f in repo.files.items()}
    assert result["local_dir"] == drafter.files["model.safetensors"].sha256
    assert "mismatches=[]" in result["verify"] and "missing_paths=[]" in result["verify"]

    stats = clean_hub.stats()
    lfs = {f.sha256: f.size for r in (target, drafter) for f in r.files.values() if f.lfs}
    cdn = [r for r in clean_hub.requests_log() if r["kind"] == "cdn_get"]
    assert {r["path"].rsplit("/", 1)[-1] for r in cdn} == set(lfs)
    assert stats["cdn_bytes_sent"] == sum(r["bytes_sent"] for r in cdn) >= sum(lfs.values())
    # the token went to the Hub, never to the CDN origin (localhost vs 127.0.0.1)
    assert stats["authorized"]["resolve_head"] == stats["resolve_head"] > 0
    assert stats["authorized"]["cdn_get"] == 0
    assert not any(r["authorization"] for r in cdn)


def test_hf_hub_download_by_commit_and_dataset(hub, hf):
    target = hub.repo(TARGET_REPO)
    dataset = hub.repo(DATASET_REPO, "dataset")
    result = hf(f"""
        p = hf_hub_download("{TARGET_REPO}", "config.json", revision="{target.commit}")
        RESULT["config"] = sha256_of(p)
        RESULT["commit_dir"] = os.path.basename(os.path.dirname(p))
        p = hf_hub_download("{DATASET_REPO}", "data/train.parquet", repo_type="dataset")
        RESULT["dataset"] = sha256_of(p)
        RESULT["dataset_info"] = api.dataset_info("{DATASET_REPO}").sha
    """)
    assert result["config"] == target.files["config.json"].sha256
    assert result["commit_dir"] == target.commit
    assert result["dataset"] == dataset.files["data/train.parquet"].sha256
    assert result["dataset_info"] == dataset.commit


def test_download_with_xet_enabled_stays_plain_http(clean_hub, hf):
    """hf_xet is installed; without Xet headers from the Hub the client must use /resolve + CDN."""
    shard = clean_hub.repo(DRAFTER_REPO).files["model.safetensors"]
    result = hf(f"""
        from huggingface_hub import constants
        RESULT["xet_disabled"] = constants.HF_HUB_DISABLE_XET
        RESULT["sha"] = sha256_of(hf_hub_download("{DRAFTER_REPO}", "model.safetensors", token=token_for("granted")))
    """, env={"HF_HUB_DISABLE_XET": ""})
    assert result["xet_disabled"] is False
    assert result["sha"] == shard.sha256
    assert clean_hub.stats()["cdn_get"] == 1


def _conn(url: str) -> http.client.HTTPConnection:
    parts = urlsplit(url)
    return http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)


def test_cdn_range_head_and_keepalive(hub):
    shard = hub.repo(TARGET_REPO).files["model-00001-of-000004.safetensors"]
    data = shard.disk_path.read_bytes()
    assert hashlib.sha256(data).hexdigest() == shard.sha256
    conn = _conn(hub.cdn_url)
    try:
        path = f"/cdn/{shard.sha256}"
        conn.request("HEAD", path)
        resp = conn.getresponse()
        resp.read()
        assert resp.status == 200 and int(resp.getheader("Content-Length")) == shard.size
        sock = conn.sock
        conn.request("GET", path, headers={"Range": "bytes=100-199"})
        resp = conn.getresponse()
        assert resp.status == 206
        assert resp.getheader("Content-Range") == f"bytes 100-199/{shard.size}"
        assert resp.read() == data[100:200]
        conn.request("GET", path, headers={"Range": "bytes=-10"})
        resp = conn.getresponse()
        assert resp.status == 206 and resp.read() == data[-10:]
        conn.request("GET", path, headers={"Range": f"bytes={shard.size - 5}-"})
        resp = conn.getresponse()
        assert resp.status == 206 and resp.read() == data[-5:]
        conn.request("GET", path, headers={"Range": f"bytes={shard.size}-"})
        resp = conn.getresponse()
        resp.read()
        assert resp.status == 416 and resp.getheader("Content-Range") == f"bytes */{shard.size}"
        conn.request("GET", path)
        resp = conn.getresponse()
        assert resp.status == 200 and resp.read() == data
        assert conn.sock is sock  # all on one keep-alive connection
    finally:
        conn.close()


def test_small_file_resolve_redirects_on_the_hub_origin_like_the_real_hub(hub):
    """Non-LFS files: 307 to same-origin /api/resolve-cache/... (metadata on both hops),
    which answers with length, ETag, X-Repo-Commit and Range like /resolve would."""
    repo = hub.repo(TARGET_REPO)
    cfg = repo.files["config.json"]
    conn = _conn(hub.url)
    try:
        conn.request("HEAD", f"/{TARGET_REPO}/resolve/main/config.json")
        resp = conn.getresponse()
        resp.read()
        assert resp.status == 307
        location = resp.getheader("Location")
        assert location.startswith(f"/api/resolve-cache/models/{TARGET_REPO}/{repo.commit}/config.json?")
        assert resp.getheader("ETag") == f'"{cfg.oid}"' and resp.getheader("X-Repo-Commit") == repo.commit
        conn.request("HEAD", location)
        resp = conn.getresponse()
        resp.read()
        assert resp.status == 200
        assert int(resp.getheader("Content-Length")) == cfg.size
        assert resp.getheader("ETag") == f'"{cfg.oid}"'
        assert resp.getheader("X-Repo-Commit") == repo.commit
        conn.request("GET", location, headers={"Range": "bytes=0-0"})
        resp = conn.getresponse()
        assert resp.status == 206 and resp.read() == b"{"
    finally:
        conn.close()


def test_resolve_cache_is_gated_like_resolve(hub):
    from localhub import DRAFTER_REPO

    repo = hub.repo(DRAFTER_REPO)
    path = f"/api/resolve-cache/models/{DRAFTER_REPO}/{repo.commit}/config.json"
    conn = _conn(hub.url)
    try:
        conn.request("HEAD", path)
        resp = conn.getresponse()
        resp.read()
        assert resp.status == 401 and resp.getheader("X-Error-Code") == "GatedRepo"
        conn.request("HEAD", path, headers={"Authorization": f"Bearer {hub.token('granted')}"})
        resp = conn.getresponse()
        resp.read()
        assert resp.status == 200 and int(resp.getheader("Content-Length")) == repo.files["config.json"].size
    finally:
        conn.close()
