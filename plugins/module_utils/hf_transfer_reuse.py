# -*- coding: utf-8 -*-
# Copyright: ct200-deploy developers
# SPDX-License-Identifier: Apache-2.0
"""Reuse of verified files from kept snapshots: an unchanged oid is hard-linked, never downloaded again.

PRIVATE to the ct200.deploy collection.  Standard library only.

A repository's root holds one directory per commit, ``<root>/snapshots/<commit40>/`` (hf_manifest.snapshot_dir).
When a new commit is staged, every file whose oid is unchanged versus a kept snapshot is hard-linked from it into
the new snapshot and recorded as verified without a byte moving (from the Hub or from peers).  The integrity rule
stays the one of the manifest: a file is accepted only as bytes hashed against its oid after their last change.

* a source is a sibling snapshot (automatic, when ``local_dir`` is ``.../snapshots/<commit>``) or a directory named
  in ``reuse_dirs``; its own ``.ct200/manifest.json`` must vouch for the file: same repository, same oid and size,
  an entry whose bytes were hashed (``hashed``: not what verify=size or sample-unsafe accepted), and the file's
  stat (inode, size, mtime, ctime) still the recorded one, checked at planning time and again, under the source's
  lock, right before the link;
* the link is made to a temp name under the new snapshot's ``.ct200/tmp`` with directory descriptors walked without
  following any symlink (``link(2)`` never follows the source's last component either), checked to be the same
  inode, then renamed into place;
* a link changes the inode's ctime (and the rename too), not its bytes: the new ctime is recorded in the new
  snapshot's manifest and in every kept manifest (same filesystem) that vouched for that inode at the old ctime;
* a source that is busy (another download holds its lock), unreadable or changed is not used: the file is fetched.
"""

from __future__ import annotations

import errno
import os
import stat

from ansible_collections.ct200.deploy.plugins.module_utils import hf_manifest
from ansible_collections.ct200.deploy.plugins.module_utils._io import UnsafePathError, parent_fd, safe_remove


class Source(object):
    """One kept directory and its manifest (loaded without following a symlink)."""

    def __init__(self, path, manifest, device):
        self.path = path
        self.manifest = manifest
        self.device = device
        self.lock = None


def _device(path):
    try:
        return os.stat(path, follow_symlinks=False).st_dev
    except OSError:
        return None


def candidate_dirs(local_dir, reuse_dirs=None, siblings=True):
    """Sibling snapshots (when ``local_dir`` is one) and ``reuse_dirs`` (absolute, real directories), once each."""
    own = os.path.abspath(local_dir)
    out = []
    for path in (hf_manifest.sibling_snapshots(own) if siblings else []) + [os.path.abspath(p) for p in reuse_dirs or []]:
        if path == own or path in out:
            continue
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if stat.S_ISDIR(st.st_mode):  # a symlink is never followed (lstat)
            out.append(path)
    return out


def load_sources(local_dir, repo_id, repo_type, reuse_dirs=None, siblings=True, warnings=None):
    """Sources whose manifest is of the same repository (a link to another filesystem fails with EXDEV and the
    file is fetched instead)."""
    sources = []
    for path in candidate_dirs(local_dir, reuse_dirs, siblings):
        manifest = hf_manifest.Manifest.load(path)
        if manifest.warning:
            if warnings is not None:
                warnings.append("not reusing files of %s: %s" % (path, manifest.warning))
            continue
        if manifest.data.get("repo_id") != repo_id or (manifest.data.get("repo_type") or "model") != repo_type:
            continue
        sources.append(Source(path, manifest, _device(path)))
    return sources


def usable_entry(entry, oid, size):
    """The manifest entry vouches for bytes of ``oid``/``size`` that were hashed after their last change."""
    return (isinstance(entry, dict) and entry.get("oid") == oid and entry.get("size") == size
            and entry.get("hashed") is True and isinstance(entry.get("sha256"), str)
            and all(isinstance(entry.get(k), int) for k in ("ino", "mtime_ns", "ctime_ns")))


def find(sources, oid, size):
    """(source, path, entry, stat) of a kept file with ``oid``/``size`` whose stat still matches its entry; or None."""
    for source in sources:
        for path, entry in sorted(source.manifest.files.items()):
            if not usable_entry(entry, oid, size):
                continue
            try:
                st = hf_manifest.lstat_under(source.path, path)
            except (OSError, UnsafePathError):
                continue
            if st is not None and stat.S_ISREG(st.st_mode) and st.st_size == size and hf_manifest.same_identity(entry, st):
                return source, path, entry, st
    return None


def plan_reuse(files, sources):
    """Mark each file to fetch that a source holds unchanged: ``action`` "link", ``link_from`` (source, path, entry)."""
    for pf in files:
        if pf.action != "fetch":
            continue
        found = find(sources, pf.oid, pf.size)
        if found is None:
            continue
        source, path, entry, _st = found
        pf.action = "link"
        pf.reason = "unchanged oid, hard-linked from %s" % os.path.join(source.path, path)
        pf.link_from = (source, path, entry)
        pf.partial = 0


