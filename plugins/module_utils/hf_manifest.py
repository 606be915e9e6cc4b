# -*- coding: utf-8 -*-
# Copyright: ct200-deploy developers
# Apache-2.0
"""Download manifest kept in ``<local_dir>/.ct200/manifest.json``.

PRIVATE to the ct200.deploy collection.

The manifest makes a re-run O(files) ``stat`` calls instead of a re-hash:

* ``files``: one entry per verified file -- ``size``, ``mtime_ns``, ``sha256``
  (of the content, computed locally), ``oid`` (what the Hub lists: the LFS
  sha256, or the git blob sha1 of a small file), ``commit`` (the commit it was
  verified against) and ``sample`` (a digest of 16 fixed 64 KiB blocks, used to
  re-accept a file whose timestamp changed but whose size did not).
* ``tree``: the selected-independent tree listing of the last resolved commit
  (path -> size, oid, lfs sha256), so a commit-pinned re-run needs no network.
* ``refs``: last resolution of branch/tag names to commits (informational and
  for offline re-runs).

Only the standard library is used: this module is imported on the no-op path.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile

MANIFEST_VERSION = 1
STATE_DIR = ".ct200"
MANIFEST_NAME = "manifest.json"

SAMPLE_BLOCK = 64 * 1024
SAMPLE_BLOCKS = 16

# stat-check outcomes
OK = "ok"
MISSING = "missing"
SIZE = "size"  # size differs: truncated, grown or replaced
TOUCHED = "touched"  # same size, different mtime: content unknown
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
            with open(path, "rb") as handle:
                raw = handle.read()
        except FileNotFoundError:
            return cls(local_dir)
        except NotADirectoryError:
            return cls(local_dir)
        try:
            data = json.loads(raw.decode("utf-8"))
            if not isinstance(data, dict) or data.get("version") != MANIFEST_VERSION:
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
        return cls(local_dir, data)

    def save(self, fsync=False):
        """Write atomically (temp file in the same directory, rename).

        Without ``fsync`` a crash can at worst lose recent entries, and a lost entry
        only means that file is hashed again on the next run.  With it, the fsync of
        this small file also forces the journal to flush every dirty byte written
        before it (ext4 data=ordered), which costs seconds after a big download.
        """
        directory = state_dir(self.local_dir)
        os.makedirs(directory, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".manifest.", suffix=".tmp", dir=directory)
        try:
            with os.fdopen(fd, "w") as handle:
                json.dump(self.data, handle, sort_keys=True, separators=(",", ":"))
                if fsync:
                    handle.flush()
                    os.fsync(handle.fileno())
            os.replace(tmp, manifest_path(self.local_dir))
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise
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

    def record(self, path, size, mtime_ns, sha256, oid, commit, sample):
        self.data["files"][path] = {
            "size": size,
            "mtime_ns": mtime_ns,
            "sha256": sha256,
            "oid": oid,
            "commit": commit,
            "sample": sample,
        }
        self.dirty = True

    def forget(self, path):
        if self.data["files"].pop(path, None) is not None:
            self.dirty = True

    def stat_check(self, path, oid, size):
        """Compare the file on disk with its entry using one ``stat``.

        Returns (outcome, stat_result_or_None).  ``oid``/``size`` are what the
        tree lists now; an entry verified for other content is UNKNOWN.
        """
        full = os.path.join(self.local_dir, path)
        try:
            st = os.stat(full)
        except (FileNotFoundError, NotADirectoryError):
            return MISSING, None
        entry = self.data["files"].get(path)
        if st.st_size != size:
            return SIZE, st
        if not entry or entry.get("oid") != oid or entry.get("size") != size:
            return UNKNOWN, st
        if entry.get("mtime_ns") != st.st_mtime_ns:
            return TOUCHED, st
        return OK, st


def sample_offsets(size, block=SAMPLE_BLOCK, count=SAMPLE_BLOCKS):
    """Deterministic block offsets: first, last and evenly spread blocks in between."""
    if size <= block * count:
        return [0] if size else []
    last = size - block
    step = last / (count - 1)
    return sorted(set(int(i * step) for i in range(count - 1)) | {last})


def prefetch_samples(items, block=SAMPLE_BLOCK, count=SAMPLE_BLOCKS):
    """Ask the kernel to read the sample blocks of many files at once (POSIX_FADV_WILLNEED).

    ``items``: iterable of (path, size).  The reads are queued asynchronously, so
    the device works on all of them in parallel instead of one seek at a time;
    :func:`sample_digest` then finds them in the page cache.
    """
    if not hasattr(os, "posix_fadvise"):
        return
    for path, size in items:
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            continue
        try:
            if size <= block * count:
                os.posix_fadvise(fd, 0, size, os.POSIX_FADV_WILLNEED)
            else:
                for offset in sample_offsets(size, block, count):
                    os.posix_fadvise(fd, offset, block, os.POSIX_FADV_WILLNEED)
        except OSError:
            pass
        finally:
            os.close(fd)


def sample_digest(path, size, block=SAMPLE_BLOCK, count=SAMPLE_BLOCKS):
    """sha256 over the size and 16 fixed 64 KiB blocks (the whole file when it is small)."""
    digest = hashlib.sha256(b"ct200-sample-v1:%d:" % size)
    fd = os.open(path, os.O_RDONLY)
    try:
        if size <= block * count:
            remaining = size
            offset = 0
            while remaining > 0:
                chunk = os.pread(fd, min(remaining, 1 << 20), offset)
                if not chunk:
                    break
                digest.update(chunk)
                offset += len(chunk)
                remaining -= len(chunk)
        else:
            for offset in sample_offsets(size, block, count):
                digest.update(os.pread(fd, block, offset))
    finally:
        os.close(fd)
    return digest.hexdigest()
