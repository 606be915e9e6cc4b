# SPDX-License-Identifier: Apache-2.0
"""hf_gated_access and hf_token (validate=true) against the local Hub, over real HTTP, per persona.

Each module runs as its own process with the real huggingface_hub client, as on a host.
"""

import json

import pytest

from localhub.personas import token_for
from modhelper import run_module_process

TARGET = "moonshotai/Kimi-K2.6"
DRAFTER = "z-lab/Kimi-K2.6-DFlash"
PRIVATE = "ct200/private-model"


def access(hub, token=None, repos=(TARGET, DRAFTER), env=None, **kw):
    args = dict(repos=[{"repo_id": r} if isinstance(r, str) else r for r in repos], endpoint=hub.url,
                fail_on_denied=kw.pop("fail_on_denied", True))
    if token is not None:
        args["token"] = token
    args.update(kw)
    return run_module_process("hf_gated_access", args, env=env)


def by_repo(result):
    return {r["repo_id"]: r for r in result["repos"]}


@pytest.mark.parametrize("persona, verdict, fix_words", [
    ("granted", "granted", None),
    ("granted_write", "granted", None),
    ("granted_fine_grained", "granted", None),
    ("never_requested", "not_requested", "must request access in a browser"),
    ("pending", "pending", "awaits review"),
    ("fine_grained_no_gated", "token_lacks_gated_scope", "canReadGatedRepos=true"),
    ("invalid", "invalid_token", "create a new token"),
])
def test_drafter_verdict_per_persona(local_hub, persona, verdict, fix_words):
    token = token_for(persona)
    failed, res = access(local_hub, token)
    drafter, target = by_repo(res)[DRAFTER], by_repo(res)[TARGET]
    assert drafter["access"] == verdict, res["msg"]
    assert drafter["gated"] == "manual"
    blob = json.dumps(res)
    assert token not in blob
    if verdict == "granted":
        assert not failed and drafter["accessible"] and drafter["bytes"] > 0
        assert target["access"] == "public" and target["accessible"]
        assert res["auth"]["user"] and res["auth"]["status"] == "ok"
    else:
        assert failed and res["denied"] == ([TARGET, DRAFTER] if verdict == "invalid_token" else [DRAFTER])
        assert fix_words in drafter["fix"]
        assert DRAFTER in res["msg"] and fix_words in res["msg"]
    if persona == "invalid":
        assert target["access"] == "invalid_token", "an invalid token is refused even on public repos"
        assert res["auth"]["status"] == "invalid"


def test_no_token_at_all(local_hub, tmp_path):
    failed, res = access(local_hub, env={"HF_HOME": str(tmp_path / "empty-home")})
    assert failed
    drafter, target = by_repo(res)[DRAFTER], by_repo(res)[TARGET]
    assert res["auth"]["status"] == "none"
    assert target["access"] == "public" and target["accessible"]
    assert drafter["access"] == "no_token" and "hf_token" in drafter["fix"]
    assert res["denied"] == [DRAFTER], "a public target downloading fine is no proof for the gated drafter"


def test_token_resolved_from_the_users_file_and_env(local_hub, tmp_path):
    home = tmp_path / "hf"
    home.mkdir()
    (home / "token").write_text(token_for("granted") + "\n")
    failed, res = access(local_hub, env={"HF_HOME": str(home)})
    assert not failed and res["auth"]["source"] == "file:%s/token" % home
    failed, res = access(local_hub, env={"HF_HOME": str(home), "HF_TOKEN": token_for("pending")})
    assert failed and res["auth"]["source"] == "env:HF_TOKEN" and by_repo(res)[DRAFTER]["access"] == "pending"
    failed, res = access(local_hub, env={"HF_HOME": str(home), "HF_TOKEN": ""})
    assert not failed and res["auth"]["source"].startswith("file:"), "empty HF_TOKEN falls through like the client"


def test_every_denied_repo_is_listed_in_one_message(local_hub):
    failed, res = access(local_hub, token_for("never_requested"), repos=(TARGET, DRAFTER, PRIVATE))
    assert failed and set(res["denied"]) == {DRAFTER, PRIVATE}
    assert "2 of 3 required repositories" in res["msg"]
    assert DRAFTER in res["msg"] and PRIVATE in res["msg"]
    assert by_repo(res)[PRIVATE]["access"] == "not_found"


def test_private_repo_granted_to_org_member(local_hub):
    failed, res = access(local_hub, token_for("granted"), repos=(PRIVATE,))
    assert not failed and by_repo(res)[PRIVATE]["access"] == "granted"


def test_optional_repo_does_not_fail(local_hub):
    failed, res = access(local_hub, token_for("never_requested"),
                         repos=(TARGET, {"repo_id": DRAFTER, "required": False}))
    assert not failed and by_repo(res)[DRAFTER]["access"] == "not_requested"


