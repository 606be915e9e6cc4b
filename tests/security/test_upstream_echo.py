# SPDX-License-Identifier: Apache-2.0
"""A router or SGLang instance that echoes the request back (issue 14's brief rule: no token or API key in any
output). The hostile server (hostile_servers.EchoServer, real HTTP on 127.0.0.1) puts the Authorization header
and the request body (with the worker's key) into its error bodies and into 200 answers: as sent, URL-encoded,
JSON inside JSON, with an HF token from its environment, at offsets that straddle every cut the product makes.

Through the real code paths (the modules as their own processes, arguments on stdin; the module_utils functions
that ``ct200 status`` and the rollout call directly, where Ansible's own no_log masking does not help): the key
is in no form in the result, and the message still names the cause and the fix."""

from __future__ import annotations

import json
import urllib.parse

import pytest

from hostile_servers import ECHO_HF_TOKEN, EchoServer
from sec_helpers import run_module
from ansible_collections.ct200.deploy.plugins.filter.redact import redact as redact_filter
from ansible_collections.ct200.deploy.plugins.filter.rollout import rollout_failure
from ansible_collections.ct200.deploy.plugins.module_utils import sglang_gate, sglang_verdict, traffic

# characters that URL-encoding, JSON and repr all write differently; "Zq7" is the head of every encoded form
KEY = 'Zq7/x+Vb"9\\Kp=w!mT4@rL8sYc2'
WORKER = "http://127.0.0.1:30001"


def _forms(secret):
    return {secret, urllib.parse.quote(secret, safe=""), urllib.parse.quote_plus(secret), json.dumps(secret)[1:-1]}


def assert_no_secret(text):
    """No form of the key, not even its head, and no piece of the server's HF token."""
    assert isinstance(text, str) and text
    for form in _forms(KEY):
        assert form not in text
    assert "Zq7" not in text, "the head of the API key is in: %s" % text[text.find("Zq7") - 80:text.find("Zq7") + 40]
    assert "EchoedFrom" not in text and ECHO_HF_TOKEN not in text


@pytest.fixture()
def echo_error():
    with EchoServer(mode="error", status=500) as server:
        yield server


@pytest.fixture()
def echo_ok():
    with EchoServer(mode="ok", worker_url=WORKER) as server:
        yield server


# --- the router's control plane ---------------------------------------------------------------------------------
def test_traffic_rotation_module_quotes_no_key_from_a_router_error_body(echo_error):
    failed, result, raw = run_module("traffic_rotation", {"mode": "router", "state": "in", "url": WORKER,
                                                          "router_url": echo_error.url, "api_key": KEY, "timeout": 5})
    assert failed
    assert echo_error.seen and echo_error.seen[0][2] == "Bearer " + KEY  # it did get the key, and echoed it
    assert_no_secret(raw)
    assert "HTTP 500" in result["msg"] and "the router said" in result["msg"]  # the cause, with the router's words
    assert "journalctl -u ct200-router" in result["msg"]  # the fix
    assert "ppppp" in result["msg"]  # the router's own words are quoted (redacted, not dropped)


def test_router_workers_module_quotes_no_key_from_an_error_or_a_200_answer(echo_error, echo_ok):
    failed, result, raw = run_module("router_workers", {"router_url": echo_error.url, "api_key": KEY,
                                                        "urls": [WORKER], "timeout": 5})
    assert failed and "HTTP 500" in result["msg"] and "journalctl" in result["msg"]
    assert_no_secret(raw)
    failed, result, raw = run_module("router_workers", {"router_url": echo_ok.url, "api_key": KEY,
                                                        "urls": [WORKER], "timeout": 5})
    assert not failed and result["in_rotation"] == [WORKER]
    assert result["instances"][WORKER]["load"] is None  # free text in 'load' is not passed on
    assert_no_secret(raw)


def test_the_worker_key_in_a_post_body_echoed_back_is_masked_in_the_function_too(echo_error):
    """The function ct200 status and the drain step call, without Ansible's no_log masking behind it."""
    client = traffic.RouterClient(echo_error.url, api_key="router-" + KEY)
    with pytest.raises(traffic.TrafficError) as caught:
        client._request("POST", "/workers", {"url": WORKER, "api_key": KEY})
    client.secrets.append(KEY)  # add() registers the worker key before it posts; here the request was sent by hand
    with pytest.raises(traffic.TrafficError) as caught:
        client.add(WORKER, api_key=KEY, timeout=1)
    assert_no_secret(str(caught.value))
    assert "HTTP 500" in str(caught.value)
    answer = traffic.rotation(echo_error.url, [WORKER], api_key=KEY, timeout=5)
    assert not answer["reachable"]
    assert_no_secret(json.dumps(answer))


