# -*- coding: utf-8 -*-
# Copyright: ct200-deploy developers
# SPDX-License-Identifier: Apache-2.0
"""One place that turns any huggingface_hub / HTTP error into a fixed verdict.

A verdict has a ``code`` from a closed vocabulary, a ``message`` naming the
cause and a ``fix`` telling the operator what to do. Classification looks at
the exception's class names (no huggingface_hub import needed), the HTTP
status, ``X-Error-Code`` and the server message, per the real Hub's matrix:

=============================  ======  =============  =====================
case                           status  X-Error-Code   verdict
=============================  ======  =============  =====================
no token sent, gated repo      401     GatedRepo      no_token
never requested                403     GatedRepo      not_requested
request pending                403     GatedRepo      pending
fine-grained, no gated scope   403     GatedRepo      token_lacks_gated_scope
invalid/revoked token          401     (none)         invalid_token
private or missing repo        401/404 RepoNotFound   not_found
=============================  ======  =============  =====================
"""

from __future__ import annotations

from dataclasses import dataclass, asdict, field

from ansible_collections.ct200.deploy.plugins.module_utils.redact import redact

ACCESS_CODES = ("public", "granted", "no_token", "not_requested", "pending",
                "token_lacks_gated_scope", "invalid_token", "not_found")
OPERATIONAL_CODES = ("revision_not_found", "entry_not_found", "rate_limited", "server_error",
                     "unreachable", "timeout", "bad_token", "offline", "http_error", "unknown")

TOKEN_SETTINGS_URL = "https://huggingface.co/settings/tokens"
GATED_SCOPE_TOKEN_URL = "https://huggingface.co/settings/tokens/new?canReadGatedRepos=true&tokenType=fineGrained"
GATED_REQUESTS_URL = "https://huggingface.co/settings/gated-repos"


class DownloadError(Exception):
    """Operator-facing failure of hf_download and the fan-out: ``code`` (this vocabulary or a local one),
    ``message`` and ``fix``, like a Verdict, raised where the run stops."""

    def __init__(self, message, code="error", fix="", details=None):
        super().__init__(message)
        self.code = code
        self.message = message
        self.fix = fix
        self.details = details or {}

    def operator_message(self):
        """The message with the fix after it, as a module reports it (``msg``)."""
        return self.message + (". Fix: " + self.fix if self.fix else "")

    def as_result(self):
        """What a module fails with: ``msg`` (the fix appended), ``code``, ``fix`` and the details."""
        return dict(msg=self.operator_message(), code=self.code, fix=self.fix, **self.details)


@dataclass
class Verdict:
    code: str
    message: str
    fix: str
    status: int | None = None

    def as_dict(self):
        return asdict(self)


@dataclass
class Context:
    """What the caller knows that the exception does not carry."""
    repo_id: str | None = None
    repo_type: str = "model"
    endpoint: str = "https://huggingface.co"
    token_sent: bool = False
    token_source: str | None = None
    token_fingerprint: str | None = None
    user: str | None = None
    token_role: str | None = None
    can_read_gated: bool | None = None
    token_name: str | None = None
    # the token the request carried: masked in the message in every encoding (an upstream may echo it)
    secrets: tuple = field(default=(), repr=False)

    def repo_url(self):
        prefix = "" if self.repo_type == "model" else self.repo_type + "s/"
        return "%s/%s%s" % (self.endpoint.rstrip("/"), prefix, self.repo_id)

    def token_label(self):
        parts = [p for p in (self.token_fingerprint, ("from " + self.token_source) if self.token_source else None) if p]
        return "the token (%s)" % ", ".join(parts) if parts else "the token"


def _class_names(exc):
    return {cls.__name__ for cls in type(exc).__mro__}


def _response(exc):
    return getattr(exc, "response", None)


def _header(resp, name):
    try:
        return resp.headers.get(name)
    except Exception:
        return None


def _server_text(exc, resp):
    parts = [getattr(exc, "server_message", None) or "", _header(resp, "X-Error-Message") or ""]
    try:
        parts.append(resp.text[:2000])
    except Exception:
        pass
    return " ".join(p for p in parts if p).lower()


def access_fix(code: str, ctx: Context) -> str:
    user = ctx.user or "the token's user"
    if code == "no_token":
        return ("send a token: install one with the ct200.deploy.hf_token role for the user the task runs as "
                "(with become, that is root's HF_HOME, not yours), or pass the token option explicitly")
    if code == "not_requested":
        return ("%s must request access in a browser at %s (access is granted per user, never per org), "
                "then re-run" % (user, ctx.repo_url()))
    if code == "pending":
        return ("%s's access request awaits review by the repo authors; check its status at %s and re-run "
                "once approved" % (user, GATED_REQUESTS_URL))
    if code == "token_lacks_gated_scope":
        name = (" '%s'" % ctx.token_name) if ctx.token_name else ""
        return ("edit the fine-grained token%s and tick 'Read access to contents of all public gated repos you "
                "can access', or create one at %s, then install it with the hf_token role" % (name, GATED_SCOPE_TOKEN_URL))
    if code == "invalid_token":
        return ("%s was rejected by %s (revoked, expired, mistyped or for another endpoint): create a new token "
                "at %s and install it with the hf_token role" % (ctx.token_label(), ctx.endpoint, TOKEN_SETTINGS_URL))
    if code == "not_found":
        if ctx.token_sent:
            return ("check repo_id, repo_type and revision; if %s is private, %s has no access to it"
                    % (ctx.repo_id, user))
        return "check repo_id and repo_type; if %s is private, send a token of an account with access" % ctx.repo_id
    return ""


