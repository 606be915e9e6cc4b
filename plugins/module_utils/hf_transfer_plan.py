# -*- coding: utf-8 -*-
# Copyright: ct200-deploy developers
# SPDX-License-Identifier: Apache-2.0
"""hf_download's plan: which selected files of a commit's tree are present, to adopt, to link or to fetch.

PRIVATE to the ct200.deploy collection.  Only local work (one ``stat`` per file, a full hash where the
manifest cannot vouch); the tree comes from the Hub (hf_hub.Hub), the manifest or the controller's listing.
"""

from __future__ import annotations

import hashlib
import os

from ansible_collections.ct200.deploy.plugins.module_utils import hf_manifest
from ansible_collections.ct200.deploy.plugins.module_utils._io import UnsafePathError, open_nofollow
from ansible_collections.ct200.deploy.plugins.module_utils.hf_errors import DownloadError
from ansible_collections.ct200.deploy.plugins.module_utils.hf_hub import hostile_fix, select_paths, unmatched_patterns
from ansible_collections.ct200.deploy.plugins.module_utils.hf_paths import (
    repo_path_problem,
    tree_entry_problem,
    tree_shape_problem,
)

HASH_BLOCK = 16 << 20  # big sequential reads; hashlib drops the GIL for updates this size


class PlanFile(object):
    __slots__ = ("path", "size", "oid", "lfs", "url", "action", "reason", "existing", "partial", "link_from")

    def __init__(self, path, size, oid, lfs):
        self.path = path
        self.size = size
        self.oid = oid
        self.lfs = lfs
        self.url = None
        self.action = None  # present | refresh | adopt | link | fetch
        self.link_from = None  # (hf_transfer_reuse.Source, path, manifest entry) for action "link"
        self.reason = None
        self.existing = 0
        self.partial = 0

    def as_dict(self):
        data = {"path": self.path, "size": self.size}
        if self.reason:
            data["reason"] = self.reason
        if self.partial:
            data["resume_from"] = self.partial
        return data


def fetch_order(files):
    """``files`` (PlanFile) in the order a site fetches them, the seed and every peer alike: the files
    stored in git (configs, the safetensors index, tokenizer settings) first, then the LFS files, each in
    path order.  Path order alone put ``model.safetensors.index.json`` after the last shard, so every
    peer took it only after its slowest file (the fan-out's longest hop, 0.8 s on the benchmark); the
    small files cost one round trip each and the last file is then the last weight."""
    return sorted(files, key=lambda pf: (bool(pf.lfs), pf.path))


class Plan(object):
    def __init__(self, commit, files, unmatched):
        self.commit = commit
        self.files = files
        self.unmatched = unmatched
        self.hashed = 0
        self.hashed_bytes = 0
        self.reuse_sources = []  # hf_transfer_reuse.Source of every kept directory looked at

    def by_action(self, *actions):
        return [f for f in self.files if f.action in actions]

    @property
    def to_fetch(self):
        """The files to fetch in fetch order (sorted on each access: an action may change after the plan is
        made, e.g. a reuse turns a fetch into a link; the sums below need no order and do not sort)."""
        return fetch_order(self.by_action("fetch"))

    @property
    def to_link(self):
        return self.by_action("link")

    @property
    def bytes_to_link(self):
        return sum(f.size for f in self.to_link)

    @property
    def bytes_total(self):
        return sum(f.size for f in self.files)

    @property
    def bytes_to_fetch(self):
        return sum(f.size - f.partial for f in self.by_action("fetch"))

    @property
    def bytes_partial(self):
        return sum(f.partial for f in self.by_action("fetch"))

    @property
    def bytes_present(self):
        return sum(f.size for f in self.files if f.action != "fetch")

    @property
    def disk_needed(self):
        return sum(max(0, f.size - f.partial - f.existing) for f in self.by_action("fetch"))


HANDED_LISTING = "the listing handed to hf_download (listing option)"


def handed_tree(listing):
    """The listing option ([{path, size, oid, lfs}], as the controller fetched it once for the fleet)
    as a tree {path: entry}; make_plan then checks every path and entry like the Hub's own listing."""
    tree_files = {}
    for item in listing:
        path = item.get("path") if isinstance(item, dict) else None
        if not isinstance(path, str) or path in tree_files:
            raise DownloadError("%s has an entry without a path, or a path twice (%r); nothing was written"
                                % (HANDED_LISTING, path), code="bad_listing",
                                fix="hand the listing exactly as the controller fetched it (ct200.deploy.hf_repo_meta)")
        tree_files[path] = {"size": item.get("size"), "oid": item.get("oid"), "lfs": item.get("lfs")}
        if item.get("xet_only"):
            tree_files[path]["xet_only"] = True
    return tree_files


def select(tree_files, allow_patterns, ignore_patterns):
    """Selected paths (huggingface_hub's fnmatch semantics) and allow patterns that matched nothing."""
    paths = sorted(tree_files)
    selected = list(select_paths(paths, allow_patterns, ignore_patterns))
    return selected, unmatched_patterns(paths, allow_patterns)


