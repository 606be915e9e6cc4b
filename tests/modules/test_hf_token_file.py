# SPDX-License-Identifier: Apache-2.0
"""hf_token without network (validate=false): file semantics, idempotence, check mode, diff, leaks."""

import json
import os
import stat

import pytest

from ansible_collections.ct200.deploy.plugins.modules import hf_token
from modhelper import run_module

TOKEN = "hf_" + "A" * 34
TOKEN2 = "hf_" + "B" * 34


def run(path, **kw):
    args = dict(path=str(path), validate=False)
    args.update(kw)
    check, diff = args.pop("check", False), args.pop("diff", False)
    return run_module(hf_token.main, args, check_mode=check, diff=diff)


def mode_of(p):
    return stat.S_IMODE(os.stat(p).st_mode)


def test_install_is_born_0600_and_idempotent(tmp_path):
    path = tmp_path / "hf" / "token"
    failed, res = run(path, token=TOKEN)
    assert not failed and res["changed"]
    assert path.read_text() == TOKEN + "\n" and mode_of(path) == 0o600
    assert mode_of(path.parent) == 0o700
    assert res["fingerprint"].startswith("sha256:") and res["previous_fingerprint"] is None
    failed, res = run(path, token=" " + TOKEN + "\n")
    assert not failed and not res["changed"]
    assert not [p for p in os.listdir(path.parent) if p != "token"], "no temp file left behind"


def test_check_mode_and_diff_show_fingerprints_only(tmp_path):
    path = tmp_path / "token"
    run(path, token=TOKEN)
    failed, res = run(path, token=TOKEN2, check=True, diff=True)
    assert not failed and res["changed"]
    assert path.read_text() == TOKEN + "\n", "check mode must not write"
    before, after = res["diff"]["before"], res["diff"]["after"]
    assert before["fingerprint"] != after["fingerprint"] and after["mode"] == "0600"
    blob = json.dumps(res)
    assert TOKEN not in blob and TOKEN2 not in blob and "A" * 20 not in blob


def test_rotation_with_backup_keeps_previous_mode(tmp_path):
    path = tmp_path / "token"
    run(path, token=TOKEN)
    failed, res = run(path, token=TOKEN2, backup=True)
    assert not failed and res["changed"] and res["backup_file"]
    assert open(res["backup_file"]).read().strip() == TOKEN
    assert mode_of(res["backup_file"]) == 0o600
    assert path.read_text().strip() == TOKEN2


def test_wide_mode_on_existing_file_is_tightened_not_kept(tmp_path):
    path = tmp_path / "token"
    path.write_text(TOKEN + "\n")
    os.chmod(path, 0o644)
    failed, res = run(path, token=TOKEN)
    assert not failed and res["changed"] and mode_of(path) == 0o600
    path.write_text("old\n")
    os.chmod(path, 0o644)
    failed, res = run(path, token=TOKEN)
    assert not failed and mode_of(path) == 0o600 and path.read_text().strip() == TOKEN


@pytest.mark.parametrize("bad, words", [("", "is empty"), ("   ", "whitespace-only"),
                                        ("hf_abc\nhf_def", "newline"), ("hf_a\x07b", "control character")])
def test_bad_token_writes_nothing_and_keeps_previous(tmp_path, bad, words):
    path = tmp_path / "token"
    run(path, token=TOKEN)
    before = (path.read_bytes(), os.stat(path).st_mtime_ns)
    failed, res = run(path, token=bad)
    assert failed and words in res["msg"] and "nothing was written" in res["msg"]
    assert (path.read_bytes(), os.stat(path).st_mtime_ns) == before
    fresh = tmp_path / "fresh" / "token"
    failed, res = run(fresh, token=bad)
    assert failed and not fresh.exists() and not fresh.parent.exists()


def test_missing_token_with_state_present(tmp_path):
    failed, res = run(tmp_path / "token")
    assert failed and "missing" in res["msg"]


def test_world_readable_mode_refused(tmp_path):
    failed, res = run(tmp_path / "token", token=TOKEN, mode="0644")
    assert failed and "other users" in res["msg"] and not (tmp_path / "token").exists()


def test_absent_removes_and_is_idempotent(tmp_path):
    path = tmp_path / "token"
    run(path, token=TOKEN)
    failed, res = run(path, state="absent", check=True)
    assert res["changed"] and path.exists()
    failed, res = run(path, state="absent")
    assert not failed and res["changed"] and not path.exists()
    failed, res = run(path, state="absent")
    assert not failed and not res["changed"]


def test_default_path_is_the_owners_hf_home(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hfhome"))
    failed, res = run_module(hf_token.main, dict(token=TOKEN, validate=False))
    assert not failed and res["path"] == str(tmp_path / "hfhome" / "token")


def test_symlink_at_path_is_refused(tmp_path):
    target = tmp_path / "elsewhere"
    target.write_text("x")
    link = tmp_path / "token"
    link.symlink_to(target)
    failed, res = run(link, token=TOKEN)
    assert failed and "not a regular file" in res["msg"] and target.read_text() == "x"
