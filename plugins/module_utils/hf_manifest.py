# -*- coding: utf-8 -*-
# Copyright: ct200-deploy developers
# SPDX-License-Identifier: Apache-2.0
"""Download manifest kept in ``<local_dir>/.ct200/manifest.json``.

PRIVATE to the ct200.deploy collection.

The manifest makes a re-run O(files) ``stat`` calls instead of a re-hash:

* ``files``: one entry per verified file -- ``size``, ``mtime_ns``, ``ctime_ns``
  and ``ino`` (the stat identity it was verified with: any difference means the
  file is hashed again in full, like git and rsync re-read a file whose stat
  changed; ctime cannot be set back with ``utime``), ``sha256`` (of the content,
  computed locally), ``oid`` (what the Hub lists: the LFS sha256, or the git blob
  sha1 of a small file), ``commit`` (the commit it was verified against) and
  ``sample`` (a digest of 16 fixed 64 KiB blocks, used only by the explicit
  opt-in ``verify: sample-unsafe``).
* ``tree``: the selected-independent tree listing of the last resolved commit
  (path -> size, oid, lfs sha256), so a commit-pinned re-run needs no network.
* ``refs``: last resolution of branch/tag names to commits (informational and
  for offline re-runs).

Version 2 added ``ctime_ns`` and ``ino``; a version 1 manifest is read, and its
entries (no ctime/inode) count as changed, so each file is hashed once more.

Every read and write goes through :mod:`_io` with ``root=local_dir``: a symlink
planted anywhere under ``local_dir`` is refused, never followed.

Only the standard library is used: this module is imported on the no-op path.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import stat

from ansible_collections.ct200.deploy.plugins.module_utils._io import (
    UnsafePathError,
    atomic_write,
    open_nofollow,
    parent_fd,
)

MANIFEST_VERSION = 2
READABLE_VERSIONS = (1, 2)
STATE_DIR = ".ct200"
MANIFEST_NAME = "manifest.json"

SAMPLE_BLOCK = 64 * 1024
SAMPLE_BLOCKS = 16

# stat-check outcomes
OK = "ok"
MISSING = "missing"
SIZE = "size"  # size differs: truncated, grown or replaced
TOUCHED = "touched"  # same size, different mtime/ctime/inode: content unknown
NOT_REGULAR = "not_regular"  # a symlink, directory, fifo... where a file belongs
UNKNOWN = "unknown"  # no manifest entry (or entry for other content)


def state_dir(local_dir):
    return os.path.join(local_dir, STATE_DIR)


def manifest_path(local_dir):
    return os.path.join(local_dir, STATE_DIR, MANIFEST_NAME)


class ManifestError(Exception):
    pass


def _empty():
    return {"version": MANIFEST_VERSION, "repo_id": None, "repo_type": None, "refs": {}, "tree": None, "files": {}}


class Manifest(object):
    """In-memory manifest; :meth:`save` writes it atomically."""

    def __init__(self, local_dir, data=None, warning=None):
        self.local_dir = local_dir
        self.data = data if data is not None else _empty()
        self.warning = warning
        self.dirty = False

    # ----------------------------------------------------------------- I/O
    @classmethod
    def load(cls, local_dir):
        """Load the manifest; a missing file gives an empty one, a damaged file an empty one plus a warning."""
        path = manifest_path(local_dir)
        try:
            fd = open_nofollow(path, os.O_RDONLY, root=local_dir)
        except (FileNotFoundError, NotADirectoryError):
            return cls(local_dir)
        except UnsafePathError as exc:
            return cls(local_dir, warning="ignoring the manifest: %s; present files will be re-verified by hashing" % exc)
        with os.fdopen(fd, "rb") as handle:
            raw = handle.read()
        try:
            data = json.loads(raw.decode("utf-8"))
            if not isinstance(data, dict) or data.get("version") not in READABLE_VERSIONS:
                raise ValueError("unsupported manifest version %r" % (data.get("version") if isinstance(data, dict) else None))
            if not isinstance(data.get("files"), dict):
                raise ValueError("'files' is not a mapping")
        except (ValueError, UnicodeDecodeError) as exc:
            return cls(
                local_dir,
                warning="ignoring unreadable manifest %s (%s); present files will be re-verified by hashing" % (path, exc),
            )
        data.setdefault("refs", {})
        data.setdefault("tree", None)
        data["version"] = MANIFEST_VERSION
        return cls(local_dir, data)

    def save(self, fsync=False):
        """Write atomically through _io (unique temp name, O_EXCL|O_NOFOLLOW, rename under local_dir).

        ``fsync`` is accepted for the callers' sake; _io always fsyncs this small file, which
        also forces the journal to flush data written before it (ext4 data=ordered): callers
        that must not pay that on every save pass a longer save interval instead.
        """
        data = json.dumps(self.data, sort_keys=True, separators=(",", ":"))
        atomic_write(manifest_path(self.local_dir), data, mode=0o644, root=self.local_dir, create_dirs=True)
        self.dirty = False

    # ------------------------------------------------------------- identity
    def bind_repo(self, repo_id, repo_type):
        """Entries of another repository are dropped (a local_dir holds one repo)."""
        data = self.data
        if data.get("repo_id") not in (None, repo_id) or data.get("repo_type") not in (None, repo_type):
            self.data = _empty()
            data = self.data
            self.dirty = True
        if data.get("repo_id") != repo_id or data.get("repo_type") != repo_type:
            data["repo_id"] = repo_id
            data["repo_type"] = repo_type
            self.dirty = True

    # ------------------------------------------------------------------ tree
    @property
    def tree(self):
        return self.data.get("tree")

    def set_tree(self, commit, files):
        """``files``: dict path -> {"size": int, "oid": str, "sha256": str|None}."""
        tree = {"commit": commit, "files": files}
        if self.data.get("tree") != tree:
            self.data["tree"] = tree
            self.dirty = True

    def tree_for(self, commit):
        tree = self.data.get("tree")
        if tree and tree.get("commit") == commit and isinstance(tree.get("files"), dict):
            return tree["files"]
        return None

    def set_ref(self, revision, commit):
        if revision != commit and self.data["refs"].get(revision) != commit:
            self.data["refs"][revision] = commit
            self.dirty = True

    # ----------------------------------------------------------------- files
    @property
    def files(self):
        return self.data["files"]

    def entry(self, path):
        return self.data["files"].get(path)

    def record(self, path, st, sha256, oid, commit, sample, hashed=True):
        """Vouch for ``path`` as it was when ``st`` (its stat result) was taken.

        ``hashed``: its bytes were hashed against ``oid`` after their last change (a download, a full
        re-hash, or a hard link of such bytes); False for what verify=size or sample-unsafe accepted
        without reading every byte.  Only hashed entries are reused by another snapshot."""
        self.data["files"][path] = {
            "size": st.st_size,
            "mtime_ns": st.st_mtime_ns,
            "ctime_ns": st.st_ctime_ns,
            "ino": st.st_ino,
            "sha256": sha256,
            "oid": oid,
            "commit": commit,
            "sample": sample,
            "hashed": bool(hashed),
        }
        self.dirty = True

    # ------------------------------------------------------------- snapshot
    @property
    def complete(self):
        """The commit this directory was completed for (snapshot layout), or None."""
        return self.data.get("complete")

    def mark_complete(self, commit):
        if self.data.get("complete") != commit:
            self.data["complete"] = commit
            self.dirty = True

    def refresh_ctime(self, ino, mtime_ns, old_ctime_ns, new_ctime_ns):
        """Entries of the inode ``ino`` that vouched for it at ``old_ctime_ns`` now vouch for it at
        ``new_ctime_ns``: a hard link made or removed by ct200 itself changed the inode's ctime, not its
        bytes (the mtime and the inode are compared too).  Returns how many entries changed."""
        changed = 0
        for entry in self.data["files"].values():
            if (entry.get("ino") == ino and entry.get("mtime_ns") == mtime_ns
                    and entry.get("ctime_ns") == old_ctime_ns and old_ctime_ns != new_ctime_ns):
                entry["ctime_ns"] = new_ctime_ns
                changed += 1
        if changed:
            self.dirty = True
        return changed

    def forget(self, path):
        if self.data["files"].pop(path, None) is not None:
            self.dirty = True

    def stat_check(self, path, oid, size):
        """Compare the file on disk with its entry using one ``stat`` (never following a symlink).

        Returns (outcome, stat_result_or_None).  ``oid``/``size`` are what the
        tree lists now; an entry verified for other content is UNKNOWN.  A symlink
        in a parent directory raises UnsafePathError.
        """
        st = lstat_under(self.local_dir, path)
        if st is None:
            return MISSING, None
        if not stat.S_ISREG(st.st_mode):
            return NOT_REGULAR, st
        entry = self.data["files"].get(path)
        if st.st_size != size:
            return SIZE, st
        if not entry or entry.get("oid") != oid or entry.get("size") != size:
            return UNKNOWN, st
        if not same_identity(entry, st):
            return TOUCHED, st
        return OK, st


SNAPSHOTS_DIR = "snapshots"
_COMMIT_CHARS = frozenset("0123456789abcdef")


def is_commit_name(name):
    return isinstance(name, str) and len(name) == 40 and set(name) <= _COMMIT_CHARS


def snapshot_dir(root, commit):
    """``<root>/snapshots/<commit>``: one commit's complete directory (the storage layout of SHARED-DESIGN)."""
    return os.path.join(root, SNAPSHOTS_DIR, commit)