def check_tree(opts, commit, tree_files, source="the Hub's tree listing"):
    """Refuse a listing with any path that could leave local_dir or collide with our state,
    or an entry without a usable size/oid -- before a single byte is written."""
    where = "%s of %s@%s (commit %s)" % (source, opts.repo_id, opts.revision, (commit or "?")[:12])
    fix = hostile_fix(opts)
    if source.startswith("the tree cached"):
        fix = ("remove %s (the next run rebuilds it from the Hub) and find out what wrote it; if the Hub lists "
               "the same, %s" % (hf_manifest.manifest_path(opts.local_dir), fix))
    if not isinstance(tree_files, dict):
        raise DownloadError("%s is not a mapping of paths; nothing was written" % where, code="bad_listing", fix=fix)
    for path in sorted(tree_files, key=repr):
        why = repo_path_problem(path)
        if why:
            raise DownloadError(
                "%s names the file %r, which hf_download refuses because %s; nothing was written"
                % (where, path, why), code="unsafe_path", fix=fix)
        why = tree_entry_problem(tree_files[path])
        if why:
            raise DownloadError("%s lists %r, but %s; nothing was written" % (where, path, why),
                                code="bad_listing", fix=fix)
    why = tree_shape_problem(tree_files)
    if why:
        raise DownloadError("%s cannot be written: %s; nothing was written" % (where, why), code="bad_listing", fix=fix)


class FileChanged(Exception):
    """The file changed (size, mtime, ctime or inode) while it was being hashed."""


def _identity(st):
    return (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def hash_file(path, size, lfs, root=None):
    """(sha256 hex, git blob sha1 hex or None, fstat at open) of a local file.

    Read in 16 MiB sequential blocks through a descriptor opened without following
    symlinks (under ``root``); FileChanged if the file changed while it was read.
    """
    fd = open_nofollow(path, os.O_RDONLY, root=root)
    try:
        st = os.fstat(fd)
        if hasattr(os, "posix_fadvise"):
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_SEQUENTIAL)
            except OSError:
                pass
        sha256 = hashlib.sha256()
        sha1 = None if lfs else hashlib.sha1(b"blob %d\0" % size)
        mv = memoryview(bytearray(HASH_BLOCK))
        with open(fd, "rb", buffering=0, closefd=False) as handle:
            while True:
                n = handle.readinto(mv)
                if not n:
                    break
                sha256.update(mv[:n])
                if sha1 is not None:
                    sha1.update(mv[:n])
        if _identity(os.fstat(fd)) != _identity(st):
            raise FileChanged(path)
    finally:
        os.close(fd)
    return sha256.hexdigest(), (sha1.hexdigest() if sha1 is not None else None), st


def make_plan(opts, commit, tree_files, manifest, hash_workers=None, source="the Hub's tree listing"):
    """Compare the selected tree entries with the disk and the manifest.

    Only local work: one ``stat`` per file (never following a symlink) and a full
    hash for every file the manifest does not vouch for with the same size,
    mtime, ctime and inode (or every file with verify=full).  Only the explicit
    opt-in ``verify: sample-unsafe`` re-accepts a changed file by 16 sampled blocks.
    Records verified files in ``manifest`` (in memory).
    """
    check_tree(opts, commit, tree_files, source)
    snap = hf_manifest.snapshot_commit(opts.local_dir)
    if snap is not None and snap != commit:
        raise DownloadError(
            "%s is the snapshot of commit %s, but %s@%s is commit %s: a snapshot directory holds one commit and is "
            "never written with another's files; nothing was written"
            % (opts.local_dir, snap, opts.repo_id, opts.revision, commit),
            code="snapshot_mismatch",
            fix="stage the new commit beside it, in %s (layout: snapshots with local_dir the repository's root)"
                % hf_manifest.snapshot_dir(os.path.dirname(os.path.dirname(opts.local_dir)), commit))
    selected, unmatched = select(tree_files, opts.allow_patterns, opts.ignore_patterns)
    files = []
    to_hash = []
    for path in selected:
        info = tree_files[path]
        if info.get("xet_only"):
            raise xet_only_error(opts, commit, path, source)
        pf = PlanFile(path, info["size"], info["oid"], info["lfs"])
        files.append(pf)
        try:
            outcome, st = manifest.stat_check(path, pf.oid, pf.size)
        except UnsafePathError as exc:
            raise DownloadError(
                "%s cannot be checked: %s" % (path, exc), code="unsafe_path",
                fix="hf_download follows no symlink inside local_dir %s: remove the symlink (or move the real "
                    "directory there) and run again; nothing was changed" % opts.local_dir)
        _classify(opts, pf, outcome, st, manifest, commit, to_hash)
    plan = Plan(commit, files, unmatched)
    if to_hash:
        _hash_present(opts, plan, to_hash, manifest, commit, hash_workers)
    if plan.to_fetch and (snap is not None or opts.reuse_dirs):
        from ansible_collections.ct200.deploy.plugins.module_utils import hf_transfer_reuse as reuse

        plan.reuse_sources = reuse.load_sources(opts.local_dir, opts.repo_id, opts.repo_type, opts.reuse_dirs,
                                                siblings=snap is not None)
        reuse.plan_reuse(plan.to_fetch, plan.reuse_sources)
    return plan


