# -*- coding: utf-8 -*-
# Copyright: ct200-deploy developers
# SPDX-License-Identifier: Apache-2.0
"""The one Hub client of the ct200.deploy modules: lazily-imported huggingface_hub, and the lean stdlib path.

huggingface_hub reads its configuration (HF_ENDPOINT, HF_HOME, ...) once, at
import. ``configure()`` therefore sets the process environment first and only
then imports; importing ``huggingface_hub.hf_api`` costs ~0.3 s, so callers on
a no-op path should not call ``api()`` at all.

* ``configure``/``api``/``whoami``: huggingface_hub itself (hf_token, hf_gated_access);
* ``lean_resolve``: a branch or tag to its commit with one small standard-library GET (the no-op re-run);
* ``Hub``: the full path of hf_download and the fan-out (resolve, tree listing, access check, headers), every
  failure one DownloadError with the hf_errors verdict;
* ``select_paths``/``unmatched_patterns``: huggingface_hub's pattern semantics without importing it.
"""

from __future__ import annotations

import fnmatch
import os

from ansible_collections.ct200.deploy.plugins.module_utils.hf_download_spec import DEFAULT_ENDPOINT, is_commit
from ansible_collections.ct200.deploy.plugins.module_utils.hf_errors import DownloadError

USER_AGENT = "ct200-deploy/0.1.0 (hf_download)"
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


# ------------------------------------------------------------ hf_download's client
def tree_entry(size, oid, lfs):
    return {"size": size, "oid": oid, "lfs": bool(lfs)}


def hostile_fix(opts):
    return ("a genuine Hugging Face Hub never lists such a file: the endpoint %s (endpoint option / HF_ENDPOINT), "
            "or a mirror or proxy in between, is broken, hostile or compromised; check it before running again"
            % opts.endpoint_display)


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
        self.opts = opts
        try:
            self.endpoint = configure(opts.endpoint)
        except RuntimeError:
            # huggingface_hub already imported in this process for another endpoint (tests):
            # every call below passes the endpoint explicitly, so that is harmless here.
            self.endpoint = opts.endpoint
        _set_api_timeout(opts.api_timeout)
        self.api = api(self.endpoint)
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
