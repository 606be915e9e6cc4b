# SPDX-License-Identifier: Apache-2.0
"""Persona x endpoint matrix, observed through the real huggingface_hub client."""

from __future__ import annotations

import pytest

from localhub import DRAFTER_REPO, PRIVATE_REPO, TARGET_REPO

PERSONA_CASES = [
    "granted", "granted_write", "granted_fine_grained", "never_requested", "pending",
    "fine_grained_no_gated", "invalid", None,
]

OK = {"ok": True}
INVALID = {"cls": "HfHubHTTPError", "status": 401, "code": None, "text": "Invalid credentials in Authorization header"}
PRIVATE_AUTHED = {"cls": "RepositoryNotFoundError", "status": 404, "code": "RepoNotFound", "text": "Repository not found"}


def gated(status: int, text: str) -> dict:
    return {"cls": "GatedRepoError", "status": status, "code": "GatedRepo", "text": text}


EXPECTED = {
    "granted": {"target": OK, "drafter": OK, "private": OK},
    "granted_write": {"target": OK, "drafter": OK, "private": OK},
    "granted_fine_grained": {"target": OK, "drafter": OK, "private": OK},
    "never_requested": {
        "target": OK,
        "drafter": gated(403, f"Access to model {DRAFTER_REPO} is restricted and you are not in the authorized list. "
                              f"Visit https://huggingface.co/{DRAFTER_REPO} to ask for access."),
        "private": PRIVATE_AUTHED,
    },
    "pending": {
        "target": OK,
        "drafter": gated(403, f"Your request to access model {DRAFTER_REPO} is awaiting a review from the repo authors."),
        "private": PRIVATE_AUTHED,
    },
    "fine_grained_no_gated": {
        "target": OK,
        "drafter": gated(403, "Please enable access to public gated repositories in your fine-grained token settings"),
        "private": PRIVATE_AUTHED,
    },
    "invalid": {"target": INVALID, "drafter": INVALID, "private": INVALID},
    None: {
        "target": OK,
        "drafter": gated(401, f"Access to model {DRAFTER_REPO} is restricted. You must have access to it and be "
                              "authenticated to access it. Please log in."),
        "private": {"cls": "RepositoryNotFoundError", "status": 401, "code": "RepoNotFound", "text": None},
    },
}

WHOAMI = {
    "granted": ("ct200-granted", "read", None),
    "granted_write": ("ct200-granted-write", "write", None),
    "granted_fine_grained": ("ct200-granted-fg", "fineGrained", True),
    "never_requested": ("ct200-never-requested", "read", None),
    "pending": ("ct200-pending", "read", None),
    "fine_grained_no_gated": ("ct200-fg-no-gated", "fineGrained", False),
}


@pytest.fixture(scope="module")
def matrix(hf_module):
    return hf_module(f"""
        repos = {{"target": "{TARGET_REPO}", "drafter": "{DRAFTER_REPO}", "private": "{PRIVATE_REPO}"}}
        for persona in {PERSONA_CASES!r}:
            tok = token_for(persona) if persona else False
            row = {{}}
            if persona:
                row["whoami"] = attempt(api.whoami, token=tok)
            for name, repo in repos.items():
                row[name] = attempt(api.auth_check, repo, token=tok)
                # /resolve is gated exactly like auth-check (own cache per persona: a cached
                # file would be returned silently whatever the token, like with the real Hub)
                row[name + "_download"] = attempt(hf_hub_download, repo, "config.json", token=tok,
                                                  cache_dir=f"cache-{{persona}}")
            RESULT[str(persona)] = row
    """)


def _check(observed: dict, expected: dict) -> None:
    if expected.get("ok"):
        assert observed["ok"], f"expected success, got {observed}"
        return
    assert not observed["ok"], f"expected {expected['cls']}, call succeeded"
    assert observed["cls"] == expected["cls"], observed
    assert observed["status"] == expected["status"], observed
    assert observed["code"] == expected["code"], observed
    if expected["text"]:
        assert expected["text"] in (observed["server_message"] or ""), observed


@pytest.mark.parametrize("persona", PERSONA_CASES, ids=[str(p) for p in PERSONA_CASES])
@pytest.mark.parametrize("repo", ["target", "drafter", "private"])
def test_auth_check_and_resolve_per_persona(matrix, persona, repo):
    row = matrix[str(persona)]
    _check(row[repo], EXPECTED[persona][repo])
    _check(row[repo + "_download"], EXPECTED[persona][repo])


@pytest.mark.parametrize("persona", list(WHOAMI))
def test_whoami_per_persona(matrix, persona):
    observed = matrix[persona]["whoami"]
    assert observed["ok"], observed
    info = observed["value"]
    name, role, can_read_gated = WHOAMI[persona]
    assert info["name"] == name
    assert info["auth"]["accessToken"]["role"] == role
    if can_read_gated is None:
        assert "fineGrained" not in info["auth"]["accessToken"]
    else:
        assert info["auth"]["accessToken"]["fineGrained"]["canReadGatedRepos"] is can_read_gated
    assert isinstance(info["orgs"], list)
    assert ("ct200" in [o["name"] for o in info["orgs"]]) is persona.startswith("granted")


def test_whoami_invalid_token(matrix):
    observed = matrix["invalid"]["whoami"]
    assert not observed["ok"]
    assert observed["cls"] == "HfHubHTTPError"
    assert observed["status"] == 401
    assert observed["code"] is None
    assert "Invalid user token" in observed["msg"]


def test_invalid_token_rejected_on_public_metadata(hf):
    result = hf(f"""
        tok = token_for("invalid")
        RESULT["model_info"] = attempt(api.model_info, "{TARGET_REPO}", token=tok)
        RESULT["tree"] = attempt(lambda: list(api.list_repo_tree("{TARGET_REPO}", token=tok)))
        RESULT["anon_model_info"] = attempt(lambda: api.model_info("{DRAFTER_REPO}", token=False).gated)
    """)
    for key in ("model_info", "tree"):
        _check(result[key], INVALID)
    # gated metadata is public for anonymous callers
    assert result["anon_model_info"] == {"ok": True, "value": "manual"}


def test_access_can_be_changed_at_runtime(hub, hf):
    import json
    import urllib.request

    req = urllib.request.Request(
        f"{hub.url}/_admin/access", method="POST",
        data=json.dumps({"repo": DRAFTER_REPO, "persona": "pending", "status": "accepted"}).encode())
    assert json.loads(urllib.request.urlopen(req, timeout=10).read()) == {"ok": True}
    try:
        result = hf(f'RESULT["pending"] = attempt(api.auth_check, "{DRAFTER_REPO}", token=token_for("pending"))')
    finally:
        hub.set_access(DRAFTER_REPO, "pending", "pending")
    assert result["pending"]["ok"], result
    result = hf(f'RESULT["pending"] = attempt(api.auth_check, "{DRAFTER_REPO}", token=token_for("pending"))')
    assert result["pending"]["cls"] == "GatedRepoError"
