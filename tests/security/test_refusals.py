# SPDX-License-Identifier: Apache-2.0
"""The lower items of issue 18, each refused with its own message naming the cause and the fix: regexes
anchored with \\Z, negative peer timeouts, credentials in a peer URL, local write errors classified as
local (EFBIG end to end under a file size limit; EIO and EROFS), a world-readable --token-file, and the
one redaction itself (CLI JSON included)."""

from __future__ import annotations

import errno
import importlib
import json
import os
import pkgutil
import re
import resource
import signal

import pytest

from sec_helpers import WEIGHTS, run_module
from ansible_collections.ct200.deploy.plugins import module_utils
from ansible_collections.ct200.deploy.plugins.module_utils import fanout, hf_paths, hf_transfer, sglang_spec
from ansible_collections.ct200.deploy.plugins.module_utils.hf_transfer_engine import FetchFailed, Stats

SECRET = "s3cr" + "et-peer-userinfo-0a1b"


# ------------------------------------------------------------------ anchors
def _module_regexes():
    for info in pkgutil.iter_modules(module_utils.__path__):
        module = importlib.import_module("%s.%s" % (module_utils.__name__, info.name))
        for name, value in vars(module).items():
            if isinstance(value, re.Pattern):
                yield "%s.%s" % (info.name, name), value.pattern


def test_no_validation_regex_ends_in_dollar():
    """``$`` also matches before a final newline, so ``'org/name\\n'`` passed as a repo id."""
    loose = [name for name, pattern in _module_regexes() if pattern.endswith("$") and not pattern.endswith("\\$")]
    assert loose == [], "anchor these with \\Z: %s" % loose


@pytest.mark.parametrize("refused", [
    lambda: hf_paths.repo_id_problem("org/name\n") is not None,
    lambda: not sglang_spec.POSIX_NAME_RE.match("sglang\n"),
    lambda: not hf_transfer.is_commit("a" * 40 + "\n"),
], ids=["repo_id", "posix_name", "commit"])
def test_a_trailing_newline_is_refused(refused):
    assert refused()


# ------------------------------------------------------------ peer options
def _fetch_args(tmp_path, hub, **extra):
    repo = hub.repo(WEIGHTS)
    files = dict((f.path, {"size": f.size, "oid": f.sha256 if f.lfs else f.oid, "lfs": f.lfs})
                 for f in repo.files.values() if not fanout.is_hidden(f.path))
    args = dict(mode="fetch", repo_id=WEIGHTS, local_dir=str(tmp_path / "w"), commit=repo.commit, files=files,
                peers=[{"name": "h0", "url": "http://127.0.0.1:9/model"}, {"name": "h1", "url": "http://127.0.0.1:9/model"}],
                host="h1", peer_wait_timeout=1, peer_stall_timeout=1)
    args.update(extra)
    return args


@pytest.mark.parametrize("option", ["peer_wait_timeout", "peer_stall_timeout"])
def test_a_negative_peer_timeout_is_refused(hub, tmp_path, option):
    failed, res, _raw = run_module("hf_fanout_fetch", _fetch_args(tmp_path, hub, **{option: -5}))
    assert failed and res["code"] == "bad_argument", res
    assert option in res["msg"] and ">= 0" in res["msg"], res["msg"]
    assert not (tmp_path / "w").exists()


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -0.5])
def test_peer_timeouts_must_be_finite_and_not_negative(value):
    with pytest.raises(fanout.FanoutError) as caught:
        fanout.Fetcher("/tmp/ct200-none", "a/b", "0" * 40, {"f": {"size": 1, "oid": "0" * 64, "lfs": True}}, [],
                       peer_stall=value)
    assert caught.value.code == "bad_argument" and "peer_stall_timeout" in caught.value.message


def test_credentials_in_a_peer_url_are_refused_and_never_echoed(hub, tmp_path):
    peers = [{"name": "h0", "url": "http://alice:%s@127.0.0.1:9/model" % SECRET},
             {"name": "h1", "url": "http://127.0.0.1:9/model"}]
    failed, res, raw = run_module("hf_fanout_fetch", _fetch_args(tmp_path, hub, peers=peers))
    assert failed and res["code"] == "bad_argument", res
    assert "credentials" in res["msg"] and "***@127.0.0.1" in res["msg"], res["msg"]
    assert SECRET not in raw
    assert not (tmp_path / "w").exists()


