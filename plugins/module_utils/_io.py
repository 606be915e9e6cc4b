# -*- coding: utf-8 -*-
# Copyright: ct200-deploy developers
# SPDX-License-Identifier: Apache-2.0
"""The one place where the collection writes, opens for writing, removes and lists files.

Every writer in the collection goes through here so that all of them behave the
same way on hostile ground (a directory an attacker could plant files in):

* ``atomic_write`` / ``atomic_open``: a temp file with a unique name in the
  target directory, created ``O_CREAT|O_EXCL|O_NOFOLLOW`` with its final mode
  (so it is never readable by anyone it should not be), fsynced, renamed over
  the target, and the directory fsynced; removed on every error.
* ``root=``: when given, every directory between ``root`` and the target is
  walked with ``openat(O_DIRECTORY|O_NOFOLLOW)`` and the final rename happens
  relative to the last directory's fd, so a symlink planted anywhere below
  ``root`` (or swapped in while we work) is refused, never followed.
* ``open_nofollow``: the same walk, for files that are written in place
  (resumable downloads), never following a symlink in the last component.
* ``safe_remove``: unlinks a regular file (or symlink) without following
  anything, under the same walk.
* ``safe_relpath``: refuses relative paths that could leave their root.
* ``listdir_sorted``: a directory's names in a stable order, none when it cannot be listed.
* ``ensure_dir``: a directory with its owner and mode, made with its missing parents, the directory itself
  never a symlink (owner and mode are set through a descriptor opened ``O_NOFOLLOW``).
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat

TMP_SUFFIX = ".ct200tmp"
_CONTROL = {chr(c) for c in range(0x20)} | {"\x7f"}


class UnsafePathError(ValueError):
    """A path that would leave its root or pass through a symlink; message names it and the fix."""


def listdir_sorted(path, ignore=OSError):
    """The names in directory ``path``, sorted; [] when listing it raises ``ignore`` (any OSError by default;
    FileNotFoundError where a directory that is there but cannot be read must stop the caller)."""
    try:
        return sorted(os.listdir(path))
    except ignore:
        return []


def safe_relpath(relpath, what="path"):
    """Return ``relpath`` if it is a plain relative path that stays under its root.

    Refuses (UnsafePathError) empty paths, absolute paths, ``.``/``..``/empty
    components, backslashes and NUL or other control characters.
    """
    if not isinstance(relpath, str) or not relpath:
        raise UnsafePathError("%s %r is empty or not a string" % (what, relpath))
    bad = sorted({c for c in relpath if c in _CONTROL})
    if bad:
        raise UnsafePathError("%s %r contains control characters %s" % (what, relpath, [hex(ord(c)) for c in bad]))
    if relpath.startswith("/") or "\\" in relpath:
        raise UnsafePathError("%s %r is absolute or uses a backslash" % (what, relpath))
    parts = relpath.split("/")
    if any(part in ("", ".", "..") for part in parts):
        raise UnsafePathError("%s %r has an empty, '.' or '..' component" % (what, relpath))
    return relpath


def _split_under(root, path):
    """Components of ``path`` below ``root`` (both absolute after normalisation)."""
    root_abs = os.path.abspath(root)
    path_abs = os.path.abspath(path)
    rel = os.path.relpath(path_abs, root_abs)
    if rel == "." or rel.startswith(".." + os.sep) or rel == ".." or os.path.isabs(rel):
        raise UnsafePathError("%s is not below %s" % (path, root))
    return root_abs, rel.split(os.sep)


def _open_dir_nofollow(name, dir_fd=None):
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    return os.open(name, flags, dir_fd=dir_fd)


def _walk_dirs(root, dir_parts, create=False, dir_mode=0o755):
    """Open ``root``/``dir_parts``... one component at a time, refusing symlinks.

    Returns an fd of the last directory (caller closes). ``create`` makes
    missing directories with ``dir_mode``.
    """
    fd = _open_dir_nofollow(root)
    try:
        for part in dir_parts:
            try:
                next_fd = _open_dir_nofollow(part, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    raise
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, dir_mode, dir_fd=fd)
                next_fd = _open_dir_nofollow(part, dir_fd=fd)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise UnsafePathError(
                        "%s: component %r is a symlink or not a directory; remove it (it was not made by "
                        "ct200.deploy) and run again" % (os.path.join(root, *dir_parts), part)) from None
                raise
            os.close(fd)
            fd = next_fd
        return fd
    except BaseException:
        os.close(fd)
        raise


def parent_fd(path, root=None, create=False, dir_mode=0o755):
    """(fd of the directory holding ``path``, basename). Without ``root`` the
    directory itself is opened O_NOFOLLOW (its own parents are trusted)."""
    if root is None:
        directory, name = os.path.split(os.path.abspath(path))
        if create:
            os.makedirs(directory, dir_mode, exist_ok=True)
        try:
            return _open_dir_nofollow(directory), name
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                raise UnsafePathError("%s is a symlink or not a directory; point the path at a real "
                                      "directory" % directory) from None
            raise
    root_abs, parts = _split_under(root, path)
    return _walk_dirs(root_abs, parts[:-1], create=create, dir_mode=dir_mode), parts[-1]


def _fsync_dir(dir_fd):
    with contextlib.suppress(OSError):
        os.fsync(dir_fd)


@contextlib.contextmanager
def atomic_open(path, mode=0o600, uid=None, gid=None, root=None, create_dirs=False, dir_mode=0o755):
    """Yield a binary file object; on normal exit it atomically replaces ``path``.

    On any exception the temp file is removed and ``path`` is left as it was.
    """
    dir_fd, name = parent_fd(path, root=root, create=create_dirs, dir_mode=dir_mode)
    tmp_name = ".%s.%s%s" % (name[:64], secrets.token_hex(6), TMP_SUFFIX)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(tmp_name, flags, mode, dir_fd=dir_fd)
        try:
            os.fchmod(fd, mode)  # umask must not loosen or tighten the final mode
            if uid is not None or gid is not None:
                os.fchown(fd, -1 if uid is None else uid, -1 if gid is None else gid)
                os.fchmod(fd, mode)  # fchown clears set-id bits
            with os.fdopen(fd, "wb", closefd=True) as handle:
                fd = None
                yield handle
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp_name, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
            tmp_name = None
            _fsync_dir(dir_fd)
        finally:
            if fd is not None:
                os.close(fd)
            if tmp_name is not None:
                with contextlib.suppress(OSError):
                    os.unlink(tmp_name, dir_fd=dir_fd)
    finally:
        os.close(dir_fd)


def atomic_write(path, data, mode=0o600, uid=None, gid=None, root=None, create_dirs=False, dir_mode=0o755):
    """Replace ``path`` with ``data`` (bytes or str, UTF-8) atomically; see module doc."""
    if isinstance(data, str):
        data = data.encode("utf-8")
    with atomic_open(path, mode=mode, uid=uid, gid=gid, root=root, create_dirs=create_dirs,
                     dir_mode=dir_mode) as handle:
        handle.write(data)


def open_nofollow(path, flags, mode=0o600, root=None, create_dirs=False, dir_mode=0o755):
    """os.open ``path`` with O_NOFOLLOW (and the walk under ``root``); returns an fd.

    A symlink in the last component raises UnsafePathError instead of being followed;
    a file that exists but is not regular (fifo, device, directory) is refused too.
    """
    dir_fd, name = parent_fd(path, root=root, create=create_dirs, dir_mode=dir_mode)
    try:
        try:
            fd = os.open(name, flags | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, mode, dir_fd=dir_fd)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise UnsafePathError("%s is a symlink; ct200.deploy never follows a symlink it did not "
                                      "create: remove it and run again" % path) from None
            raise
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            os.close(fd)
            raise UnsafePathError("%s is not a regular file; remove it and run again" % path)
        os.set_blocking(fd, True)
        return fd
    finally:
        os.close(dir_fd)


def safe_remove(path, root=None):
    """Unlink ``path`` if it exists, never following a symlink; True if something was removed.

    A directory is refused (UnsafePathError): callers remove files, not trees.
    """
    try:
        dir_fd, name = parent_fd(path, root=root)
    except FileNotFoundError:
        return False
    try:
        try:
            st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            return False
        if stat.S_ISDIR(st.st_mode):
            raise UnsafePathError("%s is a directory; ct200.deploy only removes files it wrote" % path)
        os.unlink(name, dir_fd=dir_fd)
        _fsync_dir(dir_fd)
        return True
    finally:
        os.close(dir_fd)


def remove_stale_temps(directory, root=None):
    """Remove this module's leftover temp files (``*.ct200tmp``) in ``directory``; returns their names."""
    removed = []
    try:
        dir_fd = parent_fd(os.path.join(directory, "x"), root=root)[0] if root else _open_dir_nofollow(directory)
    except FileNotFoundError:
        return removed
    try:
        for entry in os.listdir(dir_fd):
            if entry.startswith(".") and entry.endswith(TMP_SUFFIX):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(entry, dir_fd=dir_fd)
                    removed.append(entry)
    finally:
        os.close(dir_fd)
    return removed


