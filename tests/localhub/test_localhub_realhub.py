# SPDX-License-Identifier: Apache-2.0
"""The real-Hub behaviours of the local Hub (localhub.realhub, the ratelimit fault, localhub.proxy),
each observed through the real huggingface_hub client or on the wire."""

from __future__ import annotations

import base64
import re
import secrets
import time
import urllib.error
import urllib.request

import pytest
from localhub_testdata import BIG_FILE, BIG_REPO

from localhub import FaultError
from localhub.proxy import AuthProxy

DL = f"""
r = attempt(hf_hub_download, "{BIG_REPO}", "{BIG_FILE}")
RESULT["dl"] = r
if r["ok"]:
    RESULT["sha"] = sha256_of(r["value"])
"""


@pytest.fixture
def real_hub(clean_hub):
    yield clean_hub
    clean_hub.cdn_expiry, clean_hub.redirect_cache = None, 0.0
    clean_hub.xet = clean_hub.xet_without_lfs = False


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):  # noqa: ANN002,ANN003
        return None


def _location(hub) -> str:
    opener = urllib.request.build_opener(_NoRedirect)
    try:
        opener.open(f"{hub.url}/{BIG_REPO}/resolve/main/{BIG_FILE}")
    except urllib.error.HTTPError as exc:
        assert exc.code == 302, exc.code
        return exc.headers["Location"]
    raise AssertionError("no redirect")


def _get(url: str, headers: dict | None = None) -> tuple[int, bytes]:
    req = urllib.request.Request(url, headers={"Range": "bytes=0-15", **(headers or {})})
    try:
        with urllib.request.urlopen(req) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def test_signed_cdn_urls_expire_with_the_cloudfront_answer(real_hub, hf):
    real_hub.cdn_expiry = 1
    result = hf(DL)  # the real client follows the fresh signed URL at once
    assert result["dl"]["ok"] and result["sha"] == real_hub.repo(BIG_REPO).files[BIG_FILE].sha256, result
    location = _location(real_hub)
    assert "Expires=" in location and "Signature=" in location and "Key-Pair-Id=" in location
    assert _get(location)[0] == 206
    assert _get(location.replace("Signature=", "Signature=0"))[0] == 403, "a tampered signature is accepted"
    assert _get(location.split("?")[0])[0] == 403, "an unsigned URL is accepted"
    time.sleep(2.1)
    status, body = _get(location)
    assert status == 403 and b"<Code>AccessDenied</Code>" in body, (status, body)


def test_redirect_cache_replays_the_same_signed_url(real_hub):
    real_hub.cdn_expiry, real_hub.redirect_cache = 1, 1.5
    first = _location(real_hub)
    assert _location(real_hub) == first
    time.sleep(1.6)
    assert _location(real_hub) != first


def test_ratelimit_fault_sends_the_hubs_headers_as_huggingface_hub_reads_them(real_hub, hf):
    real_hub.set_faults([{"kind": "ratelimit", "path_glob": f"/{BIG_REPO}/resolve/*", "seconds": 2, "limit": 500}])
    result = hf(DL)
    # huggingface_hub's http_backoff read t= from RateLimit (there is no Retry-After) and slept t + 1
    assert result["dl"]["ok"], result
    assert re.search(r"Rate limited\. Waiting [23]\.0s before retry", result["_stderr"]), result["_stderr"]
    limited = [r for r in real_hub.requests_log() if r["status"] == 429]
    assert limited and all(r["fault"] == "ratelimit" for r in limited)
    code = f"""
from huggingface_hub.utils import parse_ratelimit_headers
import urllib.request, urllib.error
try:
    urllib.request.urlopen("{real_hub.url}/{BIG_REPO}/resolve/main/{BIG_FILE}")
except urllib.error.HTTPError as e:
    info = parse_ratelimit_headers(dict(e.headers))
    RESULT.update(status=e.code, retry_after=e.headers.get("Retry-After"), info=info and info.__dict__)
"""
    real_hub.set_faults([{"kind": "ratelimit", "path_glob": f"/{BIG_REPO}/resolve/*", "seconds": 60, "limit": 500}])
    result = hf(code)
    assert result["status"] == 429 and result["retry_after"] is None, result
    assert result["info"] == {"resource_type": "resolvers", "remaining": 0, "reset_in_seconds": 60, "limit": 500,
                              "window_seconds": 60}, result


