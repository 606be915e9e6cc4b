# -*- coding: utf-8 -*-
# Copyright: ct200-deploy developers
# Apache-2.0
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

import fcntl
import hashlib
import json
import os
import re
import threading
import time
import urllib.parse

from ansible_collections.ct200.deploy.plugins.module_utils import disk_preflight, hf_manifest
from ansible_collections.ct200.deploy.plugins.module_utils.hf_hub import select_paths, unmatched_patterns

# hf_transfer_http (http.client, ssl, urllib.request) and hf_transfer_engine are
# imported where they are used: a commit-pinned no-op re-run needs neither.

DEFAULT_ENDPOINT = "https://huggingface.co"
COMMIT_RE = re.compile(r"^[0-9a-f]{40}$")
REPO_TYPES = ("model", "dataset", "space")
VERIFY_MODES = ("size", "sha256", "full")
USER_AGENT = "ct200-deploy/0.1.0 (hf_download)"
PROGRESS_NAME = "progress.json"
LOCK_NAME = "lock"
HASH_BLOCK = 8 << 20


class DownloadError(Exception):
    """Operator-facing failure: ``code`` (hf_errors vocabulary or local), ``message`` and ``fix``."""

    def __init__(self, message, code="error", fix="", details=None):
        super().__init__(message)
        self.code = code
        self.message = message
        self.fix = fix
        self.details = details or {}


