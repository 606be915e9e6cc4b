# -*- coding: utf-8 -*-
# Copyright: ct200-deploy developers
# SPDX-License-Identifier: Apache-2.0
"""hf_download's options, defined once.

PRIVATE to the ct200.deploy collection.  Standard library and the collection's stdlib-only
module_utils (hf_errors, hf_paths, hf_manifest, disk_preflight): the no-op re-run imports it.

* ``ARGUMENT_SPEC`` is the module's argument_spec (DOCUMENTATION must describe exactly it);
* ``LIMITS`` are the numeric ranges ``Options.validate`` enforces on top;
* ``Options`` are one download's validated inputs (the module's options with the token resolved, plus
  ``INTERNAL_DEFAULTS``), which hf_transfer, the fan-out and the controller's hf_repo_meta run on;
* ``FANOUT_SHARED`` are the options ct200.deploy.hf_fanout_fetch takes from this spec unchanged
  (``shared_spec``), so each has one type and one default: hf_download's. The fan-out had its own
  ``max_workers`` (4) and ``stall_timeout`` (30 s); both now follow hf_download (8 byte ranges per big
  file, 60 s without a byte before a source is abandoned): a peer's nginx serves ranges as fast as the
  CDN, and a parent that is merely slow keeps its child instead of sending it to the seed;
* ``ROLE_VARS`` / ``ROLE_REPO_OPTIONS`` say which options the ct200.deploy.model_weights role
  exposes and under which variable; tests/download/test_spec.py checks that the role's
  meta/argument_specs.yml and defaults/main.yml carry the same type, choices and default.
"""

from __future__ import annotations

import math
import os
import re
import urllib.parse

from ansible_collections.ct200.deploy.plugins.module_utils import disk_preflight, hf_manifest
from ansible_collections.ct200.deploy.plugins.module_utils.hf_errors import DownloadError
from ansible_collections.ct200.deploy.plugins.module_utils.hf_paths import (
    endpoint_problem,
    redact_url,
    repo_id_problem,
    url_credentials,
)

DEFAULT_ENDPOINT = "https://huggingface.co"
VERIFY_CHOICES = ["size", "sha256", "full", "sample-unsafe"]
REPO_TYPES = ["model", "dataset", "space"]
LAYOUTS = ["flat", "snapshots"]

ARGUMENT_SPEC = dict(
    repo_id=dict(type="str", required=True),
    revision=dict(type="str", default="main"),
    repo_type=dict(type="str", choices=REPO_TYPES, default="model"),
    local_dir=dict(type="path", required=True),
    allow_patterns=dict(type="list", elements="str"),
    ignore_patterns=dict(type="list", elements="str"),
    token=dict(type="str", no_log=True),
    token_user=dict(type="str", no_log=False),  # a user name, not a secret
    endpoint=dict(type="str"),
    max_workers=dict(type="int", default=8),
    min_free_bytes=dict(type="raw", default="10GB"),
    verify=dict(type="str", choices=VERIFY_CHOICES, default="sha256"),
    stall_timeout=dict(type="float", default=60.0),
    retries=dict(type="int", default=5),
    min_split_size=dict(type="raw", default="64MiB"),
    progress_file=dict(type="path"),
    fsync=dict(type="bool", default=False),
    direct_io=dict(type="bool", default=True),
    lock_timeout=dict(type="float", default=0.0),
    listing=dict(type="list", elements="dict"),
    layout=dict(type="str", choices=LAYOUTS, default="flat"),
    reuse_dirs=dict(type="list", elements="path"),
)

# name -> (lowest, highest, inclusive_low); checked by Options.validate with one message per option
LIMITS = {
    "max_workers": (1, 64, True),
    "retries": (0, 100, True),
    "stall_timeout": (0, 86400, False),
    "lock_timeout": (0, 86400, True),
}

# model_weights role variable -> module option (same type, choices and default)
ROLE_VARS = {
    "model_weights_endpoint": "endpoint",
    "model_weights_min_free_bytes": "min_free_bytes",
    "model_weights_max_workers": "max_workers",
    "model_weights_verify": "verify",
    "model_weights_stall_timeout": "stall_timeout",
    "model_weights_retries": "retries",
}
# role defaults that deliberately differ from the module's (the module's default is "unset")
ROLE_DEFAULT_OVERRIDES = {"model_weights_endpoint": DEFAULT_ENDPOINT}
# options of each model_weights_repos item, passed to the module unchanged
ROLE_REPO_OPTIONS = ("repo_id", "revision", "repo_type", "local_dir", "allow_patterns", "ignore_patterns")


