# SPDX-License-Identifier: Apache-2.0
"""The classifier against exceptions produced by huggingface_hub's own error mapping.

Each case builds the HTTP answer the real Hub gives (status, X-Error-Code,
message) and lets huggingface_hub.utils.hf_raise_for_status raise what it
raises in production; only then is the verdict checked.
"""

import httpx2
import pytest
from huggingface_hub.utils import hf_raise_for_status

from ansible_collections.ct200.deploy.plugins.module_utils import hf_errors

URL = "http://127.0.0.1:9/api/models/z-lab/Kimi-K2.6-DFlash/auth-check"


def hub_error(status, code=None, message=None, url=URL, headers=None):
    h = dict(headers or {})
    if code:
        h["X-Error-Code"] = code
    if message:
        h["X-Error-Message"] = message
    resp = httpx2.Response(status, headers=h, json={"error": message} if message else None,
                           request=httpx2.Request("GET", url))
    with pytest.raises(Exception) as err:
        hf_raise_for_status(resp)
    return err.value


def ctx(**kw):
    base = dict(repo_id="z-lab/Kimi-K2.6-DFlash", endpoint="https://huggingface.co", token_sent=True,
                user="alice", token_fingerprint="sha256:0123456789ab", token_source="file:/root/.cache/huggingface/token")
    base.update(kw)
    return hf_errors.Context(**base)


def test_no_token_sent_is_no_token_not_an_approval_problem():
    exc = hub_error(401, "GatedRepo", "Access to model z-lab/Kimi-K2.6-DFlash is restricted. You must have access "
                    "to it and be authenticated to access it. Please log in.")
    v = hf_errors.classify(exc, ctx(token_sent=False, user=None))
    assert v.code == "no_token" and v.status == 401
    assert "become" in v.fix and "hf_token" in v.fix


def test_never_requested():
    exc = hub_error(403, "GatedRepo", "Access to model z-lab/Kimi-K2.6-DFlash is restricted and you are not in the "
                    "authorized list. Visit https://huggingface.co/z-lab/Kimi-K2.6-DFlash to ask for access.")
    v = hf_errors.classify(exc, ctx())
    assert v.code == "not_requested"
    assert "alice must request access in a browser at https://huggingface.co/z-lab/Kimi-K2.6-DFlash" in v.fix


def test_pending():
    exc = hub_error(403, "GatedRepo", "Your request to access model z-lab/Kimi-K2.6-DFlash is awaiting a review "
                    "from the repo authors.")
    v = hf_errors.classify(exc, ctx())
    assert v.code == "pending" and "settings/gated-repos" in v.fix


def test_fine_grained_without_scope_decided_by_whoami_even_with_a_generic_message():
    exc = hub_error(403, "GatedRepo", "Access to model z-lab/Kimi-K2.6-DFlash is restricted and you are not in the "
                    "authorized list.")
    v = hf_errors.classify(exc, ctx(token_role="fineGrained", can_read_gated=False, token_name="ci"))
    assert v.code == "token_lacks_gated_scope"
    assert "canReadGatedRepos=true" in v.fix and "'ci'" in v.fix


def test_fine_grained_scope_when_whoami_does_not_report_it():
    # the Hub's own wording for the missing scope
    exc = hub_error(403, "GatedRepo", "Please enable access to public gated repositories in your fine-grained "
                    "token settings to view this repository.")
    assert hf_errors.classify(exc, ctx(token_role="fineGrained")).code == "token_lacks_gated_scope"
    # a gate refusal of no known kind for a fine-grained token of unknown scope: the scope is the likely cause
    exc = hub_error(403, "GatedRepo", "Cannot access gated repo.")
    assert hf_errors.classify(exc, ctx(token_role="fineGrained")).code == "token_lacks_gated_scope"
    # ... but not for a read token, nor when the Hub says why
    assert hf_errors.classify(exc, ctx(token_role="read")).code == "not_requested"
    exc = hub_error(403, "GatedRepo", "Access to model z-lab/Kimi-K2.6-DFlash is restricted and you are not in the "
                    "authorized list. Visit https://huggingface.co/z-lab/Kimi-K2.6-DFlash to ask for access.")
    assert hf_errors.classify(exc, ctx(token_role="fineGrained", can_read_gated=True)).code == "not_requested"
    assert hf_errors.classify(exc, ctx(token_role="fineGrained")).code == "not_requested"
    exc = hub_error(403, "GatedRepo", "Your request to access model z-lab/Kimi-K2.6-DFlash is under review.")
    assert hf_errors.classify(exc, ctx(token_role="fineGrained")).code == "pending"


