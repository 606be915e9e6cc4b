# -*- coding: utf-8 -*-
# Copyright: ct200-deploy developers
# SPDX-License-Identifier: Apache-2.0
"""hf_download's logic: resolve -> plan -> disk preflight -> fetch -> manifest.

PRIVATE to the ct200.deploy collection.

huggingface_hub is used for what it is for (revision resolution, the tree
listing with sizes and oids, access checks, headers and error types) and is
imported *lazily*: a re-run that the manifest can answer never imports
``huggingface_hub.hf_api`` (~0.3 s per call):

* revision is a 40-hex commit and the manifest holds that commit's tree: no
  network at all, one ``stat`` per selected file;
* revision is a branch/tag: one small ``GET /api/<type>s/<id>/revision/<rev>``
  with the standard library resolves the commit; if it equals the manifest's,
  same as above.

Anything else (first run, new commit, a file to fetch, a failing lean call)
takes the full path through huggingface_hub.  Bytes are moved by
:mod:`hf_transfer_engine`.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import math
import os
import re
import stat
import threading
import time
import urllib.parse

from ansible_collections.ct200.deploy.plugins.module_utils import disk_preflight, hf_manifest
from ansible_collections.ct200.deploy.plugins.module_utils import hf_download_spec as spec
from ansible_collections.ct200.deploy.plugins.module_utils._io import (
    UnsafePathError,
    atomic_write,
    open_nofollow,
    parent_fd,
    remove_stale_temps,
)
from ansible_collections.ct200.deploy.plugins.module_utils.hf_hub import select_paths, unmatched_patterns
from ansible_collections.ct200.deploy.plugins.module_utils.hf_paths import (
    endpoint_problem,
    redact_url,
    repo_id_problem,
    repo_path_problem,
    tree_entry_problem,
    tree_shape_problem,
    url_credentials,
)
from ansible_collections.ct200.deploy.plugins.module_utils.redact import scrub

# hf_transfer_http (http.client, ssl, urllib.request) and hf_transfer_engine are
# imported where they are used: a commit-pinned no-op re-run needs neither.

DEFAULT_ENDPOINT = spec.DEFAULT_ENDPOINT
COMMIT_RE = re.compile(r"^[0-9a-f]{40}\Z")
REPO_TYPES = tuple(spec.REPO_TYPES)
VERIFY_MODES = tuple(spec.VERIFY_CHOICES)
USER_AGENT = "ct200-deploy/0.1.0 (hf_download)"
PROGRESS_NAME = "progress.json"
ERROR_NAME = "error.json"  # owner-only words of the last failure (the served progress file has its code)
LOCK_NAME = "lock"
HASH_BLOCK = 16 << 20  # big sequential reads; hashlib drops the GIL for updates this size
LOCK_POLL = 0.1


class DownloadError(Exception):
    """Operator-facing failure: ``code`` (hf_errors vocabulary or local), ``message`` and ``fix``."""

    def __init__(self, message, code="error", fix="", details=None):
        super().__init__(message)
        self.code = code
        self.message = message
        self.fix = fix
        self.details = details or {}


# Knobs of the Python API that are not module options (tests and benchmarks set them).
INTERNAL_DEFAULTS = dict(
    token_source=None,
    progress_interval=1.0,
    api_timeout=30.0,
    backoff_max=30.0,
    check_mode=False,
    diff=False,
    offline=None,
)


class Options(object):
    """Validated inputs of one download: the module's options (hf_download_spec.ARGUMENT_SPEC,
    same names and defaults) with the token already resolved, plus INTERNAL_DEFAULTS."""

    def __init__(self, **params):
        unknown = set(params) - set(spec.ARGUMENT_SPEC) - set(INTERNAL_DEFAULTS)
        if unknown:
            raise TypeError("unknown hf_download option(s): %s" % ", ".join(sorted(unknown)))
        values = dict((name, opt.get("default")) for name, opt in spec.ARGUMENT_SPEC.items())
        values.update(INTERNAL_DEFAULTS)
        values.update((k, v) for k, v in params.items() if v is not None)
        self._problems = []
        self.repo_id = values["repo_id"]
        self.local_dir = os.path.abspath(values["local_dir"] or "/")
        self.revision = values["revision"] or "main"
        self.repo_type = values["repo_type"] or "model"
        self.allow_patterns = list(values["allow_patterns"]) if values["allow_patterns"] else None
        self.ignore_patterns = list(values["ignore_patterns"]) if values["ignore_patterns"] else None
        self.token = values["token"]
        self.token_source = values["token_source"]
        self.endpoint = str(values["endpoint"] or os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")
        self.max_workers = values["max_workers"]
        self.min_free_bytes = self._size("min_free_bytes", values["min_free_bytes"])
        self.split_min = self._size("min_split_size", values["min_split_size"])
        self.verify = values["verify"]
        self.stall_timeout = values["stall_timeout"]
        self.retries = values["retries"]
        self.lock_timeout = values["lock_timeout"]
        self.progress_file = os.path.abspath(
            values["progress_file"] or os.path.join(hf_manifest.state_dir(self.local_dir), PROGRESS_NAME))
        self.progress_interval = values["progress_interval"]
        self.api_timeout = values["api_timeout"]
        self.fsync = values["fsync"]
        self.direct_io = values["direct_io"]
        self.backoff_max = values["backoff_max"]
        self.check_mode = values["check_mode"]
        self.diff = values["diff"]
        offline = values["offline"]
        if offline is None:
            offline = os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")
        self.offline = offline
        self.listing = values["listing"]
        self.layout = values["layout"] or "flat"
        self.reuse_dirs = [os.path.abspath(p) for p in values["reuse_dirs"] or []]
        self.root_dir = None  # layout=snapshots: the repository's root (local_dir then becomes its snapshot)
        self.resolved = None  # (commit, network calls) when the commit was resolved before the lock
        self._progress_given = bool(values["progress_file"])

    def _size(self, name, value):
        try:
            return disk_preflight.parse_size(value)
        except ValueError as exc:
            self._problems.append("%s: %s" % (name, exc))
            return 0

    @property
    def endpoint_display(self):
        """The endpoint as it may be printed (credentials redacted)."""
        return redact_url(self.endpoint)

    def validate(self):
        problems = list(self._problems)
        why = repo_id_problem(self.repo_id)
        if why:
            problems.append("repo_id %r is not a valid repo id: %s" % (self.repo_id, why))
        if self.repo_type not in REPO_TYPES:
            problems.append("repo_type must be one of %s" % ", ".join(REPO_TYPES))
        if self.verify not in VERIFY_MODES:
            problems.append("verify must be one of %s" % ", ".join(VERIFY_MODES))
        for name, (low, high, inclusive) in sorted(spec.LIMITS.items()):
            value = getattr(self, name)
            kind = int if spec.ARGUMENT_SPEC[name]["type"] == "int" else (int, float)
            ok = (isinstance(value, kind) and not isinstance(value, bool)
                  and (isinstance(value, int) or math.isfinite(value)))
            if not ok or value > high or value < low or (value == low and not inclusive):
                problems.append("%s must be a number %s %s and <= %s, got %r"
                                % (name, ">=" if inclusive else ">", low, high, value))
        if self.layout not in spec.LAYOUTS:
            problems.append("layout must be one of %s" % ", ".join(spec.LAYOUTS))
        if self.listing is not None and not is_commit(self.revision):
            problems.append("listing is the tree of one commit: revision must be that 40-hex commit, got %r"
                            % (self.revision,))
        if not isinstance(self.revision, str) or re.search(r"[\x00-\x1f\x7f]", self.revision):
            problems.append("revision %r contains control characters" % (self.revision,))
        if self.local_dir in ("/", ""):
            problems.append("local_dir must not be /")
        elif os.path.islink(self.local_dir):
            problems.append("local_dir %s is a symlink; set local_dir to the directory it points to "
                            "(hf_download follows no symlink under local_dir)" % self.local_dir)
        elif os.path.exists(self.local_dir) and not os.path.isdir(self.local_dir):
            problems.append("local_dir %s exists and is not a directory" % self.local_dir)
        why = endpoint_problem(self.endpoint)
        if why:
            problems.append("endpoint %s is not usable: %s" % (self.endpoint_display, why))
        if problems:
            raise DownloadError(
                "invalid arguments: " + "; ".join(problems),
                code="bad_argument",
                fix="correct the options named above; nothing was changed",
            )

    def use_snapshot(self, commit):
        """layout=snapshots: work in ``<local_dir>/snapshots/<commit>`` (local_dir is the repository's root)."""
        self.root_dir = self.local_dir
        snap = hf_manifest.snapshot_dir(self.root_dir, commit)
        for path in (os.path.dirname(snap), snap):
            if os.path.islink(path):
                raise DownloadError(
                    "%s is a symlink; hf_download follows no symlink under the repository root %s" % (path, self.root_dir),
                    code="unsafe_path", fix="remove the symlink (or move the real directory there) and run again")
        self.local_dir = snap
        if not self._progress_given:
            self.progress_file = os.path.join(hf_manifest.state_dir(snap), PROGRESS_NAME)

    # URL helpers -------------------------------------------------------------
    def repo_url_prefix(self):
        return {"model": "", "dataset": "datasets/", "space": "spaces/"}[self.repo_type]

    def resolve_url(self, commit, path):
        return "%s/%s%s/resolve/%s/%s" % (
            self.endpoint,
            self.repo_url_prefix(),
            self.repo_id,
            urllib.parse.quote(commit, safe=""),
            urllib.parse.quote(path),
        )

    def revision_api_url(self):
        return "%s/api/%ss/%s/revision/%s" % (
            self.endpoint,
            self.repo_type,
            self.repo_id,
            urllib.parse.quote(self.revision, safe=""),
        )


# --------------------------------------------------------------------- planning
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
        return self.by_action("fetch")

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
        return sum(f.size - f.partial for f in self.to_fetch)

    @property
    def bytes_partial(self):
        return sum(f.partial for f in self.to_fetch)

    @property
    def bytes_present(self):
        return sum(f.size for f in self.files if f.action != "fetch")

    @property
    def disk_needed(self):
        return sum(max(0, f.size - f.partial - f.existing) for f in self.to_fetch)


def tree_entry(size, oid, lfs):
    return {"size": size, "oid": oid, "lfs": bool(lfs)}


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


def hostile_fix(opts):
    return ("a genuine Hugging Face Hub never lists such a file: the endpoint %s (endpoint option / HF_ENDPOINT), "
            "or a mirror or proxy in between, is broken, hostile or compromised; check it before running again"
            % opts.endpoint_display)


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


# ----------------------------------------------------------------- Hub access
def is_commit(revision):
    return bool(COMMIT_RE.match(revision or ""))


def base_headers(token):
    headers = {"User-Agent": USER_AGENT}
    if token:
        headers["Authorization"] = "Bearer " + token
    return headers


def lean_resolve(opts, timeout=10.0):
    """Commit of a branch/tag with one small stdlib GET; None if anything is unusual."""
    from ansible_collections.ct200.deploy.plugins.module_utils.hf_transfer_http import Connections, TransferError, get_json

    conns = Connections(timeout=timeout)
    try:
        data = get_json(conns, opts.revision_api_url(), base_headers(opts.token))
    except (TransferError, OSError, ValueError):
        return None
    finally:
        conns.close()
    sha = data.get("sha") if isinstance(data, dict) else None
    return sha if is_commit(sha) else None


class Hub(object):
    """Full path through huggingface_hub (imported here, lazily)."""

    def __init__(self, opts):
        from ansible_collections.ct200.deploy.plugins.module_utils import hf_hub

        self.opts = opts
        try:
            self.endpoint = hf_hub.configure(opts.endpoint)
        except RuntimeError:
            # huggingface_hub already imported in this process for another endpoint (tests):
            # every call below passes the endpoint explicitly, so that is harmless here.
            self.endpoint = opts.endpoint
        _set_api_timeout(opts.api_timeout)
        self.api = hf_hub.api(self.endpoint)
        self.token_arg = opts.token if opts.token else False

    def _call(self, what, fn, *args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except DownloadError:
            raise
        except Exception as exc:  # huggingface_hub / httpx2 errors: one verdict
            raise hub_error(self.opts, exc, what)

    def resolve(self, revision):
        info = self._call(
            "resolving revision %r" % revision,
            self.api.repo_info,
            self.opts.repo_id,
            revision=revision,
            repo_type=self.opts.repo_type,
            token=self.token_arg,
            timeout=self.opts.api_timeout,
        )
        sha = getattr(info, "sha", None)
        if not is_commit(sha):
            raise DownloadError(
                "the Hub returned no commit for %s@%s" % (self.opts.repo_id, revision),
                code="http_error",
                fix="check the endpoint is a Hugging Face Hub",
            )
        return sha

    def tree(self, commit):
        what = "listing files of %s@%s (commit %s)" % (self.opts.repo_id, self.opts.revision, commit[:12])

        def listing():
            files = {}
            masked = False
            items = self.api.list_repo_tree(
                self.opts.repo_id,
                recursive=True,
                revision=commit,
                repo_type=self.opts.repo_type,
                token=self.token_arg,
            )
            while True:
                try:
                    item = next(items)
                except StopIteration:
                    break
                except (KeyError, TypeError, ValueError, AttributeError) as exc:
                    # huggingface_hub builds RepoFile(**entry): a missing size/oid/lfs field is a KeyError
                    raise DownloadError(
                        "%s: the Hub's tree listing has an entry without the field %s; nothing was written"
                        % (what, exc), code="bad_listing", fix=hostile_fix(self.opts))
                if not hasattr(item, "blob_id") or not hasattr(item, "size"):
                    continue  # a folder
                lfs = getattr(item, "lfs", None)
                if lfs is not None:
                    oid = lfs.sha256 if hasattr(lfs, "sha256") else lfs.get("sha256")
                    size = lfs.size if hasattr(lfs, "size") else lfs.get("size")
                else:
                    oid, size = item.blob_id, item.size
                if isinstance(oid, str) and "*" in oid:
                    masked = True
                if item.path in files:  # "last wins" would pick one of two oids; the handed listing refuses it too
                    raise DownloadError(
                        "%s: the Hub's tree listing names %r twice; nothing was written" % (what, item.path),
                        code="bad_listing", fix=hostile_fix(self.opts))
                files[item.path] = tree_entry(size, oid, lfs is not None)
                if lfs is None and getattr(item, "xet_hash", None):
                    files[item.path]["xet_only"] = True  # refused by make_plan if selected
            return files, masked

        return self._call(what, listing)

    def auth_check(self):
        self._call(
            "checking access to %s" % self.opts.repo_id,
            self.api.auth_check,
            self.opts.repo_id,
            repo_type=self.opts.repo_type,
            token=self.token_arg,
        )

    def headers(self):
        from huggingface_hub.utils import build_hf_headers

        headers = build_hf_headers(token=self.token_arg, library_name="ct200-deploy", library_version="0.1.0")
        headers = dict((_canonical(k), v) for k, v in headers.items())
        return headers


def controller_meta(opts, want_listing):
    """(commit, listing or None, Hub API calls) of one repository, for the controller to resolve once
    and hand to every host: 1 call for a branch or tag, 0 for a 40-hex commit, +1 for the listing."""
    if is_commit(opts.revision) and not want_listing:
        return opts.revision, None, 0
    hub = Hub(opts)
    calls = 0
    commit = opts.revision
    if not is_commit(commit):
        calls += 1
        commit = hub.resolve(opts.revision)
    if not want_listing:
        return commit, None, calls
    calls += 1
    tree_files, masked = hub.tree(commit)
    if masked:
        raise DownloadError("the Hub hid the sha256 of %s's files: the token cannot read it" % opts.repo_id,
                            code="gated", fix="prove access first (hf_gated_access) and check the token")
    check_tree(opts, commit, tree_files)
    return commit, [dict(tree_files[path], path=path) for path in sorted(tree_files)], calls


def _canonical(name):
    return "-".join(part.capitalize() for part in name.split("-"))


def _set_api_timeout(timeout):
    """huggingface_hub 2.4 sends API calls with no timeout at all; give them one."""
    try:
        import httpx2
        from huggingface_hub.utils import _http

        def factory():
            client = _http.default_client_factory()
            client.timeout = httpx2.Timeout(timeout)
            return client

        _http.set_client_factory(factory)
    except Exception:  # a future huggingface_hub: keep its default
        pass


def error_context(opts):
    from ansible_collections.ct200.deploy.plugins.module_utils.hf_auth import fingerprint
    from ansible_collections.ct200.deploy.plugins.module_utils.hf_errors import Context

    return Context(
        repo_id=opts.repo_id,
        repo_type=opts.repo_type,
        endpoint=opts.endpoint,
        token_sent=bool(opts.token),
        token_source=opts.token_source,
        token_fingerprint=fingerprint(opts.token) if opts.token else None,
        secrets=(opts.token,) if opts.token else (),
    )


PROXY_AUTH_FIX = ("give the proxy's credentials in the proxy URL of the task's environment "
                  "(https_proxy/http_proxy=http://USER:PASSWORD@HOST:PORT, percent-encoded); huggingface_hub and the "
                  "byte engine both read these variables")


def hub_error(opts, exc, what):
    from ansible_collections.ct200.deploy.plugins.module_utils.hf_errors import classify

    if getattr(getattr(exc, "response", None), "status_code", None) == 407:  # the proxy, not the Hub
        return DownloadError("%s: the proxy refused the request (407 Proxy Authentication Required); the proxy URL "
                             "carries no or wrong credentials" % what, code="proxy_auth", fix=PROXY_AUTH_FIX)

    verdict = classify(exc, error_context(opts))
    return DownloadError("%s: %s" % (what, verdict.message), code=verdict.code, fix=verdict.fix)


# --------------------------------------------------------------------- progress
class ProgressWriter(object):
    """Writes the progress JSON the role polls (atomically, at most every ``interval``)."""

    def __init__(self, opts, plan, started):
        self.opts = opts
        self.plan = plan
        self.started = started
        self.path = opts.progress_file
        self.samples = []  # (monotonic, bytes_fetched)
        self.lock = threading.Lock()

    def snapshot(self, state, stats=None, error=None):
        now = time.monotonic()
        fetched = stats.bytes_fetched if stats else 0
        resumed = self.plan.bytes_partial if self.plan else 0
        present = self.plan.bytes_present if self.plan else 0
        total = self.plan.bytes_total if self.plan else 0
        to_fetch = self.plan.bytes_to_fetch if self.plan else 0
        with self.lock:
            self.samples.append((now, fetched))
            while len(self.samples) > 2 and now - self.samples[0][0] > 10.0:
                self.samples.pop(0)
            t0, b0 = self.samples[0]
        rate = (fetched - b0) / (now - t0) if now - t0 > 0.2 else 0.0
        elapsed = now - self.started
        if rate <= 0 and elapsed > 0 and fetched:
            rate = fetched / elapsed
        left = max(0, to_fetch - fetched)
        files_to_fetch = len(self.plan.to_fetch) if self.plan else 0
        files_done = stats.files_done if stats else 0
        return {
            "pid": os.getpid(),
            "state": state,
            "repo_id": self.opts.repo_id,
            "revision": self.opts.revision,
            "commit": self.plan.commit if self.plan else None,
            "local_dir": self.opts.local_dir,
            "bytes_total": total,
            "bytes_done": min(total, present + resumed + fetched),
            "bytes_to_fetch": to_fetch,
            "bytes_fetched": fetched,
            "files_total": len(self.plan.files) if self.plan else 0,
            "files_done": (len(self.plan.files) - files_to_fetch + files_done) if self.plan else 0,
            "files_to_fetch": files_to_fetch,
            "rate": round(rate, 1),
            "eta_seconds": round(left / rate, 1) if rate > 0 else None,
            "elapsed": round(elapsed, 1),
            "retries": stats.retries if stats else 0,
            "rate_limit_wait_s": round(stats.rate_limit_wait, 1) if stats else 0.0,
            "updated": time.time(),
            "error": error,
        }

    def write(self, state, stats=None, error=None):
        """Replace the progress file atomically (through _io, never following a symlink).

        The file is 0644 and weight_peer's nginx serves it to the site: ``error`` is a code (hf_errors'
        vocabulary or a local one), never text an upstream could have put in it (record_error keeps that).
        When the disk is full the atomic replace cannot get a block for its temp file; the
        file is then rewritten in place, which reuses its own blocks, so a run that failed on
        ENOSPC still says ``failed``.
        """
        data = scrub(self.snapshot(state, stats, error), secrets_of(self.opts))
        body = json.dumps(data).encode("utf-8")
        root = self.opts.local_dir if _is_under(self.path, self.opts.local_dir) else None
        try:
            atomic_write(self.path, body, mode=0o644, root=root, create_dirs=True)
        except OSError as exc:
            if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
                raise
            fd = open_nofollow(self.path, os.O_WRONLY, root=root)
            try:
                os.ftruncate(fd, 0)
                os.pwrite(fd, body, 0)
            finally:
                os.close(fd)
        return data


def secrets_of(opts):
    """What of ``opts`` must never be printed or written: the token and any URL credentials of the endpoint."""
    return [s for s in [opts.token] + url_credentials(opts.endpoint) if s]


def record_error(local_dir, code, message, fix="", secrets=()):
    """The failure's words, redacted, in ``<local_dir>/.ct200/error.json``: 0600 (the owner only) and under a
    dot path, which weight_peer's nginx never serves.  The progress file (0644, served) carries only ``code``."""
    doc = scrub({"state": "failed", "code": code, "message": message, "fix": fix, "updated": time.time()}, secrets)
    atomic_write(os.path.join(hf_manifest.state_dir(local_dir), ERROR_NAME), json.dumps(doc), mode=0o600,
                 root=local_dir, create_dirs=True)


def _is_under(path, root):
    return os.path.commonpath([os.path.abspath(path), root]) == root and os.path.abspath(path) != root


# ------------------------------------------------------------------ local state
class DirLock(object):
    """flock on <local_dir>/.ct200/lock, taken before anything is read or planned: one
    hf_download per local_dir at a time.  ``timeout`` seconds to wait for another run (0: fail
    at once).  Directories it had to create are removed again by :meth:`release` when a
    failed run left them empty."""

    def __init__(self, local_dir, timeout=0.0, clock=time.monotonic, sleep=time.sleep):
        self.local_dir = local_dir
        self.path = os.path.join(hf_manifest.state_dir(local_dir), LOCK_NAME)
        self.timeout = timeout
        self.clock = clock
        self.sleep = sleep
        self.fd = None
        self.created = []

    def acquire(self):
        if not os.path.isdir(self.local_dir):
            missing = []
            parent = self.local_dir
            while not os.path.lexists(parent):
                missing.append(parent)
                parent = os.path.dirname(parent)
            os.makedirs(self.local_dir, 0o755, exist_ok=True)
            self.created = missing  # deepest first
        if not os.path.lexists(hf_manifest.state_dir(self.local_dir)):
            self.created.insert(0, hf_manifest.state_dir(self.local_dir))
        deadline = self.clock() + max(0.0, float(self.timeout or 0))
        while True:
            fd = open_nofollow(self.path, os.O_RDWR | os.O_CREAT, 0o644, root=self.local_dir, create_dirs=True)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(fd)
                if self.clock() >= deadline:
                    raise DownloadError(
                        "another hf_download is writing to %s%s" % (
                            self.local_dir, " (waited %g s)" % self.timeout if self.timeout else ""),
                        code="busy",
                        fix="wait for it to finish (see %s), stop it, or set lock_timeout to wait for it"
                            % os.path.join(hf_manifest.state_dir(self.local_dir), PROGRESS_NAME),
                    )
                self.sleep(LOCK_POLL)
                continue
            if self._still_linked(fd):
                self.fd = fd
                return self
            os.close(fd)  # the holder removed the lock file on its way out: lock the new one

    def _still_linked(self, fd):
        st = hf_manifest.lstat_under(self.local_dir, os.path.join(hf_manifest.STATE_DIR, LOCK_NAME))
        return st is not None and st.st_ino == os.fstat(fd).st_ino

    def release(self, failed=False):
        if self.fd is None:
            return
        try:
            if failed and self.created:
                self._remove_created()
        finally:
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
            self.fd = None

    def _remove_created(self):
        """A run that failed on a directory it created leaves nothing behind (rmdir: only if empty)."""
        from ansible_collections.ct200.deploy.plugins.module_utils._io import safe_remove

        try:
            safe_remove(self.path, root=self.local_dir)
        except OSError:
            return
        for directory in self.created:
            try:
                os.rmdir(directory)
            except OSError:
                return

    def __enter__(self):
        return self.acquire()

    def __exit__(self, exc_type, *exc):
        self.release(failed=exc_type is not None)


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


# ---------------------------------------------------------------------- the run
def _diff(plan, local_dir):
    before, after = [], []
    for pf in plan.to_fetch:
        before.append("%s: %s" % (pf.path, pf.reason or "missing"))
        after.append("%s: %d bytes, %s %s" % (pf.path, pf.size, "sha256" if pf.lfs else "git-sha1", pf.oid))
    return {
        "before_header": "%s (before)" % local_dir,
        "after_header": "%s @ %s" % (local_dir, plan.commit),
        "before": "\n".join(before) + ("\n" if before else ""),
        "after": "\n".join(after) + ("\n" if after else ""),
    }


def _result(opts, plan, started, changed, planning, network_calls, **extra):
    res = {
        "changed": changed,
        "repo_id": opts.repo_id,
        "repo_type": opts.repo_type,
        "revision": opts.revision,
        "commit": plan.commit,
        "local_dir": opts.local_dir,
        "root_dir": opts.root_dir or (os.path.dirname(os.path.dirname(opts.local_dir)) if is_snapshot(opts.local_dir) else None),
        "files": len(plan.files),
        "bytes_total": plan.bytes_total,
        "bytes_downloaded": 0,
        "bytes_resumed": 0,
        "bytes_skipped": plan.bytes_present,
        "files_downloaded": 0,
        "files_skipped": len(plan.files) - len(plan.to_fetch),
        "files_hashed": plan.hashed,
        "files_refreshed": len(plan.by_action("refresh")),
        "files_adopted": len(plan.by_action("adopt")),
        "seconds": round(time.monotonic() - started, 3),
        "mean_rate": 0.0,
        "planning": planning,
        "network_calls": network_calls,
        "verify": opts.verify,
        "token_source": opts.token_source,
        "progress_file": opts.progress_file,
    }
    res.update(extra)
    return res


def run(opts, clock=time.monotonic):
    """Execute one download.  Returns the module result dict; raises DownloadError.

    The local_dir lock is taken before the manifest is read or anything is planned (check
    mode takes none and writes nothing): a second run on the same directory waits
    (``lock_timeout``) or fails, and never acts on a plan made while another run was writing.
    """
    started = clock()
    opts.validate()
    lock = None
    try:
        try:
            if opts.layout == "snapshots" and opts.root_dir is None:
                opts.resolved = resolve_for_snapshot(opts)
                opts.use_snapshot(opts.resolved[0])
            if not opts.check_mode:
                lock = DirLock(opts.local_dir, opts.lock_timeout).acquire()
            return _run_locked(opts, clock, started)
        except UnsafePathError as exc:
            raise DownloadError(str(exc), code="unsafe_path",
                                fix="hf_download follows no symlink it did not create under local_dir %s; remove "
                                    "it and run again" % opts.local_dir) from None
        except OSError as exc:
            raise local_error(opts, exc) from None
    except BaseException:
        if lock is not None:
            lock.release(failed=True)
            lock = None
        raise
    finally:
        if lock is not None:
            lock.release()


def resolve_for_snapshot(opts):
    """(commit, network calls) of ``opts.revision`` before the snapshot directory is chosen."""
    if is_commit(opts.revision):
        return opts.revision, 0
    if opts.offline:
        raise DownloadError(
            "HF_HUB_OFFLINE is set and revision %r of %s is not a commit: with layout snapshots the directory is "
            "chosen by the commit" % (opts.revision, opts.repo_id), code="offline",
            fix="pin revision to the 40-hex commit of the snapshot already downloaded, or unset HF_HUB_OFFLINE")
    commit = None if opts.verify == "full" else lean_resolve(opts, timeout=min(opts.api_timeout, 30.0))
    if commit is not None:
        return commit, 1
    return Hub(opts).resolve(opts.revision), 2 if opts.verify != "full" else 1


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


def _run_locked(opts, clock, started):
    manifest = hf_manifest.Manifest.load(opts.local_dir)
    warnings = [manifest.warning] if manifest.warning else []
    manifest.bind_repo(opts.repo_id, opts.repo_type)
    network_calls = 0

    # 1. fast path: answer from the manifest alone ------------------------------
    commit = None
    if opts.resolved is not None:  # layout=snapshots resolved it to pick the directory
        commit, calls = opts.resolved
        network_calls += calls
    elif is_commit(opts.revision):
        commit = opts.revision
    elif opts.offline:
        commit = manifest.data.get("refs", {}).get(opts.revision)
    elif manifest.tree is not None and opts.verify != "full":
        network_calls += 1
        commit = lean_resolve(opts, timeout=min(opts.api_timeout, 30.0))
    cached_tree = manifest.tree_for(commit) if commit else None
    if cached_tree is not None and opts.verify != "full":
        plan = make_plan(opts, commit, cached_tree, manifest,
                         source="the tree cached in %s" % hf_manifest.manifest_path(opts.local_dir))
        if not plan.to_fetch and not plan.to_link:
            return _finish_noop(opts, plan, manifest, started, network_calls, warnings, "manifest")
    if opts.offline:
        raise DownloadError(
            "HF_HUB_OFFLINE is set and %s@%s is not complete in %s" % (opts.repo_id, opts.revision, opts.local_dir),
            code="offline",
            fix="unset HF_HUB_OFFLINE for this task, or pin revision to the commit already downloaded",
        )

    # 2. full path through huggingface_hub -------------------------------------
    t_hub = clock()
    hub = Hub(opts)
    t_import = clock()
    if commit is None:
        network_calls += 1
        commit = hub.resolve(opts.revision)
    tree_files = manifest.tree_for(commit)
    source = "the Hub's tree listing"
    if opts.listing is not None:
        tree_files, source = handed_tree(opts.listing), HANDED_LISTING
    elif tree_files is None:
        network_calls += 1
        tree_files, masked = hub.tree(commit)
        if masked:
            network_calls += 1
            hub.auth_check()  # raises the gated verdict
            raise DownloadError(
                "the Hub hid the sha256 of %s's files although access was granted" % opts.repo_id,
                code="http_error",
                fix="re-run; if it persists, check the token's permissions",
            )
    manifest.set_tree(commit, tree_files)
    manifest.set_ref(opts.revision, commit)
    if not tree_files:
        raise DownloadError(
            "%s@%s has no files" % (opts.repo_id, commit), code="entry_not_found", fix="check repo_id and revision"
        )
    plan = make_plan(opts, commit, tree_files, manifest, source=source)
    selected_count = len(plan.files)
    if selected_count == 0:
        raise DownloadError(
            "allow_patterns/ignore_patterns select none of the %d files of %s@%s" % (len(tree_files), opts.repo_id, commit[:12]),
            code="entry_not_found",
            fix="check the patterns (fnmatch, '*' crosses '/'); unmatched allow patterns: %s"
            % (", ".join(plan.unmatched) or "none"),
        )
    if plan.unmatched:
        warnings.append("allow_patterns matched nothing: %s" % ", ".join(plan.unmatched))

    # partial files that can be resumed
    from ansible_collections.ct200.deploy.plugins.module_utils import hf_transfer_engine as engine_mod

    for pf in plan.to_fetch:
        pf.partial, _segments = engine_mod.read_partial(opts.local_dir, pf.path, pf.oid, pf.size)
    for pf in plan.to_fetch + plan.to_link:
        pf.url = opts.resolve_url(commit, pf.path)

    # 3. disk preflight (before any byte moves): only the new bytes, beside the kept snapshots ------
    disk = disk_check(opts, plan, commit)

    if not plan.to_fetch and not plan.to_link:
        return _finish_noop(opts, plan, manifest, started, network_calls, warnings, "hub", disk=disk)

    # 4. access before bytes (a gated repo lists its tree anonymously); a handed listing
    # comes from the controller, which proved access once for the whole fleet --------
    if opts.listing is None and plan.to_fetch:
        network_calls += 1
        hub.auth_check()

    if opts.check_mode:
        res = _result(
            opts,
            plan,
            started,
            True,
            "hub",
            network_calls,
            bytes_to_download=plan.bytes_to_fetch,
            files_to_download=len(plan.to_fetch),
            would_download=[pf.as_dict() for pf in plan.to_fetch],
            bytes_to_link=plan.bytes_to_link,
            files_to_link=len(plan.to_link),
            would_link=[dict(pf.as_dict(), source=pf.link_from[0].path) for pf in plan.to_link][:200],
            disk=disk,
            warnings=warnings,
        )
        if opts.diff:
            res["diff"] = _diff(plan, opts.local_dir)
        return res

    t_plan = clock()

    # 5. fetch -------------------------------------------------------------------
    from ansible_collections.ct200.deploy.plugins.module_utils.hf_transfer_http import HUB_ORIGINS, origin_of

    headers = hub.headers()
    allowed = set(HUB_ORIGINS) | {origin_of(opts.endpoint)}
    removed = clean_temp(opts, set(engine_mod.part_key(pf.path, pf.oid) for pf in plan.to_fetch))
    bytes_linked = link_reused(opts, plan, manifest, commit, warnings)
    files_linked = len(plan.to_link)  # what could not be linked went back to fetch
    manifest.save(fsync=opts.fsync)
    progress = ProgressWriter(opts, plan, clock())
    progress.write("running")
    eng = engine_mod.Engine(
        opts.local_dir,
        plan.to_fetch,
        headers,
        allowed,
        manifest,
        commit,
        max_workers=opts.max_workers,
        verify=opts.verify,
        stall_timeout=opts.stall_timeout,
        retries=opts.retries,
        split_min=opts.split_min,
        backoff_max=opts.backoff_max,
        fsync=opts.fsync,
        direct_io=opts.direct_io,
        on_progress=lambda e: progress.write("running", e.stats),
        progress_interval=opts.progress_interval,
        read_only=is_snapshot(opts.local_dir),
    )
    fetch_started = clock()
    try:
        stats = eng.run()
    except engine_mod.FetchFailed as exc:
        error = fetch_error(opts, exc, eng.stats)
        _mark_failed(progress, eng.stats, error.code, error.message, warnings, fix=error.fix)
        raise error
    except BaseException as exc:
        _mark_failed(progress, eng.stats, "interrupted" if isinstance(exc, (KeyboardInterrupt, SystemExit))
                     else "internal_error", "%s: %s" % (type(exc).__name__, exc), warnings)
        raise
    fetch_seconds = max(clock() - fetch_started, 1e-6)
    t_fetched = clock()
    mark_complete(opts, manifest, commit, warnings)
    engine_mod.remove_tmp_dir(opts.local_dir)
    progress.write("done", stats)
    if eng.warnings:
        warnings.extend(eng.warnings)
    res = _result(
        opts,
        plan,
        started,
        True,
        "hub",
        network_calls,
        bytes_downloaded=stats.bytes_fetched,
        bytes_resumed=plan.bytes_partial,
        files_downloaded=len(stats.downloaded),
        downloaded=sorted(stats.downloaded)[:200],
        files_linked=files_linked,
        bytes_linked=bytes_linked,
        mean_rate=round(stats.bytes_fetched / fetch_seconds, 1),
        retries=stats.retries,
        retry_causes=dict(stats.retry_causes),
        rate_limit_wait_s=round(stats.rate_limit_wait, 1),
        reresolves=stats.reresolves,
        stalls=stats.stalls,
        refetched=sorted(set(stats.refetched)),
        removed_temp_files=removed,
        disk=disk,
        warnings=warnings,
        timings={
            "manifest_check": round(t_hub - started, 3),
            "import_huggingface_hub": round(t_import - t_hub, 3),
            "plan": round(t_plan - t_import, 3),
            "prepare": round(fetch_started - t_plan, 3),
            "fetch": round(fetch_seconds, 3),
            "finish": round(clock() - t_fetched, 3),
        },
    )
    if opts.diff:
        res["diff"] = _diff(plan, opts.local_dir)
    return res


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


def _mark_failed(progress, stats, code, message, warnings, fix=""):
    """Record the failure without masking the error that caused it: its code in the progress file (which the
    site may read), its words in the owner-only error file (record_error)."""
    try:
        record_error(progress.opts.local_dir, code, message, fix, secrets_of(progress.opts))
    except Exception as exc:  # the original error is what the operator needs; this one is a footnote
        warnings.append("could not record the failure in %s: %s" % (hf_manifest.state_dir(progress.opts.local_dir), exc))
    try:
        progress.write("failed", stats, error=code)
    except Exception as exc:
        warnings.append("could not mark %s failed: %s" % (progress.path, exc))


def fetch_error(opts, exc, stats):
    cause = getattr(exc, "cause", None)
    details = {"bytes_downloaded": stats.bytes_fetched, "files_downloaded": len(stats.downloaded), "path": exc.path}
    if is_local_write_error(cause):
        return local_error(opts, cause, path=exc.path, details=details)
    if isinstance(cause, UnsafePathError):
        return DownloadError("%s; nothing was written there" % cause, code="unsafe_path",
                             fix="hf_download follows no symlink it did not create under local_dir %s: remove it "
                                 "and re-run the task" % opts.local_dir, details=details)
    if type(cause).__name__ == "ProxyRefused":
        return DownloadError("download of %s stopped: %s" % (opts.repo_id, exc), code="proxy_auth",
                             fix=PROXY_AUTH_FIX, details=details)
    if cause is not None and getattr(cause, "response", None) is not None and cause.status in (401, 403, 404):
        from ansible_collections.ct200.deploy.plugins.module_utils.hf_errors import classify

        verdict = classify(cause, error_context(opts))
        return DownloadError("%s: %s (%s)" % (exc.path, verdict.message, exc), code=verdict.code, fix=verdict.fix, details=details)
    return DownloadError(
        "download of %s stopped: %s; completed files are kept and partial files resume on the next run"
        % (opts.repo_id, exc),
        code="transfer_failed",
        fix="re-run the task (it resumes); if the cause persists check the network path to the Hub/CDN",
        details=details,
    )


def _finish_noop(opts, plan, manifest, started, network_calls, warnings, planning, disk=None):
    if not opts.check_mode and is_snapshot(opts.local_dir):
        manifest.mark_complete(plan.commit)
    if manifest.dirty and not opts.check_mode:  # the caller holds the local_dir lock
        try:
            manifest.save(fsync=opts.fsync)
        except OSError as exc:
            warnings.append("could not update the manifest (files are hashed again next run): %s" % exc)
    res = _result(opts, plan, started, False, planning, network_calls, warnings=warnings)
    if disk is not None:
        res["disk"] = disk
    if opts.check_mode:
        res.update(bytes_to_download=0, files_to_download=0, would_download=[], bytes_to_link=0, files_to_link=0,
                   would_link=[])
    return res
