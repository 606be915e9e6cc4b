# -*- coding: utf-8 -*-
# Copyright: ct200-deploy developers
# SPDX-License-Identifier: Apache-2.0
"""hf_download's local disk: space before any byte moves, temp files, kept snapshots, and the
one error for a failing local write.  Also used by the site fan-out (fanout.py, through hf_transfer).

PRIVATE to the ct200.deploy collection.
"""

from __future__ import annotations

import errno
import os
import stat

from ansible_collections.ct200.deploy.plugins.module_utils import disk_preflight, hf_manifest
from ansible_collections.ct200.deploy.plugins.module_utils._io import UnsafePathError, parent_fd, remove_stale_temps
from ansible_collections.ct200.deploy.plugins.module_utils.hf_errors import DownloadError
from ansible_collections.ct200.deploy.plugins.module_utils.hf_transfer_lock import DirLock


# errno values an OSError of the engine's own writes (pwrite, open, rename under local_dir) carries: the
# local disk, not the network (network errors reach the engine as TransferError, never as a bare OSError)
LOCAL_WRITE_ERRNOS = frozenset([errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO, errno.EROFS, errno.EACCES,
                                errno.EPERM, errno.ENAMETOOLONG, errno.ENOTDIR, errno.EISDIR, errno.EMFILE,
                                errno.ENFILE, errno.EEXIST, errno.ENOENT])
_LOCAL_CAUSES = {
    errno.EFBIG: ("the file is larger than this filesystem or the process's file size limit (ulimit -f) allows",
                  "raise the file size limit of the user running the task (ulimit -f, LimitFSIZE=) or pick a local_dir "
                  "on a filesystem that holds files this large, then re-run the task"),
    errno.EIO: ("the disk reported an I/O error",
                "check the disk's health (dmesg, smartctl) before re-running; verified files are kept"),
    errno.EROFS: ("the filesystem is mounted read-only",
                  "remount it read-write (or pick a writable local_dir), then re-run the task"),
}


def is_local_write_error(cause):
    """An OSError from this host's disk (full, read-only, too large, failing, permissions), not the network."""
    return isinstance(cause, OSError) and cause.errno in LOCAL_WRITE_ERRNOS


def local_error(opts, exc, path=None, details=None):
    """One DownloadError for an OSError on the local disk (disk full, read-only, file too large, I/O error
    named as such)."""
    where = " while writing %s" % path if path else ""
    if exc.errno in _LOCAL_CAUSES:
        what, fix = _LOCAL_CAUSES[exc.errno]
        return DownloadError("download of %s into %s stopped%s: %s (%s); verified files are kept, partial files "
                             "resume" % (opts.repo_id, opts.local_dir, where, what, errno.errorcode[exc.errno]),
                             code="local_error", fix=fix, details=details)
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        what = "disk quota exceeded" if exc.errno == errno.EDQUOT else "the filesystem is full"
        try:
            fs = disk_preflight.fs_info(opts.local_dir)
            fs_text = " (%s on %s, %s free now)" % (fs.fstype, fs.mountpoint, disk_preflight.format_bytes(fs.free_bytes))
        except Exception:  # the description is a courtesy; the cause is known
            fs_text = ""
        return DownloadError(
            "download of %s into %s stopped%s: %s%s; verified files are kept, partial files resume"
            % (opts.repo_id, opts.local_dir, where, what, fs_text),
            code="disk_full",
            fix="something else filled the filesystem after the disk preflight: free space there (or pick a "
                "larger local_dir) and re-run the task",
            details=details,
        )
    return DownloadError(
        "download of %s into %s stopped%s: %s" % (opts.repo_id, opts.local_dir, where, exc),
        code="local_error",
        fix="check permissions and health of the filesystem holding %s, then re-run the task" % opts.local_dir,
        details=details,
    )


