# -*- coding: utf-8 -*-
# Copyright: ct200-deploy developers
# SPDX-License-Identifier: Apache-2.0
"""Prove, repo by repo, that a token can read what a deployment needs.

Access is decided only by the Hub's ``auth-check`` endpoint called with the
token that will be used: public metadata (model_info, tree) is readable by
anyone, and a public repo downloading fine proves nothing about a gated one.
Sizes come from the recursive tree listing (real sizes even on gated repos),
never from ``model_info`` siblings (None unless asked, the "0 GB" failure).
"""

from __future__ import annotations

from ansible_collections.ct200.deploy.plugins.module_utils import hf_errors
from ansible_collections.ct200.deploy.plugins.module_utils.hf_hub import (
    DEFAULT_API_TIMEOUT, select_paths, unmatched_patterns, whoami)

OK_ACCESS = ("public", "granted")


class RepoSpecError(ValueError):
    pass


def normalise_repos(repos, allow_empty=False):
    out = []
    for i, spec in enumerate(repos or []):
        if isinstance(spec, str):
            spec = {"repo_id": spec}
        repo_id = (spec.get("repo_id") or "").strip()
        if repo_id.count("/") != 1 or repo_id.startswith("/") or repo_id.endswith("/"):
            raise RepoSpecError("repos[%d].repo_id %r is not of the form owner/name" % (i, spec.get("repo_id")))
        repo_type = spec.get("repo_type") or "model"
        if repo_type not in ("model", "dataset", "space"):
            raise RepoSpecError("repos[%d].repo_type %r must be model, dataset or space" % (i, repo_type))
        out.append({
            "repo_id": repo_id,
            "repo_type": repo_type,
            "revision": spec.get("revision") or None,
            "allow_patterns": list(spec.get("allow_patterns") or []),
            "ignore_patterns": list(spec.get("ignore_patterns") or []),
            "required": True if spec.get("required") is None else bool(spec.get("required")),
        })
    if not out and not allow_empty:
        raise RepoSpecError("repos is empty: list at least one repo_id to check")
    return out


def check_auth(hf_api, resolved, endpoint):
    """whoami for the token; never raises for Hub answers, returns a dict for the result."""
    auth = {"status": "none", "user": None, "token_role": None, "token_name": None,
            "can_read_gated_repos": None, "fingerprint": resolved.fingerprint, "source": resolved.source,
            "message": None}
    if not resolved.token:
        auth["message"] = "no token: requests go out anonymously"
        return auth
    try:
        auth.update(whoami(hf_api, resolved.token))
        auth["status"] = "ok"
        auth["message"] = "token of %s (%s)" % (auth["user"], auth["token_role"])
    except Exception as exc:  # classified below; the Hub's answer decides
        ctx = hf_errors.Context(endpoint=endpoint, token_sent=True, token_source=resolved.source,
                                token_fingerprint=resolved.fingerprint, secrets=(resolved.token,))
        verdict = hf_errors.classify(exc, ctx)
        auth["status"] = "invalid" if verdict.code in ("invalid_token", "not_found") else "error"
        if auth["status"] == "invalid":
            verdict = hf_errors.Verdict("invalid_token", "whoami rejected %s" % ctx.token_label(),
                                        hf_errors.access_fix("invalid_token", ctx), verdict.status)
        auth["message"] = verdict.message
        auth["fix"] = verdict.fix
        auth["error_code"] = verdict.code
    return auth


def _repo_info(hf_api, repo, token):
    return hf_api.repo_info(repo["repo_id"], repo_type=repo["repo_type"], revision=repo["revision"],
                            token=token, timeout=DEFAULT_API_TIMEOUT)


