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

This module is the run, as named steps (``_run_locked``); each concern has its own module, whose public
names are re-exported here for the modules, the fan-out, tests and benchmarks that import them from here:

* options: :mod:`hf_download_spec` (``Options``, ``is_commit``, ``secrets_of``);
* the Hub client: :mod:`hf_hub` (``Hub``, ``lean_resolve``, ``hub_error``);
* the plan: :mod:`hf_transfer_plan` (``make_plan``, ``check_tree``, ``select``, ``hash_file``);
* the progress file: :mod:`hf_progress` (``ProgressWriter``, ``record_error``);
* the directory lock: :mod:`hf_transfer_lock` (``DirLock``);
* the local disk: :mod:`hf_transfer_local` (``disk_check``, ``clean_temp``, ``local_error``, snapshots);
* the error type: :mod:`hf_errors` (``DownloadError``).
"""

from __future__ import annotations

import os
import time

from ansible_collections.ct200.deploy.plugins.module_utils import hf_manifest
from ansible_collections.ct200.deploy.plugins.module_utils._io import UnsafePathError
from ansible_collections.ct200.deploy.plugins.module_utils.hf_download_spec import (
    DEFAULT_ENDPOINT,
    INTERNAL_DEFAULTS,
    Options,
    is_commit,
    secrets_of,
)
from ansible_collections.ct200.deploy.plugins.module_utils.hf_errors import DownloadError
from ansible_collections.ct200.deploy.plugins.module_utils.hf_hub import (
    PROXY_AUTH_FIX,
    Hub,
    error_context,
    hostile_fix,
    hub_error,
    lean_resolve,
    tree_entry,
)
from ansible_collections.ct200.deploy.plugins.module_utils.hf_progress import ProgressWriter, record_error
from ansible_collections.ct200.deploy.plugins.module_utils.hf_transfer_local import (
    LOCAL_WRITE_ERRNOS,
    clean_temp,
    disk_check,
    is_local_write_error,
    is_snapshot,
    link_reused,
    local_error,
    mark_complete,
)
from ansible_collections.ct200.deploy.plugins.module_utils.hf_transfer_lock import DirLock
from ansible_collections.ct200.deploy.plugins.module_utils.hf_transfer_plan import (
    HANDED_LISTING,
    Plan,
    PlanFile,
    check_tree,
    handed_tree,
    hash_file,
    make_plan,
    select,
)

# hf_transfer_http (http.client, ssl, urllib.request) and hf_transfer_engine are
# imported where they are used: a commit-pinned no-op re-run needs neither.

# What other files import from here (the split left the names where they were).
__all__ = [
    "DEFAULT_ENDPOINT", "INTERNAL_DEFAULTS", "LOCAL_WRITE_ERRNOS", "PROXY_AUTH_FIX", "DirLock", "DownloadError",
    "HANDED_LISTING", "Hub", "Options", "Plan", "PlanFile", "ProgressWriter", "check_tree", "clean_temp",
    "controller_meta", "disk_check", "error_context", "fetch_error", "handed_tree", "hash_file", "hostile_fix",
    "hub_error", "is_commit", "is_local_write_error", "is_snapshot", "lean_resolve", "link_reused", "local_error",
    "make_plan", "mark_complete", "record_error", "run", "secrets_of", "select", "tree_entry",
]


# ----------------------------------------------------------------- controller
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


# ---------------------------------------------------------------------- the run
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


class _RunState(object):
    """What the steps of one locked run hand on: the manifest, the warnings, the network calls, the times."""

    def __init__(self, opts, clock, started):
        self.opts = opts
        self.clock = clock
        self.started = started
        self.manifest = hf_manifest.Manifest.load(opts.local_dir)
        self.warnings = [self.manifest.warning] if self.manifest.warning else []
        self.manifest.bind_repo(opts.repo_id, opts.repo_type)
        self.network_calls = 0
        self.t_hub = self.t_import = self.t_plan = self.t_fetch_started = self.t_fetched = started
        self.fetch_seconds = 0.0

    def noop(self, plan, planning, disk=None):
        return _finish_noop(self.opts, plan, self.manifest, self.started, self.network_calls, self.warnings,
                            planning, disk=disk)

    def result(self, plan, **extra):
        return _result(self.opts, plan, self.started, True, "hub", self.network_calls, **extra)


def _run_locked(opts, clock, started):
    """The run under the local_dir lock, as named steps; a step that ends the run returns its result."""
    state = _RunState(opts, clock, started)
    # 1. fast path: answer from the manifest alone
    commit = _known_commit(state)
    plan = _plan_from_manifest(state, commit)
    if plan is not None and not plan.to_fetch and not plan.to_link:
        return state.noop(plan, "manifest")
    if opts.offline:
        raise DownloadError(
            "HF_HUB_OFFLINE is set and %s@%s is not complete in %s" % (opts.repo_id, opts.revision, opts.local_dir),
            code="offline",
            fix="unset HF_HUB_OFFLINE for this task, or pin revision to the commit already downloaded",
        )
    # 2. full path through huggingface_hub
    hub = _open_hub(state)
    plan = _plan_from_hub(state, hub, commit)
    _prepare_plan(opts, plan)
    # 3. disk preflight (before any byte moves): only the new bytes, beside the kept snapshots
    disk = disk_check(opts, plan, plan.commit)
    if not plan.to_fetch and not plan.to_link:
        return state.noop(plan, "hub", disk=disk)
    # 4. access before bytes (a gated repo lists its tree anonymously); a handed listing
    # comes from the controller, which proved access once for the whole fleet
    if opts.listing is None and plan.to_fetch:
        state.network_calls += 1
        hub.auth_check()
    if opts.check_mode:
        return _check_mode_result(state, plan, disk)
    state.t_plan = clock()
    # 5. fetch
    return _fetch(state, hub, plan, disk)


def _known_commit(state):
    """The commit without huggingface_hub: resolved before the lock (layout=snapshots), pinned, the manifest's
    ref when offline, or one lean GET when the manifest holds a tree; None when only the Hub can say."""
    opts, manifest = state.opts, state.manifest
    if opts.resolved is not None:
        commit, calls = opts.resolved
        state.network_calls += calls
        return commit
    if is_commit(opts.revision):
        return opts.revision
    if opts.offline:
        return manifest.data.get("refs", {}).get(opts.revision)
    if manifest.tree is not None and opts.verify != "full":
        state.network_calls += 1
        return lean_resolve(opts, timeout=min(opts.api_timeout, 30.0))
    return None


def _plan_from_manifest(state, commit):
    """The plan against the tree the manifest cached for ``commit`` (None without one, or with verify=full)."""
    cached_tree = state.manifest.tree_for(commit) if commit else None
    if cached_tree is None or state.opts.verify == "full":
        return None
    return make_plan(state.opts, commit, cached_tree, state.manifest,
                     source="the tree cached in %s" % hf_manifest.manifest_path(state.opts.local_dir))


def _open_hub(state):
    """huggingface_hub, imported now (its import is timed apart from the manifest check)."""
    state.t_hub = state.clock()
    hub = Hub(state.opts)
    state.t_import = state.clock()
    return hub


def _plan_from_hub(state, hub, commit):
    """The commit and its tree from the Hub (or the handed listing), cached in the manifest, and the plan."""
    opts = state.opts
    if commit is None:
        state.network_calls += 1
        commit = hub.resolve(opts.revision)
    tree_files, source = _tree(state, hub, commit)
    state.manifest.set_tree(commit, tree_files)
    state.manifest.set_ref(opts.revision, commit)
    if not tree_files:
        raise DownloadError(
            "%s@%s has no files" % (opts.repo_id, commit), code="entry_not_found", fix="check repo_id and revision"
        )
    plan = make_plan(opts, commit, tree_files, state.manifest, source=source)
    if not plan.files:
        raise DownloadError(
            "allow_patterns/ignore_patterns select none of the %d files of %s@%s" % (len(tree_files), opts.repo_id, commit[:12]),
            code="entry_not_found",
            fix="check the patterns (fnmatch, '*' crosses '/'); unmatched allow patterns: %s"
            % (", ".join(plan.unmatched) or "none"),
        )
    if plan.unmatched:
        state.warnings.append("allow_patterns matched nothing: %s" % ", ".join(plan.unmatched))
    return plan


def _tree(state, hub, commit):
    """(tree, where it came from): the controller's listing, the manifest's tree of the commit, or the Hub's."""
    opts = state.opts
    tree_files = state.manifest.tree_for(commit)
    if opts.listing is not None:
        return handed_tree(opts.listing), HANDED_LISTING
    if tree_files is None:
        state.network_calls += 1
        tree_files, masked = hub.tree(commit)
        if masked:
            state.network_calls += 1
            hub.auth_check()  # raises the gated verdict
            raise DownloadError(
                "the Hub hid the sha256 of %s's files although access was granted" % opts.repo_id,
                code="http_error",
                fix="re-run; if it persists, check the token's permissions",
            )
    return tree_files, "the Hub's tree listing"