def classify(exc: BaseException, ctx: Context | None = None) -> Verdict:
    """Map an exception raised by huggingface_hub (or its HTTP stack) to a Verdict.

    The message quotes the server or the exception at times: it goes through the one redaction
    (an upstream may echo the token, a signed URL or credentials in any error channel)."""
    ctx = ctx or Context()
    verdict = _verdict(exc, ctx)
    verdict.message = redact(verdict.message, ctx.secrets)
    return verdict


def _verdict(exc, ctx):
    names = _class_names(exc)
    resp = _response(exc)
    status = getattr(resp, "status_code", None)
    error_code = _header(resp, "X-Error-Code") if resp is not None else None
    text = _server_text(exc, resp) if resp is not None else ""
    repo = ctx.repo_id or "the repository"

    def verdict(code, message):
        return Verdict(code, message, access_fix(code, ctx) or _OPERATIONAL_FIX.get(code, ""), status)

    if "LocalTokenNotFoundError" in names:
        return Verdict("no_token", "no token found: %s" % exc, access_fix("no_token", ctx), None)
    if "LocalProtocolError" in names and "bearer" in str(exc).lower():
        return Verdict("bad_token", "an empty token was sent as 'Authorization: Bearer '", _OPERATIONAL_FIX["bad_token"])
    if "OfflineModeIsEnabled" in names:
        return Verdict("offline", "HF_HUB_OFFLINE is set, so no request can reach the Hub", _OPERATIONAL_FIX["offline"])

    if status is not None:
        if "GatedRepoError" in names or error_code == "GatedRepo":
            if status == 401 or not ctx.token_sent:
                return verdict("no_token", "%s is gated and the request carried no token (HTTP %s GatedRepo)"
                               % (repo, status))
            says_pending = "awaiting" in text or "pending" in text or "review" in text
            says_not_listed = "authorized list" in text
            # whoami says the scope is missing; or the Hub says so; or a fine-grained token whose
            # whoami did not report the scope got a gate refusal of neither known kind
            lacks_scope = (ctx.can_read_gated is False or "fine-grained" in text or "fine grained" in text
                           or (ctx.token_role == "fineGrained" and ctx.can_read_gated is not True
                               and not (says_pending or says_not_listed)))
            if lacks_scope:
                return verdict("token_lacks_gated_scope",
                               "%s is a fine-grained token without the gated-repos read permission, so %s "
                               "refuses it (HTTP %s) even if access was granted" % (ctx.token_label(), repo, status))
            if says_pending:
                return verdict("pending", "%s's access request to %s is pending review (HTTP %s)" % (
                    ctx.user or "the user", repo, status))
            return verdict("not_requested", "%s is not in the authorized list of %s (HTTP %s)" % (
                ctx.user or "the user", repo, status))
        if status == 401 and (error_code is None or "invalid credentials" in text or "invalid user token" in text):
            if ctx.token_sent and error_code is None:
                return verdict("invalid_token", "%s is invalid for %s (HTTP 401 with no error code)"
                               % (ctx.token_label(), ctx.endpoint))
        if error_code == "RevisionNotFound" or "RevisionNotFoundError" in names:
            return verdict("revision_not_found", "revision not found in %s (HTTP %s)" % (repo, status))
        if error_code == "EntryNotFound" or "RemoteEntryNotFoundError" in names:
            return verdict("entry_not_found", "file not found in %s (HTTP %s)" % (repo, status))
        if error_code == "RepoNotFound" or "RepositoryNotFoundError" in names or status in (401, 404):
            return verdict("not_found", "%s was not found%s (HTTP %s)" % (
                repo, "" if ctx.token_sent else " anonymously", status))
        if status == 429:
            retry = _header(resp, "Retry-After")
            return verdict("rate_limited", "the Hub rate-limited the request (HTTP 429%s)"
                           % (", Retry-After %ss" % retry if retry else ""))
        if status >= 500:
            return verdict("server_error", "the Hub answered HTTP %s" % status)
        return verdict("http_error", "HTTP %s from the Hub: %s" % (status, str(exc).splitlines()[0][:300]))

    if names & {"ConnectError", "ConnectionError", "ConnectionRefusedError", "NetworkError", "gaierror"}:
        return Verdict("unreachable", "cannot connect to %s: %s" % (ctx.endpoint, str(exc)[:300]),
                       _OPERATIONAL_FIX["unreachable"] % ctx.endpoint, None)
    if names & {"TimeoutException", "ReadTimeout", "ConnectTimeout", "TimeoutError", "timeout"}:
        return Verdict("timeout", "the request to %s timed out: %s" % (ctx.endpoint, str(exc)[:300]),
                       _OPERATIONAL_FIX["timeout"], None)
    return Verdict("unknown", "%s: %s" % (type(exc).__name__, str(exc)[:500]), _OPERATIONAL_FIX["unknown"], None)


_OPERATIONAL_FIX = {
    "revision_not_found": "check the revision (branch, tag or 40-hex commit) exists in the repository",
    "entry_not_found": "check allow_patterns and the file names at that revision",
    "rate_limited": "wait and re-run with fewer parallel hosts (throttle), or verify once on the controller",
    "server_error": "the Hub is failing; re-run later (requests are retried with backoff)",
    "unreachable": "check network access and the endpoint (HF_ENDPOINT / endpoint option): %s",
    "timeout": "check network access to the Hub, or raise the timeout",
    "bad_token": "pass a non-empty token; ct200.deploy modules refuse empty tokens before sending",
    "offline": "unset HF_HUB_OFFLINE for this task (SGLang units keep it; deployment tasks must not)",
    "http_error": "see the message; re-run with -vvv for the request details",
    "unknown": "re-run with -vvv; if it persists, report it with the message above",
}