def check_repo(hf_api, repo, resolved, auth, endpoint):
    token = resolved.token if resolved.token else False
    ctx = hf_errors.Context(repo_id=repo["repo_id"], repo_type=repo["repo_type"], endpoint=endpoint,
                            token_sent=bool(resolved.token), token_source=resolved.source,
                            token_fingerprint=resolved.fingerprint, user=auth.get("user"),
                            token_role=auth.get("token_role"), can_read_gated=auth.get("can_read_gated_repos"),
                            token_name=auth.get("token_name"),
                            secrets=(resolved.token,) if resolved.token else ())
    result = dict(repo, gated=None, private=None, commit=None, access=None, accessible=False,
                  bytes=None, files=None, message=None, fix=None)

    def fail(verdict):
        result.update(message=verdict.message, fix=verdict.fix, error_code=verdict.code)
        if verdict.code in hf_errors.ACCESS_CODES:
            result["access"] = verdict.code
        return result

    # 1. Metadata: gated flag, privacy and the commit the revision points to. Readable
    #    anonymously for public and gated repos; a private repo needs the token.
    try:
        info = _repo_info(hf_api, repo, token if auth.get("status") == "ok" else False)
    except Exception as exc:
        if auth.get("status") == "ok":
            return fail(hf_errors.classify(exc, ctx))
        try:  # a private repo looked up anonymously: ask the Hub with the token anyway
            info = _repo_info(hf_api, repo, token)
        except Exception as exc2:
            return fail(hf_errors.classify(exc2, ctx))
    result["gated"] = getattr(info, "gated", False) or False
    result["private"] = bool(getattr(info, "private", False))
    result["commit"] = getattr(info, "sha", None)

    # 2. Access, proven by auth-check with exactly the token that will be used.
    try:
        hf_api.auth_check(repo["repo_id"], repo_type=repo["repo_type"], token=token)
        restricted = bool(result["gated"]) or result["private"]
        result["access"] = "granted" if restricted else "public"
        result["accessible"] = True
    except Exception as exc:
        verdict = hf_errors.classify(exc, ctx)
        if verdict.code not in hf_errors.ACCESS_CODES:
            return fail(verdict)
        fail(verdict)

    # 3. Size of the selected files from the recursive tree listing.
    try:
        entries = list(hf_api.list_repo_tree(repo["repo_id"], recursive=True, repo_type=repo["repo_type"],
                                             revision=result["commit"] or repo["revision"], token=token))
    except Exception as exc:
        verdict = hf_errors.classify(exc, ctx)
        if result["accessible"]:
            result["accessible"] = False
            return fail(hf_errors.Verdict(verdict.code, "cannot list files: " + verdict.message, verdict.fix,
                                          verdict.status))
        return result
    files = {e.path: e for e in entries if hasattr(e, "size")}  # RepoFolder entries have no size
    selected = list(select_paths(sorted(files), repo["allow_patterns"], repo["ignore_patterns"]))
    unknown = [p for p in selected if files[p].size is None]
    missing_patterns = unmatched_patterns(files, repo["allow_patterns"])
    result["files"] = len(selected)
    result["unmatched_patterns"] = missing_patterns
    if unknown:
        result["accessible"] = False
        result.update(message="the Hub gave no size for %d selected file(s) (e.g. %s): refusing to count them as 0"
                      % (len(unknown), unknown[0]), fix="re-run; if it persists, the endpoint is not a Hub tree API",
                      error_code="unknown_size")
        return result
    if not selected:
        result["accessible"] = False
        result.update(message="allow_patterns %s select no file at %s" % (repo["allow_patterns"], result["commit"]),
                      fix="fix allow_patterns / ignore_patterns", error_code="nothing_selected")
        return result
    result["bytes"] = sum(files[p].size for p in selected)
    if result["accessible"]:
        result["message"] = "%s access to %s (%d files, %d bytes)" % (
            result["access"], repo["repo_id"], len(selected), result["bytes"])
    return result


def check_access(hf_api, repos, resolved, endpoint):
    auth = check_auth(hf_api, resolved, endpoint)
    results = [check_repo(hf_api, r, resolved, auth, endpoint) for r in repos]
    denied = [r for r in results if r["required"] and not r["accessible"]]
    return auth, results, denied


def _repo_key(repo):
    return (repo.get("repo_id"), repo.get("repo_type") or "model", repo.get("revision") or None,
            tuple(repo.get("allow_patterns") or ()), tuple(repo.get("ignore_patterns") or ()))


def reuse_proven(proven, repos, resolved):
    """(auth, results) from a check the controller already made with the same token, or None.

    The controller checks once per run and hands its verdicts to every host; a host
    whose own token resolution yields the same fingerprint needs no Hub call of its
    own, so the number of calls does not grow with the fleet. Anything that does not
    match exactly (another token, another repo, revision or pattern) is not reused.
    """
    if not isinstance(proven, dict) or not resolved.token:
        return None
    auth = proven.get("auth") or {}
    if auth.get("status") != "ok" or auth.get("fingerprint") != resolved.fingerprint:
        return None
    proven_repos = {_repo_key(r): r for r in proven.get("repos") or [] if isinstance(r, dict)}
    results = []
    for repo in repos:
        verdict = proven_repos.get(_repo_key(repo))
        if verdict is None:
            return None
        results.append(dict(verdict, required=repo["required"], proven_on="controller"))
    message = "%s, proven on the controller (same fingerprint, no Hub call from this host)" % auth.get("message")
    return dict(auth, source=resolved.source, proven_on="controller", message=message), results


def failure_message(denied, total_required, auth):
    lines = ["%d of %d required repositories are not accessible%s:" % (
        len(denied), total_required, (" with the token of %s" % auth["user"]) if auth.get("user") else "")]
    for r in denied:
        lines.append("- %s: %s: %s. Fix: %s" % (r["repo_id"], r.get("access") or r.get("error_code"),
                                                r.get("message"), r.get("fix")))
    return "\n".join(lines)


def summary_lines(auth, results):
    """One line for the token and one per repository, for the role's report."""
    lines = ["token: %s%s" % (auth.get("message"), (" " + auth["fingerprint"]) if auth.get("fingerprint") else "")]
    for r in results:
        size = "%.2f GB" % (r["bytes"] / 1e9) if r.get("bytes") is not None else "size unknown"
        verdict = r.get("access") or r.get("error_code") or "error"
        line = "%s: %s (gated=%s, %s files, %s)" % (r["repo_id"], verdict, r.get("gated"), r.get("files"), size)
        if not r.get("accessible"):
            line += " -> fix: %s" % r.get("fix")
        lines.append(line)
    return lines
