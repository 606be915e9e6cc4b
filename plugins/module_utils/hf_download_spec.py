# -*- coding: utf-8 -*-
# Copyright: ct200-deploy developers
# SPDX-License-Identifier: Apache-2.0
"""hf_download's options, defined once.

PRIVATE to the ct200.deploy collection.  Standard library only.

* ``ARGUMENT_SPEC`` is the module's argument_spec (DOCUMENTATION must describe exactly it);
* ``LIMITS`` are the numeric ranges ``hf_transfer.Options.validate`` enforces on top;
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
