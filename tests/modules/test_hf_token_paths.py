# SPDX-License-Identifier: Apache-2.0
"""hf_token as a real process on hostile ground (issue 7, findings 2, 8 and 11).

The module runs as root, as under `become`; the other users are the ones every
Debian host has (nobody), so the tests need no user management.
"""

import json
import os
import pwd
import stat
import subprocess
import sys

import pytest

from modhelper import REPO_ROOT

TOKEN = "hf_" + "C" * 34
TOKEN2 = "hf_" + "D" * 34
NOBODY = pwd.getpwnam("nobody")

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="ownership cases need root, like the module under become")


def hf_token(args, cwd=None):
    """plugins/modules/hf_token.py as its own process, arguments on stdin (Ansible pipelining)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGING_FACE"))}
    env["PYTHONPATH"] = os.path.join(REPO_ROOT, "collections")
    payload = json.dumps({"ANSIBLE_MODULE_ARGS": dict(dict(validate=False), **args)})
    proc = subprocess.run([sys.executable, os.path.join(REPO_ROOT, "plugins", "modules", "hf_token.py")],
                          input=payload, capture_output=True, text=True, env=env, cwd=cwd, timeout=60, check=False)
    result = json.loads(proc.stdout[proc.stdout.index("{"):])
    assert TOKEN not in proc.stdout + proc.stderr and TOKEN2 not in proc.stdout + proc.stderr
    return bool(result.get("failed")), result


def tree(root):
    """Every path below root with its owner, to prove nothing was written anywhere."""
    out = {}
    for dirpath, dirs, files in os.walk(root):
        for name in dirs + files:
            p = os.path.join(dirpath, name)
            out[p] = os.lstat(p).st_uid
    return out


def owned_dir(path, uid, mode=0o755):
    path.mkdir(parents=True)
    os.chown(path, uid, uid)
    path.chmod(mode)
    return path


# ---------------------------------------------------------------- finding 2: parents

def test_symlinked_parent_owned_by_another_user_is_refused(tmp_path):
    """The field case: root's token directory is a symlink into a directory another user owns."""
    theirs = owned_dir(tmp_path / "theirs", NOBODY.pw_uid)
    home = tmp_path / "root-home"
    home.mkdir()
    (home / ".cache").symlink_to(theirs)
    before = tree(tmp_path)
    failed, res = hf_token(dict(path=str(home / ".cache" / "huggingface" / "token"), token=TOKEN))
    assert failed and "is a symlink" in res["msg"] and str(home / ".cache") in res["msg"]
    assert "nothing was written" in res["msg"]
    assert tree(tmp_path) == before, "nothing may appear in the other user's directory"


def test_symlinked_parent_owned_by_root_is_refused_too(tmp_path):
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    failed, res = hf_token(dict(path=str(tmp_path / "link" / "token"), token=TOKEN))
    assert failed and "symlink" in res["msg"] and os.listdir(real) == []


def test_parent_owned_by_another_non_root_user_is_refused(tmp_path):
    theirs = owned_dir(tmp_path / "theirs", NOBODY.pw_uid)
    failed, res = hf_token(dict(path=str(theirs / "token"), token=TOKEN))
    assert failed and "owned by nobody" in res["msg"] and "neither root nor the token's owner" in res["msg"]
    assert os.listdir(theirs) == []


def test_grandparent_owned_by_another_user_is_refused(tmp_path):
    """Not only the last directory: whoever owns any parent can swap what lies below it."""
    theirs = owned_dir(tmp_path / "theirs", NOBODY.pw_uid)
    mine = theirs / "mine"
    mine.mkdir()
    failed, res = hf_token(dict(path=str(mine / "token"), token=TOKEN))
    assert failed and str(theirs) in res["msg"] and os.listdir(mine) == []


@pytest.mark.parametrize("mode", [0o777, 0o775])
def test_token_directory_writable_by_others_is_refused(tmp_path, mode):
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chown(shared, 0, NOBODY.pw_gid)
    shared.chmod(mode)
    failed, res = hf_token(dict(path=str(shared / "token"), token=TOKEN))
    assert failed and "writable by" in res["msg"] and os.listdir(shared) == []


def test_directories_of_the_owner_are_accepted_and_created_for_them(tmp_path):
    home = owned_dir(tmp_path / "home", NOBODY.pw_uid, 0o700)
    path = home / ".cache" / "huggingface" / "token"
    failed, res = hf_token(dict(path=str(path), token=TOKEN, owner="nobody"))
    assert not failed, res["msg"]
    st = os.stat(path)
    assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (NOBODY.pw_uid, 0o600)
    for d in (path.parent, path.parent.parent):
        assert (os.stat(d).st_uid, stat.S_IMODE(os.stat(d).st_mode)) == (NOBODY.pw_uid, 0o700)