class Options(object):
    """Validated inputs of one download (the module's parameters, token already resolved)."""

    def __init__(
        self,
        repo_id,
        local_dir,
        revision="main",
        repo_type="model",
        allow_patterns=None,
        ignore_patterns=None,
        token=None,
        token_source=None,
        endpoint=None,
        max_workers=8,
        min_free_bytes=10 * 10**9,
        verify="sha256",
        stall_timeout=60.0,
        retries=5,
        progress_file=None,
        progress_interval=1.0,
        api_timeout=30.0,
        split_min=64 << 20,
        fsync=False,
        direct_io=True,
        backoff_max=30.0,
        check_mode=False,
        diff=False,
        offline=None,
    ):
        self.repo_id = repo_id
        self.local_dir = os.path.abspath(local_dir)
        self.revision = revision or "main"
        self.repo_type = repo_type or "model"
        self.allow_patterns = list(allow_patterns) if allow_patterns else None
        self.ignore_patterns = list(ignore_patterns) if ignore_patterns else None
        self.token = token
        self.token_source = token_source
        self.endpoint = (endpoint or os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")
        self.max_workers = max_workers
        self.min_free_bytes = min_free_bytes
        self.verify = verify
        self.stall_timeout = stall_timeout
        self.retries = retries
        self.progress_file = progress_file or os.path.join(hf_manifest.state_dir(self.local_dir), PROGRESS_NAME)
        self.progress_interval = progress_interval
        self.api_timeout = api_timeout
        self.split_min = split_min
        self.fsync = fsync
        self.direct_io = direct_io
        self.backoff_max = backoff_max
        self.check_mode = check_mode
        self.diff = diff
        if offline is None:
            offline = os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")
        self.offline = offline

    def validate(self):
        problems = []
        if not isinstance(self.repo_id, str) or not re.match(r"^[A-Za-z0-9][\w.\-]*(/[\w.\-]+)?$", self.repo_id or ""):
            problems.append("repo_id %r is not of the form 'org/name'" % (self.repo_id,))
        if self.repo_type not in REPO_TYPES:
            problems.append("repo_type must be one of %s" % ", ".join(REPO_TYPES))
        if self.verify not in VERIFY_MODES:
            problems.append("verify must be one of %s" % ", ".join(VERIFY_MODES))
        if not isinstance(self.max_workers, int) or not 1 <= self.max_workers <= 64:
            problems.append("max_workers must be between 1 and 64")
        if not isinstance(self.retries, int) or not 0 <= self.retries <= 100:
            problems.append("retries must be between 0 and 100")
        if not self.stall_timeout or self.stall_timeout <= 0:
            problems.append("stall_timeout must be a positive number of seconds")
        if self.local_dir in ("/", ""):
            problems.append("local_dir must not be /")
        if os.path.exists(self.local_dir) and not os.path.isdir(self.local_dir):
            problems.append("local_dir %s exists and is not a directory" % self.local_dir)
        parts = urllib.parse.urlsplit(self.endpoint)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            problems.append("endpoint %r is not an http(s) URL" % self.endpoint)
        if problems:
            raise DownloadError(
                "invalid arguments: " + "; ".join(problems),
                code="bad_argument",
                fix="correct the options named above; nothing was changed",
            )

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
    __slots__ = ("path", "size", "oid", "lfs", "url", "action", "reason", "existing", "partial")

    def __init__(self, path, size, oid, lfs):
        self.path = path
        self.size = size
        self.oid = oid
        self.lfs = lfs
        self.url = None
        self.action = None  # present | refresh | adopt | fetch
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

    def by_action(self, *actions):
        return [f for f in self.files if f.action in actions]

    @property
    def to_fetch(self):
        return self.by_action("fetch")

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


def select(tree_files, allow_patterns, ignore_patterns):
    """Selected paths (huggingface_hub's fnmatch semantics) and allow patterns that matched nothing."""
    paths = sorted(tree_files)
    selected = list(select_paths(paths, allow_patterns, ignore_patterns))
    return selected, unmatched_patterns(paths, allow_patterns)


def hash_file(path, size, lfs):
    """(sha256 hex, git blob sha1 hex or None) of a local file, streamed in 8 MiB blocks."""
    sha256 = hashlib.sha256()
    sha1 = None if lfs else hashlib.sha1(b"blob %d\0" % size)
    buf = bytearray(HASH_BLOCK)
    mv = memoryview(buf)
    with open(path, "rb", buffering=0) as handle:
        while True:
            n = handle.readinto(mv)
            if not n:
                break
            sha256.update(mv[:n])
            if sha1 is not None:
                sha1.update(mv[:n])
    return sha256.hexdigest(), (sha1.hexdigest() if sha1 is not None else None)


def make_plan(opts, commit, tree_files, manifest, hash_workers=None):
    """Compare the selected tree entries with the disk and the manifest.

    Only local work: one ``stat`` per file, a 1 MiB sample read for files whose
    timestamp changed, and a full hash for files the manifest does not vouch
    for (or every file with verify=full).  Records verified files in
    ``manifest`` (in memory).
    """
    selected, unmatched = select(tree_files, opts.allow_patterns, opts.ignore_patterns)
    files = []
    to_hash = []
    checked = []
    for path in selected:
        info = tree_files[path]
        pf = PlanFile(path, info["size"], info["oid"], info["lfs"])
        if not isinstance(pf.size, int) or pf.size < 0:
            raise DownloadError(
                "the Hub listed no size for %s at %s; an unknown size cannot be checked against free disk space"
                % (path, commit),
                code="unknown_size",
                fix="retry later; if it persists the Hub listing is broken for this file",
            )
        files.append(pf)
        checked.append((pf, manifest.stat_check(path, pf.oid, pf.size)))
    touched = [(os.path.join(manifest.local_dir, pf.path), pf.size) for pf, (outcome, _st) in checked
               if outcome == hf_manifest.TOUCHED and opts.verify == "sha256"]
    if len(touched) > 1:
        hf_manifest.prefetch_samples(touched)
    for pf, (outcome, st) in checked:
        path = pf.path
        if outcome == hf_manifest.MISSING:
            pf.action, pf.reason = "fetch", "missing"
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
                pf.action, pf.reason = "refresh", "timestamp changed"
                manifest.record(path, pf.size, st.st_mtime_ns, entry.get("sha256"), pf.oid, entry.get("commit"), entry.get("sample"))
            elif opts.verify == "sha256" and entry.get("sample") and _sample(manifest, path, pf.size) == entry["sample"]:
                pf.action, pf.reason = "refresh", "timestamp changed, sampled blocks unchanged"
                manifest.record(path, pf.size, st.st_mtime_ns, entry.get("sha256"), pf.oid, entry.get("commit"), entry["sample"])
            else:
                to_hash.append((pf, st))
        else:  # UNKNOWN: present with the right size, not vouched for by the manifest
            if opts.verify == "size":
                pf.action, pf.reason = "adopt", "size matches (verify=size)"
                sample = _sample(manifest, path, pf.size)
                manifest.record(path, pf.size, st.st_mtime_ns, None, pf.oid, commit, sample)
            else:
                to_hash.append((pf, st))
    plan = Plan(commit, files, unmatched)
    if to_hash:
        _hash_present(opts, plan, to_hash, manifest, commit, hash_workers)
    return plan


def _sample(manifest, path, size):
    try:
        return hf_manifest.sample_digest(os.path.join(manifest.local_dir, path), size)
    except OSError:
        return None


def _hash_present(opts, plan, to_hash, manifest, commit, hash_workers):
    import concurrent.futures

    workers = hash_workers or min(4, max(1, os.cpu_count() or 1), len(to_hash))

    def work(item):
        pf, st = item
        full = os.path.join(manifest.local_dir, pf.path)
        sha256, sha1 = hash_file(full, pf.size, pf.lfs)
        return pf, st, sha256, sha1

    with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
        for pf, st, sha256, sha1 in pool.map(work, to_hash):
            plan.hashed += 1
            plan.hashed_bytes += pf.size
            got = sha256 if pf.lfs else sha1
            if got == pf.oid:
                pf.action = "present" if manifest.entry(pf.path) and manifest.entry(pf.path).get("sha256") == sha256 else "adopt"
                pf.reason = "verified by hashing"
                manifest.record(pf.path, pf.size, st.st_mtime_ns, sha256, pf.oid, commit, _sample(manifest, pf.path, pf.size))
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
        def listing():
            files = {}
            masked = False
            for item in self.api.list_repo_tree(
                self.opts.repo_id,
                recursive=True,
                revision=commit,
                repo_type=self.opts.repo_type,
                token=self.token_arg,
            ):
                if not hasattr(item, "blob_id") or not hasattr(item, "size"):
                    continue  # a folder
                lfs = getattr(item, "lfs", None)
                if lfs is not None:
                    oid = lfs.sha256 if hasattr(lfs, "sha256") else lfs["sha256"]
                    size = lfs.size if hasattr(lfs, "size") else lfs["size"]
                else:
                    oid, size = item.blob_id, item.size
                if oid and "*" in oid:
                    masked = True
                files[item.path] = tree_entry(size, oid, lfs is not None)
            return files, masked

        return self._call("listing files of %s@%s" % (self.opts.repo_id, commit[:12]), listing)

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
    )


