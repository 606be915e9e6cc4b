# -*- coding: utf-8 -*-
# Copyright: ct200-deploy developers
# SPDX-License-Identifier: Apache-2.0
"""Thin, lazily-imported access to huggingface_hub for the ct200.deploy modules.

huggingface_hub reads its configuration (HF_ENDPOINT, HF_HOME, ...) once, at
import. ``configure()`` therefore sets the process environment first and only
then imports; importing ``huggingface_hub.hf_api`` costs ~0.3 s, so callers on
a no-op path should not call ``api()`` at all.
"""

from __future__ import annotations

import fnmatch
import os

DEFAULT_ENDPOINT = "https://huggingface.co"
DEFAULT_API_TIMEOUT = 30.0


def configure(endpoint: str | None = None, hf_home: str | None = None, disable_xet: bool | None = None) -> str:
    """Prepare the environment huggingface_hub will read; return the effective endpoint."""
    endpoint = (endpoint or os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")
    # HfApi below always gets the endpoint explicitly; the environment covers helpers
    # that read huggingface_hub.constants, which is read once at import.
    os.environ["HF_ENDPOINT"] = endpoint
    # Modules never rely on implicit tokens: every call passes an explicit token or token=False.
    os.environ["HF_HUB_DISABLE_IMPLICIT_TOKEN"] = "1"
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("HF_HUB_DISABLE_UPDATE_CHECK", "1")
    if hf_home:
        os.environ["HF_HOME"] = hf_home
    if disable_xet:
        os.environ["HF_HUB_DISABLE_XET"] = "1"
    return endpoint


def api(endpoint: str):
    from huggingface_hub import HfApi
    return HfApi(endpoint=endpoint, token=False, library_name="ct200-deploy")


def client_version() -> str:
    import huggingface_hub
    return huggingface_hub.__version__


def whoami(hf_api, token: str) -> dict:
    """whoami-v2, reduced to what the modules report (never the token)."""
    info = hf_api.whoami(token=token)
    access = (info.get("auth") or {}).get("accessToken") or {}
    fine = access.get("fineGrained") or {}
    return {
        "user": info.get("name"),
        "orgs": [o.get("name") for o in info.get("orgs") or [] if isinstance(o, dict)],
        "token_role": access.get("role"),
        "token_name": access.get("displayName"),
        "can_read_gated_repos": fine.get("canReadGatedRepos") if access.get("role") == "fineGrained" else None,
    }


def _normalise_pattern(pattern: str) -> str:
    # Same rule as huggingface_hub.utils.filter_repo_objects: "dir/" means everything below dir.
    return pattern + "*" if pattern.endswith("/") else pattern


def select_paths(paths, allow_patterns=None, ignore_patterns=None):
    """fnmatchcase selection with huggingface_hub's semantics ('*' crosses '/')."""
    if isinstance(allow_patterns, str):
        allow_patterns = [allow_patterns]
    if isinstance(ignore_patterns, str):
        ignore_patterns = [ignore_patterns]
    allow = [_normalise_pattern(p) for p in allow_patterns or []]
    ignore = [_normalise_pattern(p) for p in ignore_patterns or []]
    for path in paths:
        if allow and not any(fnmatch.fnmatchcase(path, p) for p in allow):
            continue
        if ignore and any(fnmatch.fnmatchcase(path, p) for p in ignore):
            continue
        yield path


def unmatched_patterns(paths, allow_patterns):
    """Allow patterns that select nothing (huggingface_hub only warns; we report them)."""
    paths = list(paths)
    return [p for p in allow_patterns or []
            if not any(fnmatch.fnmatchcase(path, _normalise_pattern(p)) for path in paths)]