def _dir_differs(st, uid, gid, mode):
    """Whether a directory's stat differs from the wanted owner (-1: any) or mode."""
    return ((uid != -1 and st.st_uid != uid) or (gid != -1 and st.st_gid != gid)
            or stat.S_IMODE(st.st_mode) != mode)


def ensure_dir(path, uid=-1, gid=-1, mode=0o755, check=False):
    """Make PATH a directory owned by UID:GID (-1: leave) with MODE: ``"created"``, ``"fixed"`` (owner or mode
    set) or ``"ok"``. Missing parents are made with the same owner and mode (as ``ansible.builtin.file`` does);
    existing parents are trusted, as an administrator may mount or link a disk there. PATH itself must not be a
    symlink or another kind of file: ``UnsafePathError`` names it. CHECK: report, change nothing."""
    path = os.path.abspath(path)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        if not check:
            parent = os.path.dirname(path)
            if parent != path and not os.path.lexists(parent):
                ensure_dir(parent, uid, gid, mode)
            with contextlib.suppress(FileExistsError):
                os.mkdir(path, mode)
            _set_dir_attrs(path, uid, gid, mode)
        return "created"
    if not stat.S_ISDIR(st.st_mode):
        raise UnsafePathError("%s is %s, not a directory; remove it (it was not made by ct200.deploy) and run "
                              "again" % (path, "a symlink" if stat.S_ISLNK(st.st_mode) else "a file"))
    if not _dir_differs(st, uid, gid, mode):
        return "ok"
    if not check:
        _set_dir_attrs(path, uid, gid, mode)
    return "fixed"


def _set_dir_attrs(path, uid, gid, mode):
    try:
        fd = _open_dir_nofollow(path)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise UnsafePathError("%s became a symlink or a file while it was made; remove it and run again"
                                  % path) from None
        raise
    try:
        os.fchown(fd, uid, gid)
        os.fchmod(fd, mode)  # after the owner: chown clears set-id bits
    finally:
        os.close(fd)