def hub_error(opts, exc, what):
    from ansible_collections.ct200.deploy.plugins.module_utils.hf_errors import classify

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
            "updated": time.time(),
            "error": error,
        }

    def write(self, state, stats=None, error=None):
        data = self.snapshot(state, stats, error)
        directory = os.path.dirname(self.path)
        try:
            os.makedirs(directory, exist_ok=True)
            tmp = "%s.%d.tmp" % (self.path, os.getpid())
            with open(tmp, "w") as handle:
                json.dump(data, handle)
            os.replace(tmp, self.path)
        except OSError:
            pass
        return data


# ------------------------------------------------------------------ local state
class DirLock(object):
    """flock on <local_dir>/.ct200/lock: one download per local_dir at a time."""

    def __init__(self, local_dir):
        self.path = os.path.join(hf_manifest.state_dir(local_dir), LOCK_NAME)
        self.fd = None

    def __enter__(self):
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(self.fd)
            self.fd = None
            raise DownloadError(
                "another hf_download is writing to %s" % os.path.dirname(os.path.dirname(self.path)),
                code="busy",
                fix="wait for it to finish (see %s) or stop it" % PROGRESS_NAME,
            )
        return self

    def __exit__(self, *exc):
        if self.fd is not None:
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
            self.fd = None


def clean_temp(opts, keep_keys):
    """Remove temp files no current plan can use: our stale partials, manifest temp files,
    and huggingface_hub's orphaned ``*.incomplete`` files in ``local_dir/.cache/huggingface``."""
    from ansible_collections.ct200.deploy.plugins.module_utils.hf_transfer_engine import tmp_dir

    removed = []
    tdir = tmp_dir(opts.local_dir)
    if os.path.isdir(tdir):
        for name in os.listdir(tdir):
            key = name.rsplit(".", 1)[0] if name.endswith((".part", ".state")) else None
            if key is None and name.endswith(".tmp"):
                key = name.split(".state.tmp")[0] if ".state.tmp" in name else None
            if key in keep_keys:
                continue
            _unlink(os.path.join(tdir, name), removed)
    sdir = hf_manifest.state_dir(opts.local_dir)
    if os.path.isdir(sdir):
        for name in os.listdir(sdir):
            if name.startswith(".manifest.") and name.endswith(".tmp"):
                _unlink(os.path.join(sdir, name), removed)
    hf_dir = os.path.join(opts.local_dir, ".cache", "huggingface", "download")
    if os.path.isdir(hf_dir):
        for root, _dirs, names in os.walk(hf_dir):
            for name in names:
                if name.endswith(".incomplete"):
                    _unlink(os.path.join(root, name), removed)
    return [os.path.relpath(p, opts.local_dir) for p in removed]