def _prepare_plan(opts, plan):
    """Partial files that can be resumed, and the URL of every file to fetch or link."""
    from ansible_collections.ct200.deploy.plugins.module_utils import hf_transfer_engine as engine_mod

    for pf in plan.to_fetch:
        pf.partial, _segments = engine_mod.read_partial(opts.local_dir, pf.path, pf.oid, pf.size)
    for pf in plan.to_fetch + plan.to_link:
        pf.url = opts.resolve_url(plan.commit, pf.path)


def _check_mode_result(state, plan, disk):
    """What the run would download and link; nothing is written."""
    res = state.result(
        plan,
        bytes_to_download=plan.bytes_to_fetch,
        files_to_download=len(plan.to_fetch),
        would_download=[pf.as_dict() for pf in plan.to_fetch],
        bytes_to_link=plan.bytes_to_link,
        files_to_link=len(plan.to_link),
        would_link=[dict(pf.as_dict(), source=pf.link_from[0].path) for pf in plan.to_link][:200],
        disk=disk,
        warnings=state.warnings,
    )
    if state.opts.diff:
        res["diff"] = _diff(plan, state.opts.local_dir)
    return res


def _fetch(state, hub, plan, disk):
    """Link what kept snapshots hold, fetch the rest through the engine, mark the snapshot complete."""
    from ansible_collections.ct200.deploy.plugins.module_utils import hf_transfer_engine as engine_mod
    from ansible_collections.ct200.deploy.plugins.module_utils.hf_transfer_http import HUB_ORIGINS, origin_of

    opts = state.opts
    headers = hub.headers()
    allowed = set(HUB_ORIGINS) | {origin_of(opts.endpoint)}
    staged = _stage(state, plan)
    progress = ProgressWriter(opts, plan, state.clock())
    progress.write("running")
    eng = _engine(opts, plan, headers, allowed, state.manifest, progress)
    stats = _run_engine(state, eng, progress)
    mark_complete(opts, state.manifest, plan.commit, state.warnings)
    engine_mod.remove_tmp_dir(opts.local_dir)
    progress.write("done", stats)
    if eng.warnings:
        state.warnings.extend(eng.warnings)
    res = state.result(plan, disk=disk, warnings=state.warnings, timings=_timings(state), **_fetched(plan, stats, state),
                       **staged)
    if opts.diff:
        res["diff"] = _diff(plan, opts.local_dir)
    return res


