# SPDX-License-Identifier: Apache-2.0
"""ct200.deploy.model_dirs and _io.ensure_dir: the fan-out's directories in one call, owner and mode set, never
through a symlink at a directory's own name, check mode changing nothing. Runs as root (the suite does), so a real
ownership change is observable with the 'nobody' user."""
import os
import pwd
import stat

import pytest

from modhelper import run_module
from ansible_collections.ct200.deploy.plugins.module_utils._io import UnsafePathError, ensure_dir
from ansible_collections.ct200.deploy.plugins.modules import model_dirs as module

NOBODY = pwd.getpwnam("nobody")
SNAPSHOT = "snapshots/" + "a" * 40


def tree(root):
    return [str(root / "kimi"), str(root / "kimi" / "snapshots"), str(root / "kimi" / SNAPSHOT)]


def owner_and_mode(path):
    st = os.lstat(path)
    return st.st_uid, stat.S_IMODE(st.st_mode)


def test_a_missing_tree_is_made_owned_by_the_user_then_nothing_changes(tmp_path):
    failed, result = run_module(module.main, {"paths": tree(tmp_path), "owner": "nobody"})
    assert not failed and result["changed"] and result["created"] == tree(tmp_path)
    assert all(owner_and_mode(p) == (NOBODY.pw_uid, 0o755) for p in tree(tmp_path))
    failed, again = run_module(module.main, {"paths": tree(tmp_path), "owner": "nobody"})
    assert not failed and not again["changed"] and again["created"] == again["fixed"] == []


def test_missing_parents_of_a_deeper_path_get_the_same_owner(tmp_path):
    deep = tmp_path / "a" / "b" / "c"
    assert ensure_dir(str(deep), NOBODY.pw_uid, -1, 0o750) == "created"
    assert owner_and_mode(tmp_path / "a") == owner_and_mode(deep) == (NOBODY.pw_uid, 0o750)


def test_a_wrong_owner_or_mode_is_fixed_and_reported(tmp_path):
    target = tmp_path / "kimi"
    target.mkdir(mode=0o700)
    failed, result = run_module(module.main, {"paths": [str(target)], "owner": str(NOBODY.pw_uid), "mode": "0755"})
    assert not failed and result["changed"] and result["fixed"] == [str(target)] and result["created"] == []
    assert owner_and_mode(target) == (NOBODY.pw_uid, 0o755)


def test_check_mode_reports_and_changes_nothing(tmp_path):
    existing = tmp_path / "kimi"
    existing.mkdir(mode=0o700)
    paths = tree(tmp_path)
    failed, result = run_module(module.main, {"paths": paths, "owner": "nobody"}, check_mode=True)
    assert not failed and result["changed"]
    assert result["fixed"] == [paths[0]] and result["created"] == paths[1:]
    assert owner_and_mode(existing) == (0, 0o700) and not os.path.lexists(paths[1])


@pytest.mark.parametrize("planted", ["symlink", "file"])
def test_a_planted_symlink_or_file_is_refused_and_nothing_after_it_is_made(tmp_path, planted):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    paths = tree(tmp_path)
    if planted == "symlink":
        os.symlink(elsewhere, paths[0])
    else:
        open(paths[0], "w").close()
    failed, result = run_module(module.main, {"paths": paths, "owner": "nobody"})
    assert failed and paths[0] in result["msg"] and ("a symlink" if planted == "symlink" else "a file") in result["msg"]
    assert "remove it" in result["msg"] and result["created"] == []
    # the symlink's target kept its owner and mode, and nothing was made through it
    assert owner_and_mode(elsewhere) == (0, 0o700) and os.listdir(elsewhere) == []
    with pytest.raises(UnsafePathError):
        ensure_dir(paths[0], check=True)


def test_an_unknown_user_a_bad_mode_or_a_relative_path_fails_before_anything_is_made(tmp_path):
    paths = tree(tmp_path)
    for args, cause in [({"owner": "no-such-user-ct200"}, "does not exist"),
                        ({"owner": "nobody", "mode": "0999"}, "not an octal mode"),
                        ({"owner": "nobody", "paths": ["relative/dir"]}, "must be absolute")]:
        failed, result = run_module(module.main, dict({"paths": paths}, **args))
        assert failed and cause in result["msg"], result
    assert not os.path.lexists(paths[0])
