# SPDX-License-Identifier: Apache-2.0
"""The SGLang test stand-in: SGLang's own parser decides, the stand-in only serves what it parsed."""
import json
import os
import socket
import subprocess
import time
import urllib.error
import urllib.request

from conftest import REPO, kimi_params, plan, real_dialect, require_parse_venv
from ansible_collections.ct200.deploy.plugins.module_utils import sglang_verdict as verdict

STANDIN = os.path.join(REPO, "tests", "support", "sglang_standin", "sglang_standin.py")


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def get(url):
    with urllib.request.urlopen(url, timeout=5) as answer:
        return answer.status, answer.read()


def call(url, body=None, key=None):
    """(status, JSON body) of a GET or, with body, a POST; HTTP errors are answers too."""
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = "Bearer %s" % key
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=5) as answer:
            return answer.status, json.loads(answer.read() or b"null")
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"null")


def start(python, argv, port, **knobs):
    """Start the stand-in and wait until /health_generate answers 200 (it needs no key)."""
    env = dict(os.environ, CT200_STANDIN_LOAD_SECONDS="0", CT200_STANDIN_WARMUP_SECONDS="1", **knobs)
    proc = subprocess.Popen([python, STANDIN] + argv[3:], stderr=subprocess.PIPE, text=True, env=env)
    deadline, statuses = time.monotonic() + 300, []
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            statuses.append(get("http://127.0.0.1:%d/health_generate" % port)[0])
            if statuses[-1] == 200:
                return proc, statuses
        except OSError as exc:  # refused while "loading", 503 while warming up
            statuses.append(getattr(exc, "code", "refused"))
        time.sleep(0.3)
    proc.terminate()
    raise AssertionError((statuses[-5:], proc.communicate(timeout=30)[1][-3000:]))


CHAT = {"model": "kimi-k2.6", "messages": [{"role": "user", "content": "Say hi"}], "max_tokens": 8}


def test_standin_serves_what_sglangs_parser_parsed(mdir):
    python = require_parse_venv("0.5.23")
    port = free_port()
    spec, resolved, argv = plan(kimi_params(mdir, port=port), real_dialect("0.5.23"))
    env = dict(os.environ, CT200_STANDIN_LOAD_SECONDS="0", CT200_STANDIN_WARMUP_SECONDS="1")
    proc = subprocess.Popen([python, STANDIN] + argv[3:], stderr=subprocess.PIPE, text=True, env=env)
    try:
        deadline, statuses = time.monotonic() + 120, []
        while time.monotonic() < deadline:
            try:
                statuses.append(get("http://127.0.0.1:%d/health_generate" % port)[0])
                if statuses[-1] == 200:
                    break
            except OSError as exc:  # refused while "loading", 503 while warming up
                statuses.append(getattr(exc, "code", "refused"))
            time.sleep(0.3)
        if statuses[-1] != 200:
            proc.terminate()
            raise AssertionError((statuses[-5:], proc.communicate(timeout=30)[1][-3000:]))
        assert 503 in statuses, statuses
        info = json.loads(get("http://127.0.0.1:%d/server_info" % port)[1])
        assert info["standin"] is True and info["version"] == "0.5.23"
        assert info["speculative_algorithm"] == "DFLASH"
        assert info["speculative_draft_model_path"] == mdir["kimi_draft"]
        assert info["speculative_num_draft_tokens"] == 16 and info["tp_size"] == 8
        assert info["model_path"] == mdir["kimi"] and info["cuda_graph_max_bs_decode"] == 16
        models = json.loads(get("http://127.0.0.1:%d/v1/models" % port)[1])
        assert models["data"][0]["id"] == "kimi-k2.6" and models["data"][0]["owned_by"] == "sglang-standin"
        status, answer = call("http://127.0.0.1:%d/v1/chat/completions" % port, CHAT)  # loopback: no key
        assert status == 200 and answer["choices"][0]["message"]["content"].startswith("[sglang-standin")
    finally:
        proc.terminate()
        err = proc.communicate(timeout=30)[1]
    assert proc.returncode == 0
    assert "SGLANG TEST STAND-IN (not SGLang" in err


