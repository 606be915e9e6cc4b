# SPDX-License-Identifier: Apache-2.0
"""hf_download against what the real Hub does and the plain local Hub does not (localhub.realhub):
signed CDN and cas-bridge URLs that expire mid-file (and an edge that replays the stale redirect),
the Hub's RateLimit window on /resolve, an authenticated proxy, and Xet listings.

Each run is the module in its own process, with huggingface_hub doing the metadata over real HTTP;
windows are 1-3 s so the file costs ~20 s in all.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets

import pytest

from dlhelpers import WEIGHTS, assert_tree_matches, hub_files, run_download
from localhub.proxy import AuthProxy, TlsFront, self_signed_cert

SHARD2 = "model-00002-of-00003.safetensors"  # 24 MiB
SHARD2_SIZE = 24 << 20


def _gets(hub, path_part):
    return [r for r in hub.requests_log() if r["kind"] == "cdn_get" and path_part in r["path"]]


@pytest.mark.parametrize("xet", [False, True], ids=["cdn", "xet-bridge"])
def test_expired_signed_urls_are_resolved_again_with_backoff_and_resume_by_range(hub, tmp_path, xet):
    """The URL expires while the file is still being fetched, and the edge hands the same stale
    URL back on the first re-resolve: the engine resolves again (backing off), resumes by Range."""
    sha = hub_files(hub, WEIGHTS)[SHARD2][1]
    hub.xet = xet
    hub.cdn_expiry = 1  # valid 1-2 s
    hub.redirect_cache = 4  # /resolve replays the first signed URL for 4 s (stale after 1-2 s)
    glob = "/xet-bridge-us/*/%s" % hub.xet_hash(hub.repo(WEIGHTS).files[SHARD2]) if xet else "/cdn/%s" % sha
    hub.set_faults([{"kind": "stall", "path_glob": glob, "fraction": 0.3, "seconds": 10, "count": 1}])
    failed, res = run_download(hub, tmp_path / "w", stall_timeout=1, max_workers=2)
    assert not failed, res["msg"]
    assert_tree_matches(hub, WEIGHTS, tmp_path / "w")
    gets = _gets(hub, glob.rsplit("/", 1)[-1])
    denied = [r for r in gets if r["status"] == 403]
    assert len(denied) >= 2, "the stale URL was not handed back and refused twice: %s" % gets
    assert res["reresolves"] >= 2 and res["retry_causes"].get("expired_url") == res["reresolves"], res
    resumed = [r for r in gets if r["status"] == 206 and r["range"] and not r["range"].startswith("bytes=0-")]
    assert resumed, "the fetch restarted instead of resuming by Range: %s" % gets
    assert res["bytes_downloaded"] == res["bytes_total"], "bytes already there were fetched again"
    resolves = [r for r in hub.requests_log() if r["kind"] == "resolve_get" and SHARD2 in r["path"]]
    gaps = [b["t"] - a["t"] for a, b in zip(resolves, resolves[1:])]
    assert len(resolves) >= 3 and max(gaps) >= 0.9, "no backoff between re-resolves: %s" % gaps
    assert gets and all(r["path"].startswith("/xet-bridge-us/") == xet for r in gets)


def test_rate_limit_window_longer_than_the_retry_budget_is_waited_out(hub, tmp_path):
    """429s carrying only RateLimit (no Retry-After), for 3 s, against 1 ordinary retry (1 s)."""
    hub.set_faults([{"kind": "ratelimit", "path_glob": "/%s/resolve/*" % WEIGHTS, "seconds": 3}])
    failed, res = run_download(hub, tmp_path / "w", retries=1)
    assert not failed, res["msg"]
    assert_tree_matches(hub, WEIGHTS, tmp_path / "w")
    limited = [r for r in hub.requests_log() if r["status"] == 429]
    assert limited and all(r["fault"] == "ratelimit" for r in limited)
    assert res["retry_causes"].get("http_429") == len(limited) and res["rate_limit_wait_s"] >= 3.0, res
    warned = json.dumps(res.get("warnings"))  # ansible-core 2.19: WarningSummary objects
    assert "rate-limited" in warned and "'resolvers'" in warned and "3000 requests per 3 s" in warned, warned
    print("rate-limited run: %.1f s, waited %.1f s" % (res["seconds"], res["rate_limit_wait_s"]))


def test_rate_limit_wait_has_a_bound(hub, tmp_path):
    """A window far beyond RATE_LIMIT_MAX_WAIT is not slept through: one message names it."""
    from ansible_collections.ct200.deploy.plugins.module_utils import hf_transfer_engine as engine_mod
    from ansible_collections.ct200.deploy.plugins.module_utils.hf_transfer_http import HttpError

    class _Job(object):
        path, location, url = "a.bin", None, hub.url + "/x/resolve/main/a.bin"

    class _Headers(dict):
        def get(self, name, default=None):
            return dict.get(self, name.lower(), default)

    eng = engine_mod.Engine(str(tmp_path), [], {}, (), None, None, rate_limit_max_wait=600)
    slept = []
    eng._interruptible_sleep = slept.append
    exc = HttpError(429, _Job.url, _Headers({"ratelimit": '"resolvers";r=0;t=299'}), "")
    waits = {"expired": 0, "rate_limited": 0.0}
    assert eng._wait_out(_Job(), exc, waits) and eng._wait_out(_Job(), exc, waits)
    assert waits["rate_limited"] == 600.0 and slept == [300.0, 300.0]
    with pytest.raises(engine_mod.FetchFailed, match="kept rate-limiting it for more than 600 s"):
        eng._wait_out(_Job(), exc, waits)


def test_authenticated_proxy_gets_the_credentials_and_they_are_never_printed(hub, tmp_path):
    password = "pw-" + secrets.token_hex(6)
    with AuthProxy("ct200", password) as proxy:
        env = {"http_proxy": proxy.url_with_credentials, "HTTP_PROXY": proxy.url_with_credentials}
        failed, res = run_download(hub, tmp_path / "w", env=env)
        assert not failed, res["msg"]
        assert_tree_matches(hub, WEIGHTS, tmp_path / "w")
        log = list(proxy.log)
    byte_requests = [r for r in log if "/resolve/" in r["target"] or "/cdn/" in r["target"]]
    assert byte_requests and all(r["authorized"] and r["status"] in (200, 206, 302, 307) for r in byte_requests), log
    assert not [r for r in log if r["status"] == 407], log
    assert any("/api/models/" in r["target"] for r in log), "the metadata did not go through the proxy"
    assert password not in json.dumps(res)


def test_wrong_proxy_credentials_fail_once_with_a_clear_message(hub, tmp_path):
    password = "pw-" + secrets.token_hex(6)
    with AuthProxy("ct200", password) as proxy:
        wrong = proxy.url_with_credentials.replace(password, "not-" + password)
        # the metadata is already known (a handed listing and a commit): the first byte request meets the proxy
        listing = [{"path": f.path, "size": f.size, "oid": f.sha256 if f.lfs else f.oid, "lfs": f.lfs}
                   for f in hub.repo(WEIGHTS).files.values()]
        failed, res = run_download(hub, tmp_path / "w", revision=hub.repo(WEIGHTS).commit, listing=listing,
                                   env={"http_proxy": wrong}, retries=5)
        log, proxy_url = list(proxy.log), proxy.url
    assert failed and res["code"] == "proxy_auth", res
    assert "407" in res["msg"] and proxy_url in res["msg"] and "@HOST:PORT" in res["fix"] and "credentials in the proxy URL" in res["fix"], res
    assert password not in json.dumps(res) and password not in res["_stderr"]
    refused = [r for r in log if r["status"] == 407]
    assert refused and len(refused) <= 8, "a 407 is not worth retrying: %d refusals" % len(refused)


def test_wrong_proxy_credentials_on_the_metadata_path_name_the_proxy(hub, tmp_path):
    """huggingface_hub meets the 407 first (no listing handed): the verdict names the proxy, not the Hub."""
    password = "pw-" + secrets.token_hex(6)
    with AuthProxy("ct200", password) as proxy:
        wrong = proxy.url_with_credentials.replace(password, "not-" + password)
        failed, res = run_download(hub, tmp_path / "w", env={"http_proxy": wrong, "HTTP_PROXY": wrong})
    assert failed and res["code"] == "proxy_auth" and "407" in res["msg"] and "@HOST:PORT" in res["fix"] and "credentials in the proxy URL" in res["fix"], res
    assert password not in json.dumps(res) + res["_stderr"]
    assert not (tmp_path / "w").exists() or not os.listdir(tmp_path / "w")


def test_connect_tunnel_carries_the_proxy_credentials(hub, tmp_path, monkeypatch):
    """https through the proxy: the CONNECT carries Proxy-Authorization, the tunnelled TLS request does not
    need it; without (or with wrong) credentials one ProxyRefused names the proxy, never the password."""
    from ansible_collections.ct200.deploy.plugins.module_utils import hf_transfer_http as http

    shard = hub.repo(WEIGHTS).files[SHARD2]
    cert, key = self_signed_cert(str(tmp_path))
    password = "pw-" + secrets.token_hex(6)
    monkeypatch.setenv("SSL_CERT_FILE", cert)
    for name in ("no_proxy", "NO_PROXY", "HTTPS_PROXY"):
        monkeypatch.delenv(name, raising=False)
    with TlsFront(cert, key, hub.port) as front, AuthProxy("ct200", password) as proxy:
        url = "https://localhost:%d/cdn/%s" % (front.port, shard.sha256)
        monkeypatch.setenv("https_proxy", proxy.url_with_credentials)
        conns = http.Connections(timeout=10)
        resp, _final, status = http.open_stream(conns, url, {})
        body = resp.read()
        conns.close()
        assert status == 200 and hashlib.sha256(body).hexdigest() == shard.sha256
        connects = [r for r in proxy.log if r["method"] == "CONNECT"]
        assert connects and all(r["authorized"] and r["status"] == 200 for r in connects), proxy.log
        for given in (proxy.url, proxy.url_with_credentials.replace(password, "x" + password)):
            monkeypatch.setenv("https_proxy", given)
            with pytest.raises(http.TransferError) as refused:
                http.open_stream(http.Connections(timeout=10), url, {})
            assert type(refused.value).__name__ == "ProxyRefused" and not refused.value.retryable
            assert proxy.url in str(refused.value) and "407" in str(refused.value)
            assert password not in str(refused.value) and "x" + password not in str(refused.value)
        assert [r["status"] for r in proxy.log if r["method"] == "CONNECT"][-2:] == [407, 407]


def test_xet_listing_with_lfs_is_fetched_through_the_bridge_and_verified(hub, tmp_path):
    hub.xet = True
    failed, res = run_download(hub, tmp_path / "w")
    assert not failed, res["msg"]
    assert_tree_matches(hub, WEIGHTS, tmp_path / "w")
    assert _gets(hub, "/xet-bridge-us/") and not _gets(hub, "/cdn/")


def test_xet_hash_without_lfs_is_refused_naming_xet_and_the_fix(hub, tmp_path):
    hub.xet = hub.xet_without_lfs = True
    dest = tmp_path / "w"
    failed, res = run_download(hub, dest)
    assert failed and res["code"] == "xet_unverifiable", res
    assert "xetHash" in res["msg"] and "Xet" in res["msg"] and "nothing was written" in res["msg"]
    assert "hf download %s" % WEIGHTS in res["fix"] and "ignore_patterns" in res["fix"]
    assert not _gets(hub, "/xet-bridge-us/") and not _gets(hub, "/cdn/"), "bytes were fetched anyway"
    assert not any(name.endswith(".safetensors") for _r, _d, names in os.walk(dest) for name in names)
    # the files that carry a usable id are still fetched when only they are selected
    failed, res = run_download(hub, dest, allow_patterns=["*.json"])
    assert not failed, res["msg"]
    assert_tree_matches(hub, WEIGHTS, dest, paths={"config.json", "tokenizer_config.json"})