def _stage(state, plan):
    """Before the engine starts: stale temp files removed, unchanged files linked, the manifest saved."""
    from ansible_collections.ct200.deploy.plugins.module_utils import hf_transfer_engine as engine_mod

    opts = state.opts
    removed = clean_temp(opts, set(engine_mod.part_key(pf.path, pf.oid) for pf in plan.to_fetch))
    bytes_linked = link_reused(opts, plan, state.manifest, plan.commit, state.warnings)
    files_linked = len(plan.to_link)  # what could not be linked went back to fetch
    state.manifest.save(fsync=opts.fsync)
    return dict(removed_temp_files=removed, files_linked=files_linked, bytes_linked=bytes_linked)


def _engine(opts, plan, headers, allowed, manifest, progress):
    from ansible_collections.ct200.deploy.plugins.module_utils import hf_transfer_engine as engine_mod

    return engine_mod.Engine(
        opts.local_dir,
        plan.to_fetch,
        headers,
        allowed,
        manifest,
        plan.commit,
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


def _run_engine(state, eng, progress):
    """The engine's stats; a failure is recorded (progress code, owner-only words) before it is raised."""
    from ansible_collections.ct200.deploy.plugins.module_utils import hf_transfer_engine as engine_mod

    state.t_fetch_started = state.clock()
    try:
        stats = eng.run()
    except engine_mod.FetchFailed as exc:
        error = fetch_error(state.opts, exc, eng.stats)
        _mark_failed(progress, eng.stats, error.code, error.message, state.warnings, fix=error.fix)
        raise error
    except BaseException as exc:
        _mark_failed(progress, eng.stats, "interrupted" if isinstance(exc, (KeyboardInterrupt, SystemExit))
                     else "internal_error", "%s: %s" % (type(exc).__name__, exc), state.warnings)
        raise
    state.fetch_seconds = max(state.clock() - state.t_fetch_started, 1e-6)
    state.t_fetched = state.clock()
    return stats


def _fetched(plan, stats, state):
    """The result's numbers of what the engine moved."""
    return dict(
        bytes_downloaded=stats.bytes_fetched,
        bytes_resumed=plan.bytes_partial,
        files_downloaded=len(stats.downloaded),
        downloaded=sorted(stats.downloaded)[:200],
        mean_rate=round(stats.bytes_fetched / state.fetch_seconds, 1),
        retries=stats.retries,
        retry_causes=dict(stats.retry_causes),
        rate_limit_wait_s=round(stats.rate_limit_wait, 1),
        reresolves=stats.reresolves,
        stalls=stats.stalls,
        refetched=sorted(set(stats.refetched)),
    )


def _timings(state):
    return {
        "manifest_check": round(state.t_hub - state.started, 3),
        "import_huggingface_hub": round(state.t_import - state.t_hub, 3),
        "plan": round(state.t_plan - state.t_import, 3),
        "prepare": round(state.t_fetch_started - state.t_plan, 3),
        "fetch": round(state.fetch_seconds, 3),
        "finish": round(state.clock() - state.t_fetched, 3),
    }


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
