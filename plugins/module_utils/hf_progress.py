# -*- coding: utf-8 -*-
# Copyright: ct200-deploy developers
# SPDX-License-Identifier: Apache-2.0
"""hf_download's progress file: written (ProgressWriter, record_error) and read back as one human line
(format_line, used by the hf_download_wait action and ``ct200 deploy``).

PRIVATE to the ct200.deploy collection.
"""

from __future__ import annotations

import errno
import json
import os
import threading
import time

from ansible_collections.ct200.deploy.plugins.module_utils import hf_manifest
from ansible_collections.ct200.deploy.plugins.module_utils._io import atomic_write, open_nofollow
from ansible_collections.ct200.deploy.plugins.module_utils.hf_download_spec import secrets_of
from ansible_collections.ct200.deploy.plugins.module_utils.redact import scrub

# the options of the ct200.deploy.hf_download_wait action (its module stub declares exactly these)
WAIT_ARGUMENT_SPEC = dict(
    jobs=dict(type="list", elements="dict", required=True),
    interval=dict(type="float", default=30),
    timeout=dict(type="float", default=172800),
)
ERROR_NAME = "error.json"  # owner-only words of the last failure (the served progress file has its code)


def _gb(n):
    return "%.2f" % ((n or 0) / 1e9)


def _duration(seconds):
    if seconds is None:
        return "?"
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return "%dh%02dm" % (hours, minutes)
    if minutes:
        return "%dm%02ds" % (minutes, secs)
    return "%ds" % secs


def is_current(progress, not_before):
    """A progress file written by this run (not left over by an earlier one)."""
    return isinstance(progress, dict) and float(progress.get("updated") or 0) >= not_before


def format_line(label, progress, finished=False, failed=False, not_before=0.0):
    """``label: 123.45/595.30 GB (20.7 %), 1100 MB/s, ETA 2h13m, files 12/64[, retries 3]``."""
    if finished:
        return "%s: %s" % (label, "failed" if failed else "finished")
    if not is_current(progress, not_before):
        return "%s: planning" % label
    state = progress.get("state")
    if state == "done":
        return "%s: finishing" % label
    if state == "failed":
        return "%s: failed: %s" % (label, progress.get("error") or "")
    total = progress.get("bytes_total") or 0
    done = min(progress.get("bytes_done") or 0, total) if total else 0
    pct = 100.0 * done / total if total else 100.0
    rate = progress.get("rate") or 0
    line = "%s: %s/%s GB (%.1f %%), %d MB/s, ETA %s, files %s/%s" % (
        label,
        _gb(done),
        _gb(total),
        pct,
        int(rate / 1e6),
        _duration(progress.get("eta_seconds")) if rate else "?",
        progress.get("files_done", "?"),
        progress.get("files_total", "?"),
    )
    if progress.get("retries"):
        line += ", retries %s" % progress["retries"]
    return line + fanout_suffix(progress)


def fanout_suffix(progress):
    """hf_fanout_fetch's progress: the sources it fetches from now, verified bytes, bytes per kind of source.

    ``, from parent h1 | verified 0.02 GB | by source: parent 0.02 GB, seed 0.00 GB`` (kinds with bytes, or
    the kinds of the sources in use).  Empty for an hf_download progress document."""
    by_kind = progress.get("bytes_by_kind")
    if not isinstance(by_kind, dict):
        return ""
    sources = [str(s) for s in progress.get("fetching_from") or []]
    kinds = [k for k in ("parent", "peer", "seed", "hub") if by_kind.get(k) or any(s.startswith(k + " ") for s in sources)]
    return ", from %s | verified %s GB | by source: %s" % (
        ", ".join(sources) or "-", _gb(progress.get("bytes_verified")),
        ", ".join("%s %s GB" % (k, _gb(by_kind.get(k))) for k in kinds) or "-")


# ------------------------------------------------------------------- writing
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


def record_error(local_dir, code, message, fix="", secrets=()):
    """The failure's words, redacted, in ``<local_dir>/.ct200/error.json``: 0600 (the owner only) and under a
    dot path, which weight_peer's nginx never serves.  The progress file (0644, served) carries only ``code``."""
    doc = scrub({"state": "failed", "code": code, "message": message, "fix": fix, "updated": time.time()}, secrets)
    atomic_write(os.path.join(hf_manifest.state_dir(local_dir), ERROR_NAME), json.dumps(doc), mode=0o600,
                 root=local_dir, create_dirs=True)


def _is_under(path, root):
    return os.path.commonpath([os.path.abspath(path), root]) == root and os.path.abspath(path) != root