# --- the rollout gates ------------------------------------------------------------------------------------------
GATE_ARGS = {"model": "kimi", "algorithm": "dflash", "smoke_expect": "^OK$", "health_timeout": 5,
             "bench_requests": 1, "bench_tokens": 8}


def test_sglang_gate_module_quotes_no_key_from_a_200_smoke_answer(echo_ok):
    failed, result, raw = run_module("sglang_gate", dict(GATE_ARGS, base_url=echo_ok.url, api_key=KEY))
    assert not failed and result["ok"] is False and result["gate"] == "smoke"
    assert "does not match" in result["cause"] and "ct200_rollout_smoke_expect" in result["fix"]
    assert_no_secret(raw)


def test_sglang_gate_module_quotes_no_key_from_an_error_body(echo_error):
    failed, result, raw = run_module("sglang_gate", dict(GATE_ARGS, base_url=echo_error.url, api_key=KEY))
    assert result["gate"] == "smoke" and "HTTP 500" in result["cause"] and "journal" in result["fix"]
    assert_no_secret(raw)
    failed, result, raw = run_module("sglang_gate", dict(GATE_ARGS, mode="measure", base_url=echo_error.url,
                                                         api_key=KEY))
    assert result["ok"] is False and "HTTP 500" in result["cause"]
    assert_no_secret(raw)


def test_the_gate_functions_and_the_rollout_message_hold_no_key(echo_ok, echo_error):
    verdict = sglang_gate.evaluate(sglang_gate.Client(echo_ok.url, KEY), "kimi", {}, "dflash", "^OK$",
                                   health_timeout=5, bench_requests=1, bench_tokens=8)
    assert verdict["gate"] == "smoke"
    assert_no_secret(json.dumps(verdict))
    assert_no_secret(rollout_failure(verdict, "fleet-1", restored="r0123456789ab", secrets=[KEY]))
    measured = sglang_gate.measure(sglang_gate.Client(echo_error.url, KEY), "kimi", 1, 8)
    assert_no_secret(measured["error"])
    # the switch failed in the role's run path: the failed task's message quoted the instance
    said = "Status code was 500: " + json.dumps({"error": "x" * 150 + "Bearer " + KEY})
    message = rollout_failure({"skipped": True}, "fleet-2", "Run | wait until healthy | kimi", said, secrets=[KEY])
    assert_no_secret(message)
    assert "gate health_generate failed" in message and "Fix:" in message


def test_the_roles_readiness_verdict_and_journal_tail_hold_no_key():
    completion = {"choices": [{"message": {"content": "OK " + urllib.parse.quote(KEY, safe="")}}]}
    verdict = sglang_verdict.readiness(completion, [{"avg_spec_accept_length": "Bearer " + KEY}], "dflash", 1.0, 3,
                                       secrets=[KEY])
    assert verdict["ok"] is False and "not a number" in verdict["msg"]
    assert_no_secret(json.dumps(verdict))
    # SGLang 0.5.23 logs server_args with the key at start; the failed start prints the journal tail
    journal = ["[2026-12-02] server_args={'api_key': %r, 'port': 30000}" % KEY, "ValueError: weights not found"]
    printed = redact_filter(journal, [KEY])
    assert_no_secret(json.dumps(printed))
    assert printed[1] == journal[1]


# --- the redaction itself ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("echo", [
    KEY, urllib.parse.quote(KEY, safe=""), urllib.parse.quote(KEY), urllib.parse.quote_plus(KEY),
    urllib.parse.quote(urllib.parse.quote(KEY, safe=""), safe=""), json.dumps({"k": KEY}), repr(KEY),
    json.dumps(json.dumps({"authorization": "Bearer " + KEY})),  # JSON inside JSON: withheld whole
    "".join("\\u%04x" % ord(c) for c in KEY),  # every character escaped: withheld whole
    "Authorization: Bearer%20" + urllib.parse.quote(KEY, safe=""),
])
def test_redact_masks_a_known_key_in_every_encoding(echo):
    from ansible_collections.ct200.deploy.plugins.module_utils.redact import redact, shorten
    out = redact("the router said: " + echo + " (HTTP 500)", [KEY])
    assert_no_secret(out)
    cut = shorten("x" * 95 + echo, 100, [KEY])  # redacted before the cut: no head of the key survives
    assert "Zq7" not in cut and len(cut) <= 103


def test_redact_masks_token_shapes_after_an_escape_and_leaves_plain_words():
    from ansible_collections.ct200.deploy.plugins.module_utils.redact import redact
    for text in ("x%22" + ECHO_HF_TOKEN, "token%3D" + ECHO_HF_TOKEN, "Bearer+abcdefghij", "api_key%3Dabcdefgh"):
        assert "EchoedFrom" not in redact(text) and "abcdefgh" not in redact(text)
    plain = "gate smoke failed: measured HTTP 500; fix: read journalctl -u sglang@kimi (hf_download, api_key option)"
    assert redact(plain, [KEY]) == plain