def snapshot_commit(local_dir):
    """The commit ``local_dir`` is the snapshot of (``.../snapshots/<commit40>``), or None for any other dir."""
    local_dir = os.path.abspath(local_dir)
    name = os.path.basename(local_dir)
    if is_commit_name(name) and os.path.basename(os.path.dirname(local_dir)) == SNAPSHOTS_DIR:
        return name
    return None


def sibling_snapshots(local_dir):
    """The other snapshot directories beside ``local_dir`` (real directories, never a symlink), sorted."""
    if snapshot_commit(local_dir) is None:
        return []
    parent = os.path.dirname(os.path.abspath(local_dir))
    own = os.path.basename(os.path.abspath(local_dir))
    try:
        fd = os.open(parent, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:
        return []
    try:
        out = []
        for name in sorted(os.listdir(fd)):
            if name == own or not is_commit_name(name):
                continue
            try:
                st = os.stat(name, dir_fd=fd, follow_symlinks=False)
            except OSError:
                continue
            if stat.S_ISDIR(st.st_mode):
                out.append(os.path.join(parent, name))
        return out
    finally:
        os.close(fd)


def same_identity(entry, st):
    """The file is the one (inode) the entry vouches for, unmodified since (mtime and ctime)."""
    return (entry.get("mtime_ns") == st.st_mtime_ns and entry.get("ctime_ns") == st.st_ctime_ns
            and entry.get("ino") == st.st_ino)


def lstat_under(local_dir, relpath):
    """lstat of ``local_dir/relpath`` walking the parents with O_NOFOLLOW; None if it does not exist."""
    try:
        dir_fd, name = parent_fd(os.path.join(local_dir, relpath), root=local_dir)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UnsafePathError("%s: the local directory is a symlink" % local_dir) from None
        raise
    try:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except (FileNotFoundError, NotADirectoryError):
        return None
    finally:
        os.close(dir_fd)


def sample_offsets(size, block=SAMPLE_BLOCK, count=SAMPLE_BLOCKS):
    """Deterministic block offsets: first, last and evenly spread blocks in between."""
    if size <= block * count:
        return [0] if size else []
    last = size - block
    step = last / (count - 1)
    return sorted(set(int(i * step) for i in range(count - 1)) | {last})


def sample_digest(fd, size, block=SAMPLE_BLOCK, count=SAMPLE_BLOCKS):
    """sha256 over the size and 16 fixed 64 KiB blocks of the open file ``fd`` (the whole file when small).

    Only ``verify: sample-unsafe`` trusts it: bytes outside the sampled blocks are not read.
    """
    digest = hashlib.sha256(b"ct200-sample-v1:%d:" % size)
    if size <= block * count:
        offset = 0
        while offset < size:
            chunk = os.pread(fd, min(size - offset, 1 << 20), offset)
            if not chunk:
                break
            digest.update(chunk)
            offset += len(chunk)
    else:
        for offset in sample_offsets(size, block, count):
            digest.update(os.pread(fd, block, offset))
    return digest.hexdigest()
