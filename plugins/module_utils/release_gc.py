# -*- coding: utf-8 -*-
# Copyright: ct200-deploy developers
# SPDX-License-Identifier: Apache-2.0
"""Garbage collection of old releases (PRIVATE to the collection; module ct200.deploy.release_gc).

What may go: snapshot directories ``<weights root>/snapshots/<commit40>`` and SGLang venvs ``<venv root>/<version>``.
What stays, whatever else is true:

* the directories of the kept releases: ``state.json``'s current and previous, then the most recent other
  records (``recorded_at``) up to ``keep`` releases in all (the records are sglang_release's; read only here);
* every directory an installed unit or environment file names (``/etc/systemd/system/sglang@*.service`` and the
  ``EnvironmentFile=`` each names), or a running process's command line (``/proc/<pid>/cmdline``), read bounded;
* ``keep_dirs`` (a staging in flight), and a snapshot whose download lock is held (a download in progress).

With no ``state.json`` nothing is deleted: nothing says what is current.  Nothing is followed through a symlink:
entries are lstat'ed, trees are removed by directory descriptors (``shutil.rmtree`` with ``dir_fd``), and a symlink
found where a snapshot or venv belongs is reported, never removed or followed.

Bytes freed count only blocks no kept file still uses: a file hard-linked into a kept snapshot frees nothing.
Removing such a link changes the kept inode's ctime (its link count), not its bytes: the kept snapshots'
manifests are updated for exactly those inodes (same inode, size and mtime before and after), so a rollback to a
kept release stays verified by ``stat`` alone instead of a full re-hash.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import re
import shutil
import stat

from ansible_collections.ct200.deploy.plugins.module_utils import hf_manifest
from ansible_collections.ct200.deploy.plugins.module_utils._io import UnsafePathError, listdir_sorted, open_nofollow

RELEASE_DIR = "/var/lib/ct200/releases"
STATE_FILE = "state.json"
UNIT_DIR = "/etc/systemd/system"
UNIT_RE = re.compile(r"^sglang@.+\.service\Z")
VENV_ROOT = "/opt/sglang"
ID_RE = re.compile(r"^r[0-9a-f]{12}\Z")
VERSION_RE = re.compile(r"^[0-9A-Za-z][0-9A-Za-z._+-]{0,63}\Z")
READ_LIMIT = 4 << 20
CMDLINE_LIMIT = 64 << 10
MAX_PROCS = 65536
DEFAULT_KEEP = 2


class GcError(Exception):
    """Garbage collection cannot decide safely; the message names cause and fix."""


def read_bounded(path, limit=READ_LIMIT):
    """The bytes of a regular file (never through a symlink), at most ``limit``; None if it does not exist."""
    try:
        fd = open_nofollow(path, os.O_RDONLY)
    except (FileNotFoundError, NotADirectoryError):
        return None
    with os.fdopen(fd, "rb") as handle:
        data = handle.read(limit + 1)
    if len(data) > limit:
        raise GcError("%s is larger than %d bytes; it is not a file ct200.deploy wrote: remove or fix it" % (path, limit))
    return data


def read_json(path):
    data = read_bounded(path)
    if data is None:
        return None
    try:
        value = json.loads(data.decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise GcError("%s is not valid JSON (%s); nothing was deleted. Fix: restore it (ct200.deploy.sglang_release "
                      "writes it) or remove the broken record" % (path, exc))
    if not isinstance(value, dict):
        raise GcError("%s is not a JSON object; nothing was deleted" % path)
    return value


def load_releases(release_dir):
    """(state or None, {id: record}); a record that cannot be read is an error only if it is current or previous."""
    state = read_json(os.path.join(release_dir, STATE_FILE))
    records, broken = {}, {}
    for name in listdir_sorted(release_dir, FileNotFoundError):
        if not name.endswith(".json") or name == STATE_FILE or not ID_RE.match(name[:-5]):
            continue
        try:
            record = read_json(os.path.join(release_dir, name))
        except (GcError, UnsafePathError, OSError) as exc:
            broken[name[:-5]] = str(exc)
            continue
        if record is not None:
            records[name[:-5]] = record
    if state is not None:
        for key in ("current", "previous"):
            rid = state.get(key)
            if rid is not None and rid not in records:
                raise GcError("state.json's %s release %s has no readable record (%s); nothing was deleted. Fix: "
                              "restore %s/%s.json or record the serving release again (ct200 rollout)"
                              % (key, rid, broken.get(rid, "missing"), release_dir, rid))
    return state, records


def kept_ids(state, records, keep=None):
    """current, previous, then the most recent other records, ``keep`` (>= 2) in all."""
    count = keep if keep is not None else state.get("keep", DEFAULT_KEEP)
    if isinstance(count, bool) or not isinstance(count, int) or count < 2:
        count = DEFAULT_KEEP
    ids = [rid for rid in (state.get("current"), state.get("previous")) if rid]
    others = sorted((rid for rid in records if rid not in ids),
                    key=lambda rid: str(records[rid].get("recorded_at") or ""), reverse=True)
    return (ids + others)[:max(count, len(ids))]


def record_dirs(record):
    """The snapshot directories and the venv a release record names."""
    dirs = []
    for key in ("target", "drafter"):
        part = record.get(key)
        if isinstance(part, dict) and isinstance(part.get("dir"), str):
            dirs.append(os.path.normpath(part["dir"]))
    if isinstance(record.get("venv"), str):
        dirs.append(os.path.normpath(record["venv"]))
    return dirs


def unit_texts(unit_dir):
    """Texts of installed sglang@*.service units and the EnvironmentFile= each names (bounded, no symlink)."""
    texts = []
    for name in listdir_sorted(unit_dir, FileNotFoundError):
        if not UNIT_RE.match(name):
            continue
        try:
            data = read_bounded(os.path.join(unit_dir, name))
        except (UnsafePathError, OSError):
            continue  # a symlinked unit is not ours; the process check still protects what it runs
        if data is None:
            continue
        text = data.decode("utf-8", "replace")
        texts.append(text)
        for line in text.splitlines():
            if line.startswith("EnvironmentFile="):
                env = line.split("=", 1)[1].strip().lstrip("-")
                if env.startswith("/"):
                    try:
                        env_data = read_bounded(env)
                    except (UnsafePathError, OSError, GcError):
                        env_data = None
                    if env_data:
                        texts.append(env_data.decode("utf-8", "replace"))
    return texts


def process_words(proc_root):
    """Every argument of every running process (``<proc_root>/<pid>/cmdline``, each read bounded)."""
    words = set()
    try:
        pids = [name for name in os.listdir(proc_root) if name.isdigit()][:MAX_PROCS]
    except OSError:
        return words
    for pid in pids:
        try:
            fd = os.open(os.path.join(proc_root, pid, "cmdline"), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            continue  # gone, or not ours to read
        try:
            data = os.read(fd, CMDLINE_LIMIT)
        except OSError:
            data = b""
        finally:
            os.close(fd)
        for word in data.split(b"\0"):
            if word:
                words.add(word.decode("utf-8", "replace"))
    return words


def referenced(candidate, texts, words):
    """A unit text or a process argument names ``candidate`` (itself or a path inside it)."""
    pattern = re.compile(re.escape(candidate) + r"(?=$|[/\s\"'=:,;])")
    if any(pattern.search(text) for text in texts):
        return True
    prefix = candidate + "/"
    for word in words:
        for part in re.split(r"[=:,\s]", word):
            if part == candidate or part.startswith(prefix):
                return True
    return False


def _lock_held(directory):
    """A download holds ``<dir>/.ct200/lock`` (hf_download's flock)."""
    try:
        fd = open_nofollow(os.path.join(directory, hf_manifest.STATE_DIR, "lock"), os.O_RDONLY, root=directory)
    except (OSError, UnsafePathError):
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:
        return True
    finally:
        os.close(fd)
    return False


def _children(parent, pattern):
    """(path, lstat) of the entries of ``parent`` whose name matches; a missing parent gives []."""
    try:
        fd = os.open(parent, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return []
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise GcError("%s is a symlink or not a directory; release_gc follows no symlink: point the option at "
                          "the real directory" % parent)
        raise
    try:
        out = []
        for name in sorted(os.listdir(fd)):
            if pattern(name):
                out.append((os.path.join(parent, name), os.stat(name, dir_fd=fd, follow_symlinks=False)))
        return out
    finally:
        os.close(fd)


def _walk_files(top):
    """lstat of every regular file under ``top`` (no symlink followed)."""
    out = []
    for _dirpath, _dirs, files, dfd in os.fwalk(top, follow_symlinks=False):
        for name in files:
            try:
                st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
            except FileNotFoundError:
                continue
            if stat.S_ISREG(st.st_mode):
                out.append(st)
    return out


def default_venv_roots(records):
    """/opt/sglang and the parents of recorded venvs laid out as ``.../sglang/<version>``."""
    roots = [VENV_ROOT]
    for record in records.values():
        venv = record.get("venv")
        if isinstance(venv, str) and os.path.basename(os.path.dirname(os.path.normpath(venv))) == "sglang":
            root = os.path.dirname(os.path.normpath(venv))
            if root not in roots:
                roots.append(root)
    return roots


def plan(release_dir=RELEASE_DIR, weights_roots=None, venv_roots=None, keep=None, keep_dirs=(), unit_dir=UNIT_DIR,
         proc_root="/proc"):
    """What goes and what stays, with the reason for each kept directory; nothing is changed."""
    state, records = load_releases(release_dir)
    result = {"state": state, "kept_releases": [], "keep": [], "delete": [], "skipped": [], "bytes_freed": 0,
              "warnings": []}
    if state is None:
        result["warnings"].append("no %s in %s: no release is recorded as current, so nothing is deleted"
                                  % (STATE_FILE, release_dir))
        return result
    kept = kept_ids(state, records, keep)
    result["kept_releases"] = kept
    reasons = {}
    for rid in kept:
        for directory in record_dirs(records[rid]):
            reasons.setdefault(directory, "release %s" % rid)
    for directory in keep_dirs or ():
        reasons.setdefault(os.path.normpath(directory), "keep_dirs")
    roots = [os.path.normpath(r) for r in weights_roots or []]
    for rid in kept:
        for directory in record_dirs(records[rid])[:2]:
            root = os.path.dirname(os.path.dirname(directory))
            if hf_manifest.snapshot_commit(directory) and root not in roots:
                roots.append(root)
    venvs = [os.path.normpath(r) for r in (venv_roots if venv_roots is not None else default_venv_roots(records))]
    candidates = []
    for root in roots:
        for path, st in _children(os.path.join(root, hf_manifest.SNAPSHOTS_DIR), hf_manifest.is_commit_name):
            candidates.append(("snapshot", path, st))
    for root in venvs:
        for path, st in _children(root, lambda name: bool(VERSION_RE.match(name))):
            candidates.append(("venv", path, st))
    texts, words = unit_texts(unit_dir), process_words(proc_root)
    for kind, path, st in candidates:
        if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
            result["skipped"].append({"path": path, "why": "not a directory (a symlink is never followed or removed)"})
            continue
        why = reasons.get(path)
        if why is None and referenced(path, texts, words):
            why = "named by an installed unit or a running process"
        if why is None and kind == "snapshot" and _lock_held(path):
            why = "a download holds its lock"
        if why is not None:
            result["keep"].append({"path": path, "kind": kind, "why": why})
        else:
            result["delete"].append({"path": path, "kind": kind})
    result["bytes_freed"] = freed_bytes([d["path"] for d in result["delete"]])
    return result


def freed_bytes(deleted):
    """Blocks of the inodes whose every link is under ``deleted`` (a link anywhere else, a kept snapshot, frees
    nothing)."""
    links = {}
    for top in deleted:
        for st in _walk_files(top):
            key = (st.st_dev, st.st_ino)
            seen, blocks, nlink = links.get(key, (0, st.st_blocks * 512, st.st_nlink))
            links[key] = (seen + 1, blocks, nlink)
    return sum(blocks for seen, blocks, nlink in links.values() if seen >= nlink)


def _kept_identities(kept_snapshots):
    """{(dev, ino): [(snapshot, path, lstat)]} of the files kept manifests vouch for now (same identity)."""
    out = {}
    for directory in kept_snapshots:
        manifest = hf_manifest.Manifest.load(directory)
        if manifest.warning:
            continue
        for path, entry in manifest.files.items():
            try:
                st = hf_manifest.lstat_under(directory, path)
            except (OSError, UnsafePathError):
                continue
            if st is not None and hf_manifest.same_identity(entry, st):
                out.setdefault((st.st_dev, st.st_ino), []).append((directory, path, st))
    return out


def apply(result, lock_factory=None):
    """Delete what ``result`` (from :func:`plan`) lists, then refresh the kept manifests' ctime of shared inodes.
    Returns the warnings."""
    warnings = []
    deleted = [d["path"] for d in result["delete"]]
    if not deleted:
        return warnings
    kept_snaps = [k["path"] for k in result["keep"] if k["kind"] == "snapshot"]
    going = set((st.st_dev, st.st_ino) for top in deleted for st in _walk_files(top))
    shared = dict((key, items) for key, items in _kept_identities(kept_snaps).items() if key in going)
    for path in deleted:
        parent, name = os.path.split(path)
        fd = os.open(parent, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            try:
                st = os.stat(name, dir_fd=fd, follow_symlinks=False)
            except FileNotFoundError:
                continue  # gone meanwhile (another host's GC on a shared directory)
            if not stat.S_ISDIR(st.st_mode):
                warnings.append("%s is no longer a directory; left alone" % path)
                continue
            _make_writable(name, fd)
            shutil.rmtree(name, dir_fd=fd, onerror=_gone_is_fine)  # fd-based, symlink-attack resistant
        finally:
            os.close(fd)
    by_dir = {}
    for items in shared.values():
        for directory, relpath, before in items:
            try:
                after = hf_manifest.lstat_under(directory, relpath)
            except (OSError, UnsafePathError):
                after = None
            if after is None:
                continue
            by_dir.setdefault(directory, []).append((before, after))
    for directory, pairs in sorted(by_dir.items()):
        changed = [(b, a) for b, a in pairs if b.st_ctime_ns != a.st_ctime_ns and b.st_ino == a.st_ino
                   and b.st_mtime_ns == a.st_mtime_ns and b.st_size == a.st_size]
        if not changed:
            continue
        lock = None
        try:
            if lock_factory is not None:
                lock = lock_factory(directory)
            manifest = hf_manifest.Manifest.load(directory)
            for before, after in changed:
                manifest.refresh_ctime(before.st_ino, before.st_mtime_ns, before.st_ctime_ns, after.st_ctime_ns)
            if manifest.dirty:
                manifest.save()
        except Exception as exc:  # pylint: disable=broad-except  # a stale ctime means a re-hash, not a wrong file
            warnings.append("could not update %s's manifest (its shared files are hashed again next time): %s"
                            % (directory, exc))
        finally:
            if lock is not None:
                lock.release()
    return warnings


def _gone_is_fine(_function, _path, exc_info):
    """rmtree's error handler: an entry already removed (a concurrent deletion) is fine; anything else is raised."""
    if not isinstance(exc_info[1], FileNotFoundError):
        raise exc_info[1]


def _make_writable(name, dir_fd):
    """A snapshot's files are 0444 and its directories 0755: rmtree needs only the directories writable."""
    for _dirpath, dirs, _files, dfd in os.fwalk(name, dir_fd=dir_fd, follow_symlinks=False):
        for sub in dirs:
            try:
                st = os.stat(sub, dir_fd=dfd, follow_symlinks=False)
                if stat.S_ISDIR(st.st_mode) and not st.st_mode & stat.S_IWUSR:
                    os.chmod(sub, stat.S_IMODE(st.st_mode) | stat.S_IWUSR | stat.S_IXUSR, dir_fd=dfd)
            except OSError:
                pass


def diff(result):
    before = sorted(d["path"] for d in result["delete"]) + sorted(k["path"] for k in result["keep"])
    after = sorted(k["path"] for k in result["keep"])
    return {"before_header": "release directories (before)", "after_header": "release directories (after)",
            "before": "".join(p + "\n" for p in sorted(before)), "after": "".join(p + "\n" for p in after)}
