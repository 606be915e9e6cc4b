# SPDX-License-Identifier: Apache-2.0
"""Every fault knob, observed through the real client (and the admin API)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest
from localhub_testdata import BIG_FILE, BIG_REPO, BIG_SIZE

from localhub import FaultError, TARGET_REPO

DL = f"""
t0 = time.monotonic()
r = attempt(hf_hub_download, "{BIG_REPO}", "{BIG_FILE}")
RESULT["elapsed"] = time.monotonic() - t0
RESULT["dl"] = r
if r["ok"]:
    RESULT["sha"] = sha256_of(r["value"])
    RESULT["size"] = os.path.getsize(r["value"])
"""


def _cdn_path(hub) -> str:
    return f"/cdn/{hub.repo(BIG_REPO).files[BIG_FILE].sha256}"


def _cdn_log(hub) -> list[dict]:
    return [r for r in hub.requests_log() if r["kind"] == "cdn_get"]


def test_cut_body_is_resumed_with_range(clean_hub, hf):
    big = clean_hub.repo(BIG_REPO).files[BIG_FILE]
    clean_hub.set_faults([{"kind": "cut", "path_glob": _cdn_path(clean_hub), "fraction": 0.5}])
    result = hf(DL)
    assert result["dl"]["ok"], result
    assert result["sha"] == big.sha256
    log = _cdn_log(clean_hub)
    assert [r["fault"] for r in log] == ["cut", None]
    assert log[0]["bytes_sent"] == BIG_SIZE // 2
    # the client keeps whole 10 MiB chunks and asks for the rest
    assert log[1]["range"] == "bytes=10485760-" and log[1]["status"] == 206
    assert clean_hub.stats()["faults_fired"] == 1


def test_corrupt_is_same_size_and_only_a_checksum_catches_it(clean_hub, hf):
    big = clean_hub.repo(BIG_REPO).files[BIG_FILE]
    clean_hub.set_faults([{"kind": "corrupt", "path_glob": "/cdn/*", "fraction": 0.25, "bytes": 4}])
    result = hf(DL + f"""