def test_standin_refuses_a_bad_argv_with_sglangs_message(mdir):
    python = require_parse_venv("0.5.23")
    spec, resolved, argv = plan(kimi_params(mdir), real_dialect("0.5.11"))  # 0.5.11 line on 0.5.23
    proc = subprocess.run([python, STANDIN] + argv[3:], capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 2
    assert "error: ambiguous option: --cuda-graph-max-bs could match --cuda-graph-max-bs-decode" in proc.stderr


def test_standin_answers_chat_completions_and_honours_the_api_key_file(mdir, tmp_path):
    python = require_parse_venv("0.5.23")
    port = free_port()
    secret = tmp_path / "kimi.secret.yaml"
    key = "k-" + os.urandom(8).hex()
    secret.write_text("api-key: %s\n" % key)
    spec, resolved, argv = plan(kimi_params(mdir, port=port, api_key=True), real_dialect("0.5.23"))
    argv = [str(secret) if a == spec.secret_path else a for a in argv]
    assert key not in " ".join(argv)
    proc, statuses = start(python, argv, port)
    base = "http://127.0.0.1:%d" % port
    try:
        assert call(base + "/v1/chat/completions", CHAT) == (401, {"error": "Unauthorized"})
        assert call(base + "/v1/chat/completions", CHAT, key="wrong")[0] == 401
        assert call(base + "/server_info")[0] == 401
        status, answer = call(base + "/v1/chat/completions", CHAT, key=key)
        assert status == 200 and answer["object"] == "chat.completion" and answer["model"] == "kimi-k2.6"
        assert answer["choices"][0]["message"]["role"] == "assistant"
        assert answer["choices"][0]["finish_reason"] == "stop" and "usage" in answer
        assert call(base + "/v1/chat/completions", dict(CHAT, model="other"), key=key)[0] == 404
        assert get(base + "/metrics")[0] == 200  # Prometheus text, open like SGLang's
    finally:
        proc.terminate()
        err = proc.communicate(timeout=30)[1]
    assert key not in err


def test_standin_reports_the_drafters_accept_length_and_the_verdict_reads_it(mdir):
    """Issue 15 item 3 on the stand-in's real field names: internal_states[0].avg_spec_accept_length (absent
    until the first verify step, as in SGLang), a planted low value, an answer only in reasoning_content."""
    python = require_parse_venv("0.5.23")
    port = free_port()
    spec, resolved, argv = plan(kimi_params(mdir, port=port), real_dialect("0.5.23"))
    proc, _statuses = start(python, argv, port, CT200_STANDIN_ANSWER="reasoning", CT200_STANDIN_ACCEPT_LENGTH="1.0")
    base = "http://127.0.0.1:%d" % port
    try:
        before = call(base + "/server_info")[1]["internal_states"]
        status, answer = call(base + "/v1/chat/completions", CHAT)
        states = call(base + "/server_info")[1]["internal_states"]
    finally:
        proc.terminate()
        proc.communicate(timeout=30)
    assert "avg_spec_accept_length" not in before[0]
    assert verdict.readiness(answer, before, "dflash", 1.0, 1)["msg"].startswith(
        "/server_info internal_states[0] has no avg_spec_accept_length after 1 warm-up")
    message = answer["choices"][0]["message"]
    assert status == 200 and message["content"] is None and message["reasoning_content"].startswith("[sglang-standin")
    assert states[0]["avg_spec_accept_length"] == 1.0
    low = verdict.readiness(answer, states, "dflash", 1.0, 1)
    assert not low["ok"] and low["msg"].startswith("the drafter accepts 1.00 tokens per verify step"), low
    assert low["answer_field"] == "reasoning_content"
    assert verdict.readiness(answer, states, "dflash", 0.5, 1)["ok"]


def test_standin_refuses_to_start_without_the_uvm_device(mdir, tmp_path):
    """The boot-order test's check: like cuInit, the stand-in fails while /dev/nvidia-uvm is absent."""
    spec, resolved, argv = plan(kimi_params(mdir), real_dialect("0.5.23"))
    device = tmp_path / "nvidia-uvm"
    env = dict(os.environ, CT200_STANDIN_REQUIRE_DEVICES=str(device))
    proc = subprocess.run([require_parse_venv("0.5.23"), STANDIN] + argv[3:], capture_output=True, text=True,
                          timeout=120, env=env, check=False)
    assert proc.returncode == 1 and "CUDA init failed: %s missing" % device in proc.stderr