def _unlink(path, removed):
    try:
        if os.path.isdir(path) and not os.path.islink(path):
            import shutil

            shutil.rmtree(path)
        else:
            os.unlink(path)
        removed.append(path)
    except FileNotFoundError:
        pass


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
    """Execute one download.  Returns the module result dict; raises DownloadError."""
    started = clock()
    opts.validate()
    manifest = hf_manifest.Manifest.load(opts.local_dir)
    warnings = [manifest.warning] if manifest.warning else []
    manifest.bind_repo(opts.repo_id, opts.repo_type)
    network_calls = 0

    # 1. fast path: answer from the manifest alone ------------------------------
    commit = None
    if is_commit(opts.revision):
        commit = opts.revision
    elif opts.offline:
        commit = manifest.data.get("refs", {}).get(opts.revision)
    elif manifest.tree is not None and opts.verify != "full":
        network_calls += 1
        commit = lean_resolve(opts, timeout=min(opts.api_timeout, 30.0))
    cached_tree = manifest.tree_for(commit) if commit else None
    if cached_tree is not None and opts.verify != "full":
        plan = make_plan(opts, commit, cached_tree, manifest)
        if not plan.to_fetch:
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
    if tree_files is None:
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
    plan = make_plan(opts, commit, tree_files, manifest)
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
        pf.url = opts.resolve_url(commit, pf.path)

    # 3. disk preflight (before any byte moves) ---------------------------------
    try:
        checks = disk_preflight.check_requirements(
            [("%s@%s" % (opts.repo_id, commit[:12]), opts.local_dir, plan.disk_needed)], opts.min_free_bytes
        )
    except disk_preflight.DiskSpaceError as exc:
        raise DownloadError(
            "not enough disk space for %s: %s" % (opts.repo_id, exc),
            code="disk_full",
            fix="free space on that filesystem, pick a larger local_dir, or lower min_free_bytes",
            details={"disk": [c.as_dict() for c in exc.checks], "bytes_to_download": plan.bytes_to_fetch},
        )
    disk = checks[0].as_dict()

    if not plan.to_fetch:
        return _finish_noop(opts, plan, manifest, started, network_calls, warnings, "hub", disk=disk)

    # 4. access before bytes (a gated repo lists its tree anonymously) -----------
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
    with DirLock(opts.local_dir):
        removed = clean_temp(opts, set(engine_mod.part_key(pf.path, pf.oid) for pf in plan.to_fetch))
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
        )
        fetch_started = clock()
        try:
            stats = eng.run()
        except engine_mod.FetchFailed as exc:
            progress.write("failed", eng.stats, error=str(exc))
            raise fetch_error(opts, exc, eng.stats)
        except BaseException as exc:
            progress.write("failed", eng.stats, error="%s: %s" % (type(exc).__name__, exc))
            raise
        fetch_seconds = max(clock() - fetch_started, 1e-6)
        t_fetched = clock()
        try:
            os.rmdir(engine_mod.tmp_dir(opts.local_dir))
        except OSError:
            pass
        progress.write("done", stats)
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
        mean_rate=round(stats.bytes_fetched / fetch_seconds, 1),
        retries=stats.retries,
        retry_causes=dict(stats.retry_causes),
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


def fetch_error(opts, exc, stats):
    cause = getattr(exc, "cause", None)
    details = {"bytes_downloaded": stats.bytes_fetched, "files_downloaded": len(stats.downloaded), "path": exc.path}
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
    if manifest.dirty and not opts.check_mode:
        try:
            with DirLock(opts.local_dir):
                manifest.save(fsync=opts.fsync)
        except DownloadError:
            warnings.append("manifest not updated: another hf_download is writing to %s" % opts.local_dir)
        except OSError as exc:
            warnings.append("could not update the manifest: %s" % exc)
    res = _result(opts, plan, started, False, planning, network_calls, warnings=warnings)
    if disk is not None:
        res["disk"] = disk
    if opts.check_mode:
        res.update(bytes_to_download=0, files_to_download=0, would_download=[])
    return res