# hf_fanout_fetch's options that are hf_download's (same meaning, type and default)
FANOUT_SHARED = ("repo_id", "repo_type", "local_dir", "revision", "allow_patterns", "ignore_patterns", "endpoint",
                 "token", "stall_timeout", "max_workers", "lock_timeout", "min_free_bytes", "layout", "reuse_dirs")


def shared_spec(names=FANOUT_SHARED):
    """Copies of this spec's entries for ``names`` (a module adds its own options beside them)."""
    return dict((name, dict(ARGUMENT_SPEC[name])) for name in names)


def default(name):
    return ARGUMENT_SPEC[name].get("default")


COMMIT_RE = re.compile(r"^[0-9a-f]{40}\Z")
PROGRESS_NAME = "progress.json"  # the default progress_file: <local_dir>/.ct200/progress.json


def is_commit(revision):
    return bool(COMMIT_RE.match(revision or ""))


def secrets_of(opts):
    """What of ``opts`` must never be printed or written: the token and any URL credentials of the endpoint."""
    return [s for s in [opts.token] + url_credentials(opts.endpoint) if s]


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
    """Validated inputs of one download: the module's options (ARGUMENT_SPEC above, same names
    and defaults) with the token already resolved, plus INTERNAL_DEFAULTS."""

    def __init__(self, **params):
        unknown = set(params) - set(ARGUMENT_SPEC) - set(INTERNAL_DEFAULTS)
        if unknown:
            raise TypeError("unknown hf_download option(s): %s" % ", ".join(sorted(unknown)))
        values = dict((name, opt.get("default")) for name, opt in ARGUMENT_SPEC.items())
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
        """DownloadError ``bad_argument`` naming every problem at once, before anything is touched."""
        problems = list(self._problems)
        problems += self._value_problems()
        problems += self._limit_problems()
        problems += self._revision_problems()
        problems += self._local_dir_problems()
        why = endpoint_problem(self.endpoint)
        if why:
            problems.append("endpoint %s is not usable: %s" % (self.endpoint_display, why))
        if problems:
            raise DownloadError(
                "invalid arguments: " + "; ".join(problems),
                code="bad_argument",
                fix="correct the options named above; nothing was changed",
            )

    def _value_problems(self):
        problems = []
        why = repo_id_problem(self.repo_id)
        if why:
            problems.append("repo_id %r is not a valid repo id: %s" % (self.repo_id, why))
        if self.repo_type not in REPO_TYPES:
            problems.append("repo_type must be one of %s" % ", ".join(REPO_TYPES))
        if self.verify not in VERIFY_CHOICES:
            problems.append("verify must be one of %s" % ", ".join(VERIFY_CHOICES))
        return problems

    def _limit_problems(self):
        problems = []
        for name, (low, high, inclusive) in sorted(LIMITS.items()):
            value = getattr(self, name)
            kind = int if ARGUMENT_SPEC[name]["type"] == "int" else (int, float)
            ok = (isinstance(value, kind) and not isinstance(value, bool)
                  and (isinstance(value, int) or math.isfinite(value)))
            if not ok or value > high or value < low or (value == low and not inclusive):
                problems.append("%s must be a number %s %s and <= %s, got %r"
                                % (name, ">=" if inclusive else ">", low, high, value))
        if self.layout not in LAYOUTS:
            problems.append("layout must be one of %s" % ", ".join(LAYOUTS))
        return problems

    def _revision_problems(self):
        problems = []
        if self.listing is not None and not is_commit(self.revision):
            problems.append("listing is the tree of one commit: revision must be that 40-hex commit, got %r"
                            % (self.revision,))
        if not isinstance(self.revision, str) or re.search(r"[\x00-\x1f\x7f]", self.revision):
            problems.append("revision %r contains control characters" % (self.revision,))
        return problems

    def _local_dir_problems(self):
        if self.local_dir in ("/", ""):
            return ["local_dir must not be /"]
        if os.path.islink(self.local_dir):
            return ["local_dir %s is a symlink; set local_dir to the directory it points to "
                    "(hf_download follows no symlink under local_dir)" % self.local_dir]
        if os.path.exists(self.local_dir) and not os.path.isdir(self.local_dir):
            return ["local_dir %s exists and is not a directory" % self.local_dir]
        return []

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