RESULT["verify"] = repr(api.verify_repo_checksums("{BIG_REPO}"))
""")
    assert result["dl"]["ok"], result
    assert result["size"] == big.size
    assert result["sha"] != big.sha256
    assert "mismatches=[]" not in result["verify"] and BIG_FILE in result["verify"]
    assert [r["fault"] for r in _cdn_log(clean_hub)] == ["corrupt"]


def test_429_with_retry_after_is_retried(clean_hub, hf):
    clean_hub.set_faults([{"kind": "429", "path_glob": "/cdn/*", "retry_after": 1}])
    result = hf(DL)
    assert result["dl"]["ok"], result
    assert result["sha"] == clean_hub.repo(BIG_REPO).files[BIG_FILE].sha256
    assert [r["status"] for r in _cdn_log(clean_hub)] == [429, 200]
    assert result["elapsed"] >= 2.0  # Retry-After 1 -> the client sleeps 1 + 1 s


def test_5xx_on_resolve_head_is_retried(clean_hub, hf):
    clean_hub.set_faults([{"kind": "5xx", "path_glob": f"/{BIG_REPO}/resolve/*", "methods": ["HEAD"],
                           "count": 2, "status": 503, "retry_after": 0}])
    result = hf(DL)
    assert result["dl"]["ok"], result
    heads = [r["status"] for r in clean_hub.requests_log() if r["kind"] == "resolve_head"]
    assert heads == [503, 503, 302]


def test_5xx_forever_surfaces_as_http_error(clean_hub, hf):
    clean_hub.set_faults([{"kind": "5xx", "path_glob": f"/api/models/{TARGET_REPO}", "count": -1, "status": 500}])
    result = hf(f'RESULT["info"] = attempt(api.model_info, "{TARGET_REPO}")')
    assert result["info"]["cls"] == "HfHubHTTPError" and result["info"]["status"] == 500
    assert clean_hub.list_faults()[0]["count"] == -1


def test_stall_longer_than_client_timeout_is_resumed(clean_hub, hf):
    big = clean_hub.repo(BIG_REPO).files[BIG_FILE]
    clean_hub.set_faults([{"kind": "stall", "path_glob": "/cdn/*", "fraction": 0.6, "seconds": 4}])
    result = hf(DL, env={"HF_HUB_DOWNLOAD_TIMEOUT": "1"})
    assert result["dl"]["ok"], result
    assert result["sha"] == big.sha256
    log = _cdn_log(clean_hub)
    assert log[0]["fault"] == "stall"
    assert len(log) == 2 and log[1]["range"] == "bytes=10485760-"


def test_stall_shorter_than_timeout_just_delays(clean_hub, hf):
    clean_hub.set_faults([{"kind": "stall", "path_glob": "/cdn/*", "fraction": 0.1, "seconds": 1.5}])
    result = hf(DL)
    assert result["dl"]["ok"] and result["elapsed"] >= 1.5, result
    assert len(_cdn_log(clean_hub)) == 1


def _admin(hub, method: str, path: str, body: object | None = None) -> tuple[int, object]:
    data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
    req = urllib.request.Request(hub.url + path, data=data, method=method)
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_admin_api_validates_and_keeps_previous_rules(clean_hub):
    status, rules = _admin(clean_hub, "POST", "/_admin/faults", [{"kind": "cut", "path_glob": "/cdn/*"}])
    assert status == 200 and [r["kind"] for r in rules] == ["cut"]
    for bad, needle in (
        ([{"kind": "explode"}], "kind must be one of"),
        ([{"kind": "cut", "fraction": 2}], "fraction must be a number between 0 and 1"),
        ([{"kind": "5xx", "status": 404}], "status must be an integer 500-599"),
        ([{"kind": "stall", "count": 0}], "count must be a positive integer or -1"),
        ([{"kind": "cut", "colour": "red"}], "unknown field(s) colour"),
        (b"{not json", "not valid JSON"),
    ):
        status, body = _admin(clean_hub, "POST", "/_admin/faults", bad)
        assert status == 400 and needle in body["error"], (bad, body)
        assert [r["kind"] for r in clean_hub.list_faults()] == ["cut"]  # previous state intact
    status, rules = _admin(clean_hub, "POST", "/_admin/faults?append=1", {"kind": "429"})
    assert [r["kind"] for r in rules] == ["cut", "429"]
    assert _admin(clean_hub, "DELETE", "/_admin/faults") == (200, [])
    assert clean_hub.list_faults() == []
    with pytest.raises(FaultError, match="seconds only applies"):
        clean_hub.set_faults({"kind": "cut", "seconds": 3})


def test_admin_stats_and_reset(clean_hub):
    urllib.request.urlopen(f"{clean_hub.url}/api/models/{TARGET_REPO}", timeout=10).read()
    status, stats = _admin(clean_hub, "GET", "/_admin/stats")
    assert status == 200 and stats["model_info"] == 1 and stats["api"] == 1
    assert stats["authorized"]["model_info"] == 0
    status, stats = _admin(clean_hub, "POST", "/_admin/stats/reset", {})
    assert status == 200 and stats["model_info"] == 0
    # a request is counted once answered: the reset call itself is the only one so far
    assert _admin(clean_hub, "GET", "/_admin/stats")[1]["admin"] == 1


def test_stats_wait_for_a_request_still_being_recorded():
    """The client can hold a whole answer before the server thread records it
    (CI saw admin == 0 right after the reset call): readers wait for requests
    that started before them, but never longer than the settle bound."""
    import threading
    import time

    from localhub.faults import Stats

    stats = Stats()
    ticket = stats.begin()

    def finish_late():
        time.sleep(0.3)
        stats.record("admin", "POST", "/_admin/stats/reset", 200, False, None, 2, None, ticket=ticket)

    threading.Thread(target=finish_late).start()
    assert stats.snapshot()["admin"] == 1

    stalled = stats.begin()  # never recorded, like a stalled transfer
    t0 = time.monotonic()
    assert stats.snapshot(wait=0.2)["admin"] == 1
    assert 0.2 <= time.monotonic() - t0 < 1.5
    assert stats.snapshot(exclude=stalled, wait=5)["admin"] == 1  # a reader never waits for itself
