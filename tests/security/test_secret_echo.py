# SPDX-License-Identifier: Apache-2.0
"""An upstream that echoes the token into every error channel (issue 18, items 1 and 5).

A debugging proxy or a broken mirror between a host and the Hub answers every file request with the
request's ``Authorization`` header in the error body, ``X-Error-Message``, ``X-Error-Code`` and other
headers.  Whatever the run fails with, the token is in no output and in no file (under ``local_dir``,
its state directory, or anything else the run wrote), and the files a peer may fetch (what the
weight_peer role's nginx serves, fetched through that nginx) hold no free text from the upstream at all:
the progress document says a code; the redacted words are in the owner-only ``.ct200/error.json``."""

from __future__ import annotations

import json
import os
import re
import stat

import pytest

from hostile_servers import MARKER, USERINFO_SECRET
from sec_helpers import WEIGHTS, WEIGHTS_FILES, fetch, files_under, holding, run_module
from ansible_collections.ct200.deploy.plugins.module_utils import fanout

CODE_RE = re.compile(r"[a-z_]+\Z")


def _download(upstream, hub, dest, **extra):
    args = dict(repo_id=WEIGHTS, local_dir=str(dest), endpoint=upstream.url, token=hub.token("granted"),
                min_free_bytes=0, retries=0, max_workers=2, stall_timeout=10)
    args.update(extra)
    return run_module("hf_download", args)


def _assert_no_secret_anywhere(token, raw, roots):
    assert token not in raw, "the token is in the module's output"
    files = files_under(*roots)
    assert files, "the run wrote nothing to check"
    assert holding(token, files) == [], "the token is in %s" % holding(token, files)
    assert holding("Bearer " + token[:8], files) == []
    return files


def _assert_served_files_hold_codes_only(base, local_dir, token):
    """What weight_peer's nginx serves for this directory, fetched through it."""
    status, body = fetch(base + "/_ct200/model/progress.json")
    assert status == 200, status
    progress = json.loads(body)
    assert progress["state"] == "failed" and CODE_RE.match(progress["error"]), progress
    assert MARKER.encode() not in body and token.encode() not in body
    for rel in [os.path.relpath(p, local_dir) for p in files_under(local_dir)]:
        status, body = fetch(base + "/model/" + rel)
        if any(part.startswith(".") for part in rel.split("/")):
            assert status == 404, rel  # state, partial and temp files are never served
        else:
            assert token.encode() not in body and MARKER.encode() not in body, rel
    assert fetch(base + "/model/.ct200/error.json")[0] == 404


@pytest.mark.parametrize("status", [500, 403, 404, 400])
def test_a_token_echoed_in_every_error_channel_reaches_no_output_and_no_file(
        hub, upstream, tmp_path, nginx_peer, status):
    upstream.status = status
    dest = tmp_path / "w"
    token = hub.token("granted")
    failed, res, raw = _download(upstream, hub, dest)
    assert failed and upstream.hits, res
    _assert_no_secret_anywhere(token, raw, [tmp_path])
    progress = json.loads((dest / ".ct200" / "progress.json").read_text())
    assert progress["state"] == "failed" and progress["error"] == res["code"], progress
    error_file = dest / ".ct200" / "error.json"
    assert stat.S_IMODE(os.stat(error_file).st_mode) == 0o600
    words = json.loads(error_file.read_text())
    assert words["code"] == res["code"] and MARKER in words["message"], words  # redacted, not dropped
    _assert_served_files_hold_codes_only(nginx_peer(dest), str(dest), token)


def test_the_fanout_progress_document_holds_codes_only(hub, upstream, tmp_path):
    """hf_fanout_fetch's progress document is served the same way: a code, the words owner-only."""
    listing = dict((f.path, {"size": f.size, "oid": f.sha256 if f.lfs else f.oid, "lfs": f.lfs})
                   for f in hub.repo(WEIGHTS).files.values() if not fanout.is_hidden(f.path))
    token = hub.token("granted")
    dest = tmp_path / "f"
    fetcher = fanout.Fetcher(str(dest), WEIGHTS, hub.repo(WEIGHTS).commit, listing,
                             [fanout.hub_source(upstream.url, token)], stall_timeout=10, progress_interval=0.1)
    with pytest.raises(fanout.FanoutError) as caught:
        fetcher.run()
    assert token not in caught.value.message
    progress = json.loads((dest / ".ct200" / "progress.json").read_text())
    assert progress["state"] == "failed" and CODE_RE.match(progress["error"]), progress
    files = files_under(tmp_path)
    assert holding(token, files) == [] and holding(MARKER, {p: b for p, b in files.items() if os.path.basename(p) == "progress.json"}) == []
    assert stat.S_IMODE(os.stat(dest / ".ct200" / "error.json").st_mode) == 0o600


def test_userinfo_and_a_signed_query_in_a_redirect_target_are_redacted(hub, upstream, tmp_path):
    upstream.mode = "redirect_userinfo"
    failed, res, raw = _download(upstream, hub, tmp_path / "w")
    assert failed and res["code"] == "transfer_failed", res
    assert USERINFO_SECRET not in raw and "deadbeefdeadbeef" not in raw, res["msg"]
    assert "***@127.0.0.1" in res["msg"], res["msg"]
    assert holding(USERINFO_SECRET, files_under(tmp_path)) == []


def test_a_gzip_encoded_file_body_is_named_as_such(hub, upstream, tmp_path):
    upstream.mode = "gzip"
    failed, res, _raw = _download(upstream, hub, tmp_path / "w")
    assert failed, res
    assert "Content-Encoding: gzip" in res["msg"] and "identity" in res["msg"], res["msg"]
    assert "mismatch" not in res["msg"] and "says the file has" not in res["msg"]
    assert not any((tmp_path / "w" / p).exists() for p in WEIGHTS_FILES if p.endswith(".safetensors"))
