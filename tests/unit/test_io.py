# SPDX-License-Identifier: Apache-2.0
"""plugins/module_utils/_io.py: the one atomic writer and safe remove, on hostile ground."""

import os
import stat

import pytest

from ansible_collections.ct200.deploy.plugins.module_utils import _io


def test_atomic_write_born_with_final_mode_and_no_temp_left(tmp_path):
    target = tmp_path / "token"
    old_umask = os.umask(0)
    try:
        _io.atomic_write(str(target), b"secret", mode=0o600)
    finally:
        os.umask(old_umask)
    assert target.read_bytes() == b"secret"
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    assert os.listdir(tmp_path) == ["token"]


def test_atomic_open_error_keeps_previous_content_and_cleans_temp(tmp_path):
    target = tmp_path / "f"
    target.write_bytes(b"old")
    with pytest.raises(RuntimeError):
        with _io.atomic_open(str(target), mode=0o644) as handle:
            handle.write(b"partial")
            raise RuntimeError("disk full")
    assert target.read_bytes() == b"old"
    assert os.listdir(tmp_path) == ["f"]


def test_atomic_write_replaces_symlink_never_writes_through_it(tmp_path):
    victim = tmp_path / "victim"
    victim.write_bytes(b"keep")
    link = tmp_path / "d" / "f"
    link.parent.mkdir()
    link.symlink_to(victim)
    _io.atomic_write(str(link), b"new", mode=0o600, root=str(tmp_path))
    assert victim.read_bytes() == b"keep"
    assert not link.is_symlink() and link.read_bytes() == b"new"


def test_root_walk_refuses_symlinked_parent(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    root = tmp_path / "root"
    root.mkdir()
    (root / "sub").symlink_to(outside)
    with pytest.raises(_io.UnsafePathError, match="symlink"):
        _io.atomic_write(str(root / "sub" / "f"), b"x", root=str(root))
    with pytest.raises(_io.UnsafePathError):
        _io.open_nofollow(str(root / "sub" / "f"), os.O_WRONLY | os.O_CREAT, root=str(root))
    with pytest.raises(_io.UnsafePathError):
        _io.safe_remove(str(root / "sub" / "f"), root=str(root))
    assert os.listdir(outside) == []


def test_open_nofollow_refuses_symlink_and_fifo(tmp_path):
    victim = tmp_path / "victim"
    victim.write_bytes(b"keep")
    (tmp_path / "x.part").symlink_to(victim)
    with pytest.raises(_io.UnsafePathError, match="symlink"):
        _io.open_nofollow(str(tmp_path / "x.part"), os.O_WRONLY | os.O_CREAT)
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(_io.UnsafePathError, match="regular"):
        _io.open_nofollow(str(tmp_path / "fifo"), os.O_RDONLY)
    assert victim.read_bytes() == b"keep"


def test_path_outside_root_refused(tmp_path):
    with pytest.raises(_io.UnsafePathError):
        _io.atomic_write(str(tmp_path / ".." / "x"), b"x", root=str(tmp_path))


def test_safe_remove_unlinks_link_not_target(tmp_path):
    victim = tmp_path / "victim"
    victim.write_bytes(b"keep")
    (tmp_path / "l").symlink_to(victim)
    assert _io.safe_remove(str(tmp_path / "l")) is True
    assert victim.read_bytes() == b"keep"
    assert _io.safe_remove(str(tmp_path / "l")) is False
    (tmp_path / "dir").mkdir()
    with pytest.raises(_io.UnsafePathError):
        _io.safe_remove(str(tmp_path / "dir"))


@pytest.mark.parametrize("bad", ["", "/etc/passwd", "../x", "a/../../b", "a//b", "./a", "a/.", "a\x00b",
                                 "a\nb", "a\\b"])
def test_safe_relpath_refuses(bad):
    with pytest.raises(_io.UnsafePathError):
        _io.safe_relpath(bad)


def test_safe_relpath_accepts_nested():
    assert _io.safe_relpath("a/b.c/model-00001.safetensors") == "a/b.c/model-00001.safetensors"


def test_remove_stale_temps(tmp_path):
    (tmp_path / ".f.abc.ct200tmp").write_bytes(b"")
    (tmp_path / "keep").write_bytes(b"")
    assert _io.remove_stale_temps(str(tmp_path)) == [".f.abc.ct200tmp"]
    assert os.listdir(tmp_path) == ["keep"]


def test_listdir_sorted_skips_what_it_is_told_to(tmp_path):
    for name in ("b", "a", "c"):
        (tmp_path / name).write_text("")
    assert _io.listdir_sorted(str(tmp_path)) == ["a", "b", "c"]
    assert _io.listdir_sorted(str(tmp_path / "missing")) == []
    assert _io.listdir_sorted(str(tmp_path / "missing"), FileNotFoundError) == []
    with pytest.raises(NotADirectoryError):  # only a missing directory is skipped when the caller says so
        _io.listdir_sorted(str(tmp_path / "a"), FileNotFoundError)
    assert _io.listdir_sorted(str(tmp_path / "a")) == []
