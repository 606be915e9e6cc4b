# SPDX-License-Identifier: Apache-2.0
"""Hub calls independent of fleet size (issue 9 items 2 and 3) at the module level.

The controller checks the token once (hf_gated_access, whoami + auth-check per repo);
a host whose own token resolution gives the same fingerprint reuses those verdicts
and makes no Hub call. hf_token's drift check costs one whoami, only when tokens differ.
Every module runs as its own process against the local Hub; calls are counted there.
"""

import json

from localhub.personas import token_for
from modhelper import run_module_process

TARGET = "moonshotai/Kimi-K2.6"
DRAFTER = "z-lab/Kimi-K2.6-DFlash"
REPOS = [{"repo_id": TARGET}, {"repo_id": DRAFTER}]


def api_calls(hub):
    return hub.stats()["api"]


def controller_check(hub, persona="granted", repos=REPOS):
    failed, res = run_module_process("hf_gated_access", dict(token=token_for(persona), repos=repos, endpoint=hub.url,
                                                             fail_on_denied=False))
    assert not res.get("denied") or persona != "granted", res["msg"]
    return res


def host_check(hub, token_file, proven, **kw):
    args = dict(repos=kw.pop("repos", REPOS), endpoint=hub.url, proven=proven, **kw)
    return run_module_process("hf_gated_access", args, env={"HF_TOKEN_PATH": str(token_file), "HOME": "/nonexistent"})


def write_token(path, persona):
    path.write_text(token_for(persona) + "\n")
    path.chmod(0o600)
    return path


def test_host_with_the_proven_token_makes_no_hub_call(local_hub, tmp_path):
    proven = controller_check(local_hub)
    token_file = write_token(tmp_path / "token", "granted")
    before = api_calls(local_hub)
    for _host in range(3):
        failed, res = host_check(local_hub, token_file, proven)
        assert not failed, res["msg"]
    assert api_calls(local_hub) == before, "hosts holding the proven token must not call the Hub"
    assert res["auth"]["proven_on"] == "controller" and res["auth"]["source"] == "file:%s" % token_file
    assert [r["access"] for r in res["repos"]] == ["public", "granted"]
    assert token_for("granted") not in json.dumps(res)


def test_host_with_another_token_is_checked_against_the_hub(local_hub, tmp_path):
    proven = controller_check(local_hub)
    token_file = write_token(tmp_path / "token", "never_requested")
    before = api_calls(local_hub)
    failed, res = host_check(local_hub, token_file, proven)
    assert failed and res["denied"] == [DRAFTER] and "proven_on" not in res["auth"]
    assert api_calls(local_hub) > before


def test_on_unproven_fail_names_both_fingerprints_without_a_hub_call(local_hub, tmp_path):
    proven = controller_check(local_hub)
    token_file = write_token(tmp_path / "token", "granted_write")
    before = api_calls(local_hub)
    failed, res = host_check(local_hub, token_file, proven, on_unproven="fail")
    assert failed and "not the one proven on the controller" in res["msg"]
    assert proven["auth"]["fingerprint"] in res["msg"]
    assert api_calls(local_hub) == before


def test_a_repo_the_controller_did_not_check_is_not_reused(local_hub, tmp_path):
    proven = controller_check(local_hub, repos=[{"repo_id": TARGET}])
    token_file = write_token(tmp_path / "token", "granted")
    before = api_calls(local_hub)
    failed, res = host_check(local_hub, token_file, proven)
    assert not failed and api_calls(local_hub) > before


def test_empty_repo_list_checks_the_token_only(local_hub):
    before = dict(local_hub.stats())
    failed, res = run_module_process("hf_gated_access", dict(token=token_for("granted"), repos=[],
                                                             endpoint=local_hub.url))
    after = local_hub.stats()
    assert not failed and res["auth"]["status"] == "ok"
    assert after["whoami"] - before["whoami"] == 1 and after["api"] - before["api"] == 1
    failed, res = run_module_process("hf_gated_access", dict(token=token_for("invalid"), repos=[],
                                                             endpoint=local_hub.url))
    assert failed and res["auth"]["status"] == "invalid"


def test_drift_costs_one_whoami_only_when_tokens_differ(local_hub, tmp_path):
    path = tmp_path / "token"
    args = dict(path=str(path), validate=False, endpoint=local_hub.url, on_drift="fail")
    failed, res = run_module_process("hf_token", dict(args, token=token_for("granted")))
    assert not failed and res["changed"]
    before = api_calls(local_hub)
    failed, res = run_module_process("hf_token", dict(args, token=token_for("granted")))
    assert not failed and not res["changed"] and api_calls(local_hub) == before, "no-op: no Hub call"

    # The host holds another valid token (a rotation that was not promoted): drift, kept.
    failed, res = run_module_process("hf_token", dict(args, token=token_for("granted_write")))
    assert failed and res["error_code"] == "token_drift" and res["drift"]
    assert api_calls(local_hub) == before + 1
    assert "promote" in res["msg"] and res["drift_fingerprint"] in res["msg"]
    assert res["expected_fingerprint"] in res["msg"]
    assert path.read_text().strip() == token_for("granted")
    for persona in ("granted", "granted_write"):
        assert token_for(persona) not in res["msg"] + res["_stderr"]

    failed, res = run_module_process("hf_token", dict(args, token=token_for("granted_write"), on_drift="report"))
    assert not failed and not res["changed"] and res["drift"] and "promote" in res["drift_message"]
    assert path.read_text().strip() == token_for("granted")

    failed, res = run_module_process("hf_token", dict(args, token=token_for("granted_write"), on_drift="replace"))
    assert not failed and res["changed"] and path.read_text().strip() == token_for("granted_write")


def test_a_revoked_token_on_the_host_is_replaced_not_drift(local_hub, tmp_path):
    path = write_token(tmp_path / "token", "invalid")
    failed, res = run_module_process("hf_token", dict(path=str(path), validate=False, endpoint=local_hub.url,
                                                      on_drift="fail", token=token_for("granted")))
    assert not failed and res["changed"] and res["replaced_invalid"] and not res["drift"]
    assert path.read_text().strip() == token_for("granted")
