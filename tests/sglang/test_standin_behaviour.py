# SPDX-License-Identifier: Apache-2.0
"""The stand-in's behaviour comes from the model it is started with (standin.json in the drafter's dir)."""
import importlib.util
import json
import os
import subprocess
import time

import pytest

from conftest import REPO, kimi_params, plan, real_dialect, require_parse_venv
from test_standin import CHAT, call, free_port, start

STANDIN = os.path.join(REPO, "tests", "support", "sglang_standin", "sglang_standin.py")


def standin_module():
    spec = importlib.util.spec_from_file_location("sglang_standin_under_test", STANDIN)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_load_behaviour_reads_the_drafters_file_then_the_env_fallback_then_defaults(tmp_path):
    mod = standin_module()
    draft, target = tmp_path / "draft", tmp_path / "target"
    draft.mkdir()
    target.mkdir()
    argv = ["--model-path", str(target), "--speculative-draft-model-path=%s" % draft]
    assert mod.load_behaviour(argv, environ={}) == mod.DEFAULTS
    assert mod.load_behaviour(argv, environ={"CT200_STANDIN_ACCEPT_LENGTH": "1.0"})["accept_length"] == 1.0
    (target / "standin.json").write_text(json.dumps({"never_ready": True}))  # the drafter's dir rules
    assert mod.load_behaviour(argv, environ={})["never_ready"] is False
    (draft / "standin.json").write_text(json.dumps({"decode_tok_s": 28, "accept_length": 1.0, "note": "bad"}))
    got = mod.load_behaviour(argv, environ={"CT200_STANDIN_ACCEPT_LENGTH": "3.0"})
    assert got == dict(mod.DEFAULTS, decode_tok_s=28.0, accept_length=1.0)
    assert mod.load_behaviour(["--model-path", str(target)], environ={})["never_ready"] is True  # no drafter
    (draft / "standin.json").write_text(json.dumps({"hosts": {"fleet-4": {"accept_length": 1.0}}}))
    assert mod.load_behaviour(argv, environ={}, hostname="fleet-4")["accept_length"] == 1.0
    assert mod.load_behaviour(argv, environ={}, hostname="fleet-3")["accept_length"] == 3.5
    for bad in ({"never_ready": "yes"}, {"fail_rate": 2}, {"decode_tok_s": 0}, {"accept_length": True}):
        (draft / "standin.json").write_text(json.dumps(bad))
        with pytest.raises(ValueError, match=next(iter(bad))):
            mod.load_behaviour(argv, environ={})


def test_fail_rate_is_the_share_of_failed_completions():
    mod = standin_module()
    standin = mod.StandIn("0", {}, [], {"fail_rate": 0.25})
    fails = [standin.next_fails() for _call in range(40)]
    assert sum(fails) == 10 and fails[:4] == [False, False, False, True]
    assert not any(mod.StandIn("0", {}, [], {}).next_fails() for _call in range(20))


def test_a_served_standin_decodes_at_its_files_rate_and_crashes_or_never_readies_on_demand(mdir):
    python = require_parse_venv("0.5.23")
    port = free_port()
    _spec, _resolved, argv = plan(kimi_params(mdir, port=port), real_dialect("0.5.23"))
    behaviour = os.path.join(mdir["kimi_draft"], "standin.json")
    try:
        with open(behaviour, "w") as handle:
            json.dump({"decode_tok_s": 100.0, "accept_length": 2.25}, handle)
        proc, _log = start(python, argv, port)
        base = "http://127.0.0.1:%d" % port
        try:
            t0 = time.monotonic()
            status, answer = call(base + "/v1/chat/completions", dict(CHAT, max_tokens=50))
            elapsed = time.monotonic() - t0
            states = call(base + "/server_info")[1]["internal_states"]
        finally:
            proc.terminate()
            proc.communicate(timeout=30)
        assert status == 200 and answer["usage"]["completion_tokens"] == 50
        assert 0.5 <= elapsed < 1.5, elapsed  # 50 tokens at 100 tok/s
        assert states[0]["avg_spec_accept_length"] == 2.25

        with open(behaviour, "w") as handle:
            json.dump({"crash_on_start": True}, handle)
        crashed = subprocess.run([python, STANDIN] + argv[3:], capture_output=True, text=True, timeout=120,
                                 env=dict(os.environ, CT200_STANDIN_LOAD_SECONDS="0"), check=False)
        assert crashed.returncode == 1 and "crash_on_start" in crashed.stderr

        with open(behaviour, "w") as handle:
            json.dump({"never_ready": True}, handle)
        env = dict(os.environ, CT200_STANDIN_LOAD_SECONDS="0", CT200_STANDIN_WARMUP_SECONDS="0")
        proc = subprocess.Popen([python, STANDIN] + argv[3:], stderr=subprocess.PIPE, text=True, env=env)
        try:
            statuses, deadline = [], time.monotonic() + 240  # SGLang's parser first: slow on a loaded machine
            while time.monotonic() < deadline and proc.poll() is None:
                try:
                    statuses.append(call(base + "/health_generate")[0])
                except OSError:
                    statuses.append("refused")
                if statuses.count(503) >= 3:
                    break
                time.sleep(0.3)
            chat = call(base + "/v1/chat/completions", CHAT)[0]
        finally:
            proc.terminate()
            proc.communicate(timeout=30)
        assert statuses.count(503) >= 3 and 200 not in statuses and chat == 503
    finally:
        os.unlink(behaviour)