def test_bytes_come_from_the_tree_and_follow_allow_patterns(local_hub):
    failed, res = access(local_hub, token_for("granted"),
                         repos=({"repo_id": TARGET, "allow_patterns": ["*.json"]}, TARGET))
    only_json, everything = res["repos"]
    assert 0 < only_json["bytes"] < everything["bytes"]
    assert everything["bytes"] == sum(f.size for f in local_hub.repo(TARGET).files.values()), "sum of real sizes"


def test_pattern_that_selects_nothing_is_an_error_not_zero(local_hub):
    failed, res = access(local_hub, token_for("granted"), repos=({"repo_id": TARGET, "allow_patterns": ["*.gguf"]},))
    assert failed and "select no file" in res["msg"]


@pytest.mark.parametrize("bad, words", [("", "empty"), (" \n", "whitespace-only"), ("hf_a\nb", "newline")])
def test_malformed_token_is_never_sent(local_hub, bad, words):
    local_hub.reset_stats()
    failed, res = access(local_hub, bad)
    assert failed and words in res["msg"]
    assert sum(local_hub.stats()["status"].values()) == 0, "nothing may reach the Hub"


def test_unknown_revision_and_bad_repo_id(local_hub):
    failed, res = access(local_hub, token_for("granted"), repos=({"repo_id": TARGET, "revision": "nope"},))
    assert failed and by_repo(res)[TARGET]["error_code"] == "revision_not_found"
    failed, res = access(local_hub, token_for("granted"), repos=("not-a-repo-id",))
    assert failed and "owner/name" in res["msg"]


def test_unreachable_endpoint_names_it(tmp_path):
    class Dead:
        url = "http://127.0.0.1:9"
    failed, res = access(Dead(), token_for("granted"))
    assert failed and res["auth"]["error_code"] == "unreachable" and "127.0.0.1:9" in res["auth"]["fix"]


# --- hf_token with validation against the Hub ------------------------------------------------

def install(hub, path, token, **kw):
    return run_module_process("hf_token", dict(token=token, path=str(path), endpoint=hub.url, **kw))


def test_hf_token_validates_before_writing(local_hub, tmp_path):
    path = tmp_path / "token"
    failed, res = install(local_hub, path, token_for("granted"))
    assert not failed and res["changed"] and res["user"] == "ct200-granted" and res["token_role"] == "read"
    failed, res = install(local_hub, path, token_for("granted"))
    assert not failed and not res["changed"]
    before = path.read_bytes()
    failed, res = install(local_hub, path, token_for("invalid"))
    assert failed and "invalid_token" in res["msg"] and "nothing" not in res.get("path", "x")
    assert path.read_bytes() == before, "a rejected token writes nothing"
    assert token_for("invalid") not in json.dumps(res)


def test_hf_token_reports_fine_grained_scope(local_hub, tmp_path):
    failed, res = install(local_hub, tmp_path / "token", token_for("fine_grained_no_gated"))
    assert not failed and res["token_role"] == "fineGrained" and res["can_read_gated_repos"] is False


# --- Hub faults: one clear verdict, never a false "granted" ----------------------------------

@pytest.fixture
def faulty_hub(local_hub):
    local_hub.clear_faults()
    yield local_hub
    local_hub.clear_faults()


def test_server_error_on_auth_check_is_reported_not_granted(faulty_hub):
    faulty_hub.set_faults([{"kind": "5xx", "status": 503, "path_glob": "/api/models/z-lab/*/auth-check",
                            "count": -1}])
    failed, res = access(faulty_hub, token_for("granted"))
    drafter = by_repo(res)[DRAFTER]
    assert failed and not drafter["accessible"] and drafter["access"] is None
    assert drafter["error_code"] == "server_error" and "503" in drafter["message"]
    assert by_repo(res)[TARGET]["access"] == "public"


def test_rate_limited_whoami_is_reported_but_access_still_proven_by_auth_check(faulty_hub):
    # whoami is informational (user, role); the verdict comes from auth-check with the token.
    faulty_hub.set_faults([{"kind": "429", "retry_after": 7, "path_glob": "/api/whoami-v2", "count": -1}])
    failed, res = access(faulty_hub, token_for("granted"))
    assert res["auth"]["error_code"] == "rate_limited" and "Retry-After 7s" in res["auth"]["message"]
    assert "throttle" in res["auth"]["fix"]
    assert not failed and by_repo(res)[DRAFTER]["access"] == "granted"


def test_hf_token_refuses_to_write_when_the_hub_fails(faulty_hub, tmp_path):
    faulty_hub.set_faults([{"kind": "5xx", "status": 502, "path_glob": "/api/whoami-v2", "count": -1}])
    path = tmp_path / "token"
    failed, res = install(faulty_hub, path, token_for("granted"))
    assert failed and "server_error" in res["msg"] and not path.exists()