# ---------------------------------------------------------------- finding 8: backup, relative path, modes

def test_backup_of_a_world_readable_file_is_born_0600(tmp_path):
    path = tmp_path / "token"
    path.write_text(TOKEN + "\n")
    path.chmod(0o644)
    failed, res = hf_token(dict(path=str(path), token=TOKEN2, backup=True))
    assert not failed, res.get("msg")
    backup = res["backup_file"]
    assert stat.S_IMODE(os.stat(backup).st_mode) == 0o600, "a backup must never keep the old 0644"
    assert open(backup).read().strip() == TOKEN and path.read_text().strip() == TOKEN2
    assert backup.startswith(str(path) + ".")


def test_backup_on_removal_is_born_0600(tmp_path):
    path = tmp_path / "token"
    path.write_text(TOKEN + "\n")
    path.chmod(0o640)
    failed, res = hf_token(dict(path=str(path), state="absent", backup=True))
    assert not failed and not path.exists()
    assert stat.S_IMODE(os.stat(res["backup_file"]).st_mode) == 0o600


def test_relative_path_is_refused_and_nothing_lands_in_the_working_directory(tmp_path):
    failed, res = hf_token(dict(path="token", token=TOKEN), cwd=str(tmp_path))
    assert failed and "is relative" in res["msg"] and "absolute path" in res["msg"]
    assert os.listdir(tmp_path) == []
    failed, res = hf_token(dict(path="sub/token", token=TOKEN), cwd=str(tmp_path))
    assert failed and "is relative" in res["msg"] and os.listdir(tmp_path) == []


@pytest.mark.parametrize("mode, words", [("4600", "setuid"), ("2600", "setgid"), ("1600", "sticky"),
                                         ("0000", "owner read"), ("0200", "owner read"), ("12345", "not a file mode")])
def test_bad_modes_are_refused(tmp_path, mode, words):
    failed, res = hf_token(dict(path=str(tmp_path / "token"), token=TOKEN, mode=mode))
    assert failed and words in res["msg"].replace("does not let the owner read", "owner read")
    assert os.listdir(tmp_path) == []


# ---------------------------------------------------------------- finding 11: one writer

def test_a_temp_file_left_by_a_killed_run_is_cleaned_up(tmp_path):
    """The writer is _io's: its temp names are recognised and a killed run's leftovers removed."""
    path = tmp_path / "token"
    stale = tmp_path / ".token.0123456789ab.ct200tmp"
    stale.write_text(TOKEN)
    stale.chmod(0o600)
    failed, res = hf_token(dict(path=str(path), token=TOKEN2))
    assert not failed and sorted(os.listdir(tmp_path)) == ["token"]


def test_token_file_has_no_writer_of_its_own():
    """token_file.py writes only through _io (no mkstemp/replace/chmod of its own)."""
    src = open(os.path.join(REPO_ROOT, "plugins", "module_utils", "token_file.py")).read()
    for forbidden in ("tempfile", "os.replace(", "os.chmod(", "os.chown(", "os.unlink(", "open(path"):
        assert forbidden not in src, forbidden


def test_restore_from_backup(tmp_path):
    path = tmp_path / "token"
    hf_token(dict(path=str(path), token=TOKEN))
    _failed, res = hf_token(dict(path=str(path), token=TOKEN2, backup=True))
    failed, res = hf_token(dict(path=str(path), restore_from=res["backup_file"]))
    assert not failed and res["changed"] and path.read_text().strip() == TOKEN
    elsewhere = tmp_path / "other.bak"
    elsewhere.write_text(TOKEN2 + "\n")
    failed, res = hf_token(dict(path=str(path), restore_from=str(elsewhere)))
    assert failed and "not a backup of" in res["msg"] and path.read_text().strip() == TOKEN


def test_query_reports_the_fingerprint_and_changes_nothing(tmp_path):
    path = tmp_path / "token"
    hf_token(dict(path=str(path), token=TOKEN))
    mtime = os.stat(path).st_mtime_ns
    failed, res = hf_token(dict(path=str(path), state="query"))
    assert not failed and not res["changed"] and res["exists"] and res["fingerprint"].startswith("sha256:")
    assert os.stat(path).st_mtime_ns == mtime
    failed, res = hf_token(dict(path=str(tmp_path / "none"), state="query"))
    assert not failed and not res["exists"] and res["fingerprint"] is None