def clean_temp(opts, keep_keys):
    """Remove temp files no current plan can use: our stale partials and state files, the
    atomic writer's leftovers, and huggingface_hub's orphaned ``*.incomplete`` files in
    ``local_dir/.cache/huggingface``.  Every directory is opened without following symlinks."""
    from ansible_collections.ct200.deploy.plugins.module_utils.hf_transfer_engine import TMP_DIR, state_key

    removed = []
    root = opts.local_dir
    tmp_rel = os.path.join(hf_manifest.STATE_DIR, TMP_DIR)
    for name in _listdir_under(root, tmp_rel):
        if state_key(name) not in keep_keys:
            _remove_entry(root, tmp_rel, name, removed)
    for name in remove_stale_temps(hf_manifest.state_dir(root), root=root) if os.path.isdir(
            hf_manifest.state_dir(root)) else []:
        removed.append(os.path.join(hf_manifest.STATE_DIR, name))
    for name in _listdir_under(root, hf_manifest.STATE_DIR):
        if name.startswith(".manifest.") and name.endswith(".tmp"):  # written by earlier versions
            _remove_entry(root, hf_manifest.STATE_DIR, name, removed)
    hf_rel = os.path.join(".cache", "huggingface", "download")
    try:
        dir_fd = parent_fd(os.path.join(root, hf_rel, "x"), root=root)[0]
    except (OSError, UnsafePathError):
        return removed
    try:
        for dirpath, _dirs, names, dfd in os.fwalk(".", dir_fd=dir_fd, follow_symlinks=False):
            for name in names:
                if name.endswith(".incomplete"):
                    try:
                        if stat.S_ISREG(os.stat(name, dir_fd=dfd, follow_symlinks=False).st_mode):
                            os.unlink(name, dir_fd=dfd)
                            removed.append(os.path.normpath(os.path.join(hf_rel, dirpath, name)))
                    except FileNotFoundError:
                        pass
    finally:
        os.close(dir_fd)
    return removed


def _listdir_under(root, rel):
    try:
        dir_fd = parent_fd(os.path.join(root, rel, "x"), root=root)[0]
    except (FileNotFoundError, NotADirectoryError):
        return []
    try:
        return sorted(os.listdir(dir_fd))
    finally:
        os.close(dir_fd)


def _remove_entry(root, rel, name, removed):
    """Unlink a file (or symlink: the link, never its target) or remove a directory tree, fd-relative."""
    import shutil

    dir_fd = parent_fd(os.path.join(root, rel, "x"), root=root)[0]
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        if stat.S_ISDIR(st.st_mode):
            shutil.rmtree(name, dir_fd=dir_fd)  # fd-based, symlink-attack resistant on Linux
        else:
            os.unlink(name, dir_fd=dir_fd)
        removed.append(os.path.join(rel, name))
    except FileNotFoundError:
        pass
    finally:
        os.close(dir_fd)


def is_snapshot(local_dir):
    return hf_manifest.snapshot_commit(local_dir) is not None


def link_reused(opts, plan, manifest, commit, warnings):
    """Hard-link the files planned "link" from kept snapshots (hf_transfer_reuse); bytes linked."""
    if not plan.to_link:
        return 0
    from ansible_collections.ct200.deploy.plugins.module_utils import hf_transfer_reuse as reuse

    return reuse.link_planned(opts.local_dir, plan, manifest, commit, lambda path: DirLock(path, 0).acquire(), warnings)


def mark_complete(opts, manifest, commit, warnings):
    """A snapshot whose every selected file is verified is marked complete (its commit) in its manifest."""
    if not is_snapshot(opts.local_dir):
        return
    manifest.mark_complete(commit)
    if manifest.dirty:
        try:
            manifest.save(fsync=opts.fsync)
        except OSError as exc:
            warnings.append("could not mark %s complete: %s" % (opts.local_dir, exc))


def disk_check(opts, plan, commit):
    """Free space for what ``plan`` still has to write (partial files counted), before any byte moves:
    the filesystem's ``as_dict()``, or DownloadError ``disk_full``.  Also used by the site fan-out."""
    reused = plan.bytes_to_link
    try:
        checks = disk_preflight.check_requirements(
            [("%s@%s" % (opts.repo_id, commit[:12]), opts.local_dir, plan.disk_needed, reused)], opts.min_free_bytes
        )
    except disk_preflight.DiskSpaceError as exc:
        raise DownloadError(
            "not enough disk space to stage %s@%s beside the kept snapshots: %s" % (opts.repo_id, commit[:12], exc),
            code="disk_full",
            fix="free space on that filesystem, pick a larger local_dir, or lower min_free_bytes",
            details={"disk": [c.as_dict() for c in exc.checks], "bytes_to_download": plan.bytes_to_fetch,
                     "bytes_reused": reused},
        )
    return checks[0].as_dict()