def test_invalid_token_is_a_plain_401_without_error_code():
    exc = hub_error(401, None, "Invalid credentials in Authorization header")
    assert type(exc).__name__ == "HfHubHTTPError"
    v = hf_errors.classify(exc, ctx())
    assert v.code == "invalid_token"
    assert "sha256:0123456789ab" in v.message + v.fix and "settings/tokens" in v.fix


@pytest.mark.parametrize("status, sent", [(401, False), (404, True)])
def test_private_or_missing_repo(status, sent):
    exc = hub_error(status, "RepoNotFound", "Repository not found")
    v = hf_errors.classify(exc, ctx(token_sent=sent, repo_id="ct200/private-model"))
    assert v.code == "not_found" and "ct200/private-model" in v.message


def test_revision_and_entry_not_found():
    assert hf_errors.classify(hub_error(404, "RevisionNotFound", "Invalid rev id: nope"), ctx()).code \
        == "revision_not_found"
    assert hf_errors.classify(hub_error(404, "EntryNotFound", "nope", url="http://127.0.0.1:9/z/x/resolve/main/a"),
                              ctx()).code == "entry_not_found"


def test_rate_limit_and_server_error():
    v = hf_errors.classify(hub_error(429, None, None, headers={"Retry-After": "7"}), ctx())
    assert v.code == "rate_limited" and "Retry-After 7s" in v.message
    assert hf_errors.classify(hub_error(503, None, None), ctx()).code == "server_error"


def test_unreachable_endpoint():
    with pytest.raises(Exception) as err:  # real connection refused on a closed port
        httpx2.get("http://127.0.0.1:9/api/whoami-v2", timeout=2)
    v = hf_errors.classify(err.value, ctx(endpoint="http://127.0.0.1:9"))
    assert v.code == "unreachable" and "http://127.0.0.1:9" in v.fix


def test_local_token_not_found():
    from huggingface_hub.errors import LocalTokenNotFoundError
    v = hf_errors.classify(LocalTokenNotFoundError("Token is required"), ctx(token_sent=False))
    assert v.code == "no_token"


def test_every_access_verdict_has_a_fix():
    for code in hf_errors.ACCESS_CODES:
        if code in ("public", "granted"):
            continue
        assert hf_errors.access_fix(code, ctx()), code


def test_download_error_reports_its_fix_in_the_message_and_the_result():
    err = hf_errors.DownloadError("disk full", code="disk_full", fix="free space", details={"path": "/models"})
    assert err.operator_message() == "disk full. Fix: free space"
    assert err.as_result() == {"msg": "disk full. Fix: free space", "code": "disk_full", "fix": "free space",
                               "path": "/models"}
    assert hf_errors.DownloadError("stopped").as_result() == {"msg": "stopped", "code": "error", "fix": ""}


def test_the_fanout_error_is_a_download_error():
    """One error type for both download modules: the fan-out's keeps its argument order and default code."""
    from ansible_collections.ct200.deploy.plugins.module_utils import fanout

    err = fanout.FanoutError("no source", "run hf_download on the seed")
    assert isinstance(err, hf_errors.DownloadError)
    assert (err.message, err.fix, err.code, err.details) == ("no source", "run hf_download on the seed",
                                                             "fanout_failed", {})
    assert err.as_result()["msg"] == "no source. Fix: run hf_download on the seed"
