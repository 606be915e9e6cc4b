# -*- coding: utf-8 -*-
# Copyright: ct200-deploy developers
# SPDX-License-Identifier: Apache-2.0
"""One human line from hf_download's progress JSON (used by the hf_download_wait action).

PRIVATE to the ct200.deploy collection.
"""

from __future__ import annotations


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