def xet_only_error(opts, commit, path, source):
    """A Xet-backed file listed with its xetHash and no lfs sha256: nothing here can prove its bytes."""
    return DownloadError(
        "%s of %s@%s lists %r with a Xet hash (xetHash) but no LFS sha256 (lfs.oid): hf_download proves every "
        "byte against a sha256 or a git blob sha1, and the only other id listed is the git blob of the Xet pointer, "
        "so this file could not be verified; nothing was written" % (source, opts.repo_id, commit[:12], path),
        code="xet_unverifiable",
        fix="leave the file out (ignore_patterns) and fetch it with huggingface_hub's Xet client, which checks Xet "
            "hashes (hf download %s %s --revision %s with hf_xet installed and HF_HUB_DISABLE_XET unset); if the "
            "Hub should list lfs.oid for it, report it to the repository owner or Hugging Face"
            % (opts.repo_id, path, commit))


def _classify(opts, pf, outcome, st, manifest, commit, to_hash):
    """Set ``pf.action`` from the stat outcome, or queue ``pf`` for hashing."""
    path = pf.path
    if outcome == hf_manifest.MISSING:
        pf.action, pf.reason = "fetch", "missing"
    elif outcome == hf_manifest.NOT_REGULAR:
        pf.action, pf.reason = "fetch", "not a regular file (a symlink, directory or device is replaced, never followed)"
    elif outcome == hf_manifest.SIZE:
        pf.action, pf.reason = "fetch", "size %d, expected %d" % (st.st_size, pf.size)
        pf.existing = st.st_size
    elif outcome == hf_manifest.OK:
        if opts.verify == "full":
            to_hash.append((pf, st))
        else:
            pf.action = "present"
    elif outcome == hf_manifest.TOUCHED:
        entry = manifest.entry(path)
        if opts.verify == "size":
            pf.action, pf.reason = "refresh", "stat changed (verify=size trusts the size)"
            manifest.record(path, st, entry.get("sha256"), pf.oid, entry.get("commit"), entry.get("sample"), hashed=False)
        elif opts.verify == "sample-unsafe" and entry.get("sample") and _sample(manifest, path, pf.size) == entry["sample"]:
            pf.action, pf.reason = "refresh", "stat changed, sampled blocks unchanged (verify=sample-unsafe)"
            manifest.record(path, st, entry.get("sha256"), pf.oid, entry.get("commit"), entry["sample"], hashed=False)
        else:
            to_hash.append((pf, st))
    elif opts.verify == "size":  # UNKNOWN: present with the right size, not vouched for by the manifest
        pf.action, pf.reason = "adopt", "size matches (verify=size)"
        manifest.record(path, st, None, pf.oid, commit, _sample(manifest, path, pf.size), hashed=False)
    else:
        to_hash.append((pf, st))


def _sample(manifest, path, size):
    try:
        fd = open_nofollow(os.path.join(manifest.local_dir, path), os.O_RDONLY, root=manifest.local_dir)
    except OSError:
        return None
    try:
        return hf_manifest.sample_digest(fd, size)
    except OSError:
        return None
    finally:
        os.close(fd)


def hash_workers_default(count):
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    return max(1, min(cpus, count))


def _hash_present(opts, plan, to_hash, manifest, commit, hash_workers):
    """Hash present files in full, one thread per core, largest first (hashlib releases the GIL)."""
    import concurrent.futures

    workers = hash_workers or hash_workers_default(len(to_hash))

    def work(item):
        pf, _st = item
        full = os.path.join(manifest.local_dir, pf.path)
        try:
            return item, hash_file(full, pf.size, pf.lfs, root=manifest.local_dir)
        except (FileChanged, UnsafePathError, FileNotFoundError) as exc:
            return item, exc

    ordered = sorted(to_hash, key=lambda item: -item[0].size)
    with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
        for (pf, st), outcome in pool.map(work, ordered):
            plan.hashed += 1
            plan.hashed_bytes += pf.size
            if isinstance(outcome, Exception):
                pf.action, pf.reason = "fetch", "changed or replaced while it was being checked (%s)" % type(outcome).__name__
                manifest.forget(pf.path)
                continue
            sha256, sha1, hashed_st = outcome
            got = sha256 if pf.lfs else sha1
            if got == pf.oid and hashed_st.st_size == pf.size:
                entry = manifest.entry(pf.path)
                pf.action = "present" if entry and entry.get("sha256") == sha256 else "adopt"
                pf.reason = "verified by hashing"
                manifest.record(pf.path, hashed_st, sha256, pf.oid, commit, _sample(manifest, pf.path, pf.size))
            else:
                pf.action = "fetch"
                pf.reason = "content differs from the Hub (%s %s..., expected %s...)" % (
                    "sha256" if pf.lfs else "git sha1",
                    got[:12],
                    pf.oid[:12],
                )
                pf.existing = pf.size
                manifest.forget(pf.path)