# ---------------------------------------------------------- local write errors
def _limit_file_size():
    """The task's user has a file size limit (ulimit -f 8 MiB): writes past it fail with EFBIG."""
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (8 << 20, 8 << 20))


def test_efbig_during_a_download_is_a_local_error_not_the_network(hub, tmp_path):
    failed, res, _raw = run_module("hf_download", dict(repo_id=WEIGHTS, local_dir=str(tmp_path / "w"),
                                                       endpoint=hub.url, min_free_bytes=0, max_workers=1),
                                   preexec_fn=_limit_file_size)
    assert failed and res["code"] == "local_error", res
    assert "EFBIG" in res["msg"] and "file size limit" in res["msg"], res["msg"]
    assert "network" not in res["fix"] and "ulimit -f" in res["fix"], res["fix"]


@pytest.mark.parametrize("code, words", [(errno.EROFS, "read-only"), (errno.EIO, "I/O error"),
                                         (errno.EFBIG, "larger than")])
def test_local_write_errors_are_classified_as_local(tmp_path, code, words):
    opts = hf_transfer.Options(repo_id="a/b", local_dir=str(tmp_path / "w"), min_free_bytes=0)
    exc = FetchFailed("f.bin: OSError", cause=OSError(code, os.strerror(code)), path="f.bin")
    error = hf_transfer.fetch_error(opts, exc, Stats())
    assert error.code == "local_error" and words in error.message, error.message
    assert "network" not in error.fix
    assert fanout._local_cause(exc), "the fan-out would try the next source for a local disk error"


# ---------------------------------------------------------------- CLI
@pytest.mark.parametrize("mode, warned", [(0o644, True), (0o640, True), (0o600, False)])
def test_a_token_file_readable_by_others_is_warned_about(tmp_path, capsys, mode, warned):
    from ct200_fleet.secret import read_token_file

    path = tmp_path / "token"
    path.write_text("hf_" + "x" * 34 + "\n")
    os.chmod(path, mode)
    assert read_token_file(str(path)) == "hf_" + "x" * 34
    err = capsys.readouterr().err
    assert ("warning" in err and "chmod 600" in err and "%04o" % mode in err) is warned, err


def test_the_cli_json_summary_goes_through_the_redaction(tmp_path):
    from ct200_fleet.cli import write_json

    token = "tok-" + "9" * 24
    summary = {"hosts": [{"host": "h0", "msg": "HTTP 500 from http://u:pw1234@mirror/x: you sent Bearer %s" % token}],
               "report": {"cause": "upstream said token=%s" % token}}
    write_json(str(tmp_path / "out.json"), summary, [token])
    text = (tmp_path / "out.json").read_text()
    assert token not in text and "pw1234" not in text and "Bearer ***" in text, text
    assert json.loads(text)["hosts"][0]["host"] == "h0"


# ---------------------------------------------------------- the redaction
@pytest.mark.parametrize("text, gone", [
    ("Authorization: Bearer abc.def-ghi_jkl", "abc.def-ghi_jkl"),
    ("you sent hf_" + "Ab1" * 10, "Ab1Ab1Ab1"),
    ("GET http://user:hunter2pass@cdn.example/f", "hunter2pass"),
    ("https://cdn.example/f?X-Amz-Signature=abcd1234&X-Amz-Expires=60", "abcd1234"),
    ("https://d1.cloudfront.net/f?Expires=1&Policy=eyJ0&Signature=zzz999&Key-Pair-Id=K1", "zzz999"),
    ('{"token": "plainsecret1"}', "plainsecret1"),
])
def test_redact_removes_every_token_shape(text, gone):
    from ansible_collections.ct200.deploy.plugins.module_utils import redact

    assert gone not in redact.redact(text)


def test_redact_keeps_the_collection_s_own_words():
    from ansible_collections.ct200.deploy.plugins.module_utils import redact

    text = ("hf_download failed; see https://huggingface.co/settings/tokens/new?canReadGatedRepos=true&tokenType="
            "fineGrained and the token (sha256:0123456789ab, from file:/root/.cache/huggingface/token)")
    assert redact.redact(text) == text
    assert redact.scrub({"a": [text, 3, None]}) == {"a": [text, 3, None]}