def _link_one(local_dir, pf, tmp_name):
    """Hard-link the planned source file to ``tmp_name`` under local_dir/.ct200/tmp and rename it over the
    destination.  Returns (stat before the link, stat of the result), or None when the source changed."""
    source, path, entry = pf.link_from
    st = hf_manifest.lstat_under(source.path, path)  # right before linking: still the bytes that were hashed
    if st is None or not stat.S_ISREG(st.st_mode) or st.st_size != pf.size or not hf_manifest.same_identity(entry, st):
        return None
    tmp_path = os.path.join(hf_manifest.state_dir(local_dir), "tmp", tmp_name)
    safe_remove(tmp_path, root=local_dir)
    src_fd, src_name = parent_fd(os.path.join(source.path, path), root=source.path)
    try:
        tmp_fd, tmp_base = parent_fd(tmp_path, root=local_dir, create=True)
        try:
            os.link(src_name, tmp_base, src_dir_fd=src_fd, dst_dir_fd=tmp_fd, follow_symlinks=False)
            linked = os.stat(tmp_base, dir_fd=tmp_fd, follow_symlinks=False)
            if linked.st_ino != st.st_ino or linked.st_dev != st.st_dev or linked.st_mtime_ns != entry["mtime_ns"]:
                os.unlink(tmp_base, dir_fd=tmp_fd)  # replaced between the check and the link
                return None
            dst_fd, dst_name = parent_fd(os.path.join(local_dir, pf.path), root=local_dir, create=True)
            try:
                os.replace(tmp_base, dst_name, src_dir_fd=tmp_fd, dst_dir_fd=dst_fd)
                return st, os.stat(dst_name, dir_fd=dst_fd, follow_symlinks=False)
            finally:
                os.close(dst_fd)
        finally:
            os.close(tmp_fd)
    finally:
        os.close(src_fd)


def link_planned(local_dir, plan, manifest, commit, lock_factory, warnings):
    """Link every file planned "link" (under each source's lock); a file that cannot be linked goes back to
    "fetch".  Returns the number of bytes linked.  ``lock_factory(dir)`` takes a directory's download lock
    without waiting (raises when another run holds it)."""
    todo = [pf for pf in plan.files if pf.action == "link"]
    if not todo:
        return 0
    # every kept directory of the plan is locked and updated, not only the link sources: they may share an inode
    sources = list(getattr(plan, "reuse_sources", None) or [])
    for pf in todo:
        if pf.link_from[0] not in sources:
            sources.append(pf.link_from[0])
    try:
        _lock_sources(sources, lock_factory, warnings)
        own_device = _device(local_dir)
        linked = 0
        for index, pf in enumerate(todo):
            linked += _link_planned_file(local_dir, pf, index, sources, own_device, manifest, commit, warnings)
        for source in sources:
            if source.manifest is not None and source.manifest.dirty:
                source.manifest.save()
        return linked
    finally:
        for source in sources:
            if source.lock is not None:
                source.lock.release()
                source.lock = None


def _lock_sources(sources, lock_factory, warnings):
    """Each source's lock and its manifest as it is now, under that lock; a busy or unreadable one is left out."""
    for source in sources:
        try:
            source.lock = lock_factory(source.path)
            fresh = hf_manifest.Manifest.load(source.path)  # as it is now, under its lock
            source.manifest = fresh if not fresh.warning else None
        except Exception as exc:  # pylint: disable=broad-except  # busy or unreadable: its files are fetched
            source.lock, source.manifest = None, None
            warnings.append("not reusing files of %s (%s): they are fetched" % (source.path, exc))


def _link_planned_file(local_dir, pf, index, sources, own_device, manifest, commit, warnings):
    """Hard-link one planned file if its source still vouches for it (bytes linked), else plan it "fetch" (0)."""
    source, path, entry = pf.link_from
    now = source.manifest.entry(path) if source.manifest is not None else None
    outcome = None
    if now == entry:
        try:
            outcome = _link_one(local_dir, pf, "link-%d.ct200link" % index)
        except (OSError, UnsafePathError) as exc:
            if not isinstance(exc, OSError) or exc.errno not in (errno.EXDEV, errno.EMLINK, errno.EPERM,
                                                                 errno.ENOENT, errno.EACCES):
                raise
            warnings.append("could not hard-link %s from %s (%s): fetched instead" % (pf.path, source.path, exc))
    if outcome is None:
        pf.action, pf.reason, pf.link_from = "fetch", "missing (its kept copy changed or is busy)", None
        return 0
    before, after = outcome
    manifest.record(pf.path, after, entry["sha256"], pf.oid, commit, entry.get("sample"), hashed=True)
    for other in sources:
        if other.manifest is not None and other.device == own_device:
            other.manifest.refresh_ctime(before.st_ino, before.st_mtime_ns, entry["ctime_ns"], after.st_ctime_ns)
    pf.reason = "hard-linked from %s (unchanged oid)" % source.path
    return pf.size