def test_ratelimit_fault_is_validated():
    from localhub.faults import parse_rules

    with pytest.raises(FaultError, match="limit only applies to kind ratelimit"):
        parse_rules({"kind": "429", "limit": 5})
    with pytest.raises(FaultError, match="resource must be a word"):
        parse_rules({"kind": "ratelimit", "resource": "a b"})
    assert parse_rules({"kind": "ratelimit", "seconds": 3})[0].count == -1


def test_xet_listing_carries_the_real_xet_hash_and_the_bridge_serves_the_bytes(real_hub, hf):
    real_hub.xet = True
    big = real_hub.repo(BIG_REPO).files[BIG_FILE]
    code = f"""
import hf_xet
entry = [e for e in api.list_repo_tree("{BIG_REPO}", recursive=True) if e.path == "{BIG_FILE}"][0]
RESULT["xet_hash"], RESULT["lfs"] = entry.xet_hash, entry.lfs.sha256 if entry.lfs else None
path = hf_hub_download("{BIG_REPO}", "{BIG_FILE}")
RESULT["sha"], RESULT["xet_of_bytes"] = sha256_of(path), hf_xet.hash_files([path])[0].hash
"""
    result = hf(code)
    assert result["lfs"] == result["sha"] == big.sha256, result
    assert result["xet_hash"] == result["xet_of_bytes"], "xetHash is not the Xet hash of the bytes"
    bridge = [r for r in real_hub.requests_log() if r["path"].startswith("/xet-bridge-us/")]
    assert bridge and not any(r["authorization"] for r in bridge), bridge
    real_hub.xet_without_lfs = True
    result = hf(code.split("\npath = ", maxsplit=1)[0])
    assert result["lfs"] is None and result["xet_hash"] == real_hub.xet_hash(big), result


def test_expired_bridge_url_gets_the_s3_answer(real_hub):
    real_hub.xet, real_hub.cdn_expiry = True, 1
    location = _location(real_hub)
    assert "/xet-bridge-us/" in location and "X-Amz-Expires=1" in location and "X-Amz-Signature=" in location
    assert _get(location)[0] == 206
    time.sleep(2.1)
    status, body = _get(location)
    assert status == 403 and b"Request has expired" in body and b"<X-Amz-Expires>1</X-Amz-Expires>" in body


def test_proxy_requires_credentials_and_the_real_client_passes_with_them(real_hub, hf):
    password = "pw-" + secrets.token_hex(6)
    with AuthProxy("ct200", password) as proxy:
        direct = urllib.request.build_opener(urllib.request.ProxyHandler({"http": proxy.url}))
        with pytest.raises(urllib.error.HTTPError) as refused:
            direct.open(f"{real_hub.url}/api/models/{BIG_REPO}")
        assert refused.value.code == 407 and refused.value.headers["Proxy-Authenticate"].startswith("Basic")
        basic = "Basic " + base64.b64encode(f"ct200:{password}".encode()).decode()
        assert direct.open(urllib.request.Request(f"{real_hub.url}/api/models/{BIG_REPO}",
                                                  headers={"Proxy-Authorization": basic})).status == 200
        info = f'RESULT["info"] = attempt(lambda: api.model_info("{BIG_REPO}").sha)'
        assert hf(info, env={"HTTP_PROXY": proxy.url_with_credentials})["info"]["ok"]
        assert hf(info, env={"HTTP_PROXY": proxy.url})["info"]["status"] == 407
        log = list(proxy.log)
    assert any(r["authorized"] and r["status"] == 200 for r in log) and any(r["status"] == 407 for r in log)
    assert password not in repr(log)
