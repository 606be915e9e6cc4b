# SPDX-License-Identifier: Apache-2.0
"""Rollout gates: each decision, in order, on what an instance answers (a scripted client and a fake clock)."""
from ansible_collections.ct200.deploy.plugins.module_utils import sglang_gate as gate
from ansible_collections.ct200.deploy.plugins.filter.rollout import rollout_failure
from fakeclock import FakeClock as Clock

EXPECTED = {"speculative_algorithm": "DFLASH", "speculative_draft_model_path": "/m/d/snapshots/" + "e" * 40}


class Instance(object):
    """Answers like the stand-in: tok_s paces completions on the fake clock."""

    def __init__(self, clock, tok_s=40.0, accept=3.5, draft=None, health=200, answer="OK", ready_after=0.0):
        self.clock, self.tok_s, self.accept, self.health, self.answer = clock, tok_s, accept, health, answer
        self.draft = draft or EXPECTED["speculative_draft_model_path"]
        self.ready_after, self.calls = ready_after, []

    def call(self, path, body=None, timeout=None):
        self.calls.append(path)
        if path == "/health_generate":
            return (self.health if self.clock() >= self.ready_after else 503), None
        if path == "/server_info":
            return 200, {"speculative_algorithm": "DFLASH", "speculative_draft_model_path": self.draft,
                         "internal_states": [{"avg_spec_accept_length": self.accept}]}
        tokens = body["max_tokens"]
        self.clock.now += tokens / self.tok_s
        return 200, {"choices": [{"message": {"content": self.answer}}], "usage": {"completion_tokens": tokens}}


def run(instance, clock, **kw):
    args = dict(min_accept_length=2.0, baseline_tok_s=40.0, min_ratio=0.8, bench_requests=2, bench_tokens=32,
                health_timeout=20, smoke_expect="(?i)ok")
    args.update(kw)
    return gate.evaluate(instance, "kimi-k2.6", EXPECTED, "dflash", clock=clock, sleep=clock.sleep, **args)


def test_a_good_release_passes_every_gate_with_its_figures():
    clock = Clock()
    out = run(Instance(clock, tok_s=39.0, ready_after=5), clock)
    assert out["ok"] and out["passed"] == list(gate.GATES)
    assert abs(out["figures"]["decode_tok_s"] - 39.0) < 1e-6 and out["figures"]["accept_length"] == 3.5
    clock = Clock()
    first = run(Instance(clock), clock, baseline_tok_s=None)  # no figure yet: passes and measures
    assert first["ok"] and first["figures"]["decode_tok_s"] == 40.0


def test_each_bad_release_fails_its_own_gate_with_the_measured_value():
    cases = [
        (dict(health=503), {}, "health_generate", 503),
        (dict(answer="   "), {}, "smoke", "empty answer"),
        (dict(answer="I am a teapot"), {}, "smoke", "I am a teapot"),
        (dict(draft="/m/d/snapshots/" + "d" * 40), {}, "server_info", "/m/d/snapshots/" + "d" * 40),
        (dict(tok_s=28.0), {}, "throughput", 28.0),      # -30 %
        (dict(accept=1.0), {}, "acceptance", 1.0),
    ]
    for inst, kw, want_gate, measured in cases:
        clock = Clock()
        out = run(Instance(clock, **inst), clock, **kw)
        assert not out["ok"] and out["gate"] == want_gate and out["measured"] == measured, (inst, out)
        assert out["cause"] and out["fix"] and out["msg"].startswith("gate %s failed" % want_gate)
    clock = Clock()
    assert run(Instance(clock, tok_s=32.5), clock)["ok"]  # 81 %: above the 80 % floor
    clock = Clock()
    assert run(Instance(clock, accept=2.0), clock)["ok"]  # the floor is inclusive
    clock = Clock()
    never = Instance(clock, ready_after=1e9)
    out = run(never, clock)
    assert out["gate"] == "health_generate" and clock.now >= 20 and "/v1/chat/completions" not in never.calls


class RefusesBench(Instance):
    """Answers the smoke request and the first benchmark request, then HTTP 500."""

    def call(self, path, body=None, timeout=None):
        if path == "/v1/chat/completions" and self.calls.count(path) >= 2:
            self.calls.append(path)
            return 500, {"error": "CUDA out of memory"}
        return super().call(path, body, timeout)


def test_gate_and_measure_stop_the_benchmark_at_the_first_refused_request():
    clock = Clock()
    inst = RefusesBench(clock)
    out = run(inst, clock, bench_requests=3)
    assert not out["ok"] and out["gate"] == "throughput" and out["measured"] == "HTTP 500"
    assert "CUDA out of memory" in out["cause"] and inst.calls.count("/v1/chat/completions") == 3  # smoke + 2
    clock = Clock()
    figures = gate.measure(RefusesBench(clock), "kimi-k2.6", bench_requests=3, bench_tokens=32, clock=clock)
    assert figures["decode_tok_s"] is None and figures["error"].startswith("HTTP 500: ")
    clock = Clock()
    good = gate.measure(Instance(clock), "kimi-k2.6", bench_requests=2, bench_tokens=32, clock=clock)
    assert good == {"decode_tok_s": 40.0, "accept_length": 3.5, "error": None}


def test_the_rollouts_message_names_host_gate_value_cause_fix_and_where_the_host_is():
    clock = Clock()
    result = run(Instance(clock, accept=1.0), clock)
    msg = rollout_failure(result, "fleet-1", restored="r0123456789ab")
    assert msg.startswith("fleet-1: gate acceptance failed, measured 1.0. Cause: the drafter accepts 1.00")
    assert "back on its previous release r0123456789ab" in msg and "Fix: roll out a drafter revision" in msg
    switched = rollout_failure({"skipped": True}, "fleet-4", "Run | did not come up | kimi",
                               "sglang@kimi.service failed in 'Run | wait until healthy | kimi': ...", "r0123456789ab")
    assert switched.startswith("fleet-4: gate health_generate failed") and "journal" in switched
    assert "not 200 before the start timeout" in switched
    # what the role's rescue kept (sglang_service_failure): the health wait's structured exit, not its message
    kept = {"task": "Run | wait until healthy | kimi", "msg": "sglang@kimi.service stopped before ... answered 200",
            "exited": "the main process exited (Result=exit-code, status 1) and systemd gave up"}
    crashed = rollout_failure({"skipped": True}, "fleet-4", "Run | did not come up | kimi", "any words", "r0123456789ab",
                              failure=kept)
    assert "measured the process exited (Result=exit-code, status 1) before it answered" in crashed
    never = rollout_failure({"skipped": True}, "fleet-4", "Run | did not come up | kimi", "", "r0",
                            failure=dict(kept, exited=None))
    assert "measured not 200 before the start timeout" in never
    # a gate's own verdict wins over the role's record; an empty record falls back to the failed task
    assert rollout_failure(result, "fleet-1", failure=kept).startswith("fleet-1: gate acceptance failed")
    assert rollout_failure(None, "fleet-5", "Rollout | the release the switch rendered", "unreadable", "r0",
                           failure=None).startswith("fleet-5: gate switch failed")
    assert "could not be moved back" in rollout_failure(result, "fleet-1")
    role = rollout_failure(None, "fleet-2", "Run | did not come up | kimi",
                           "sglang@kimi.service failed in 'Run | the answer is not empty and the drafter accepts tokens | "
                           "kimi': sglang@kimi.service: the drafter accepts 1.00 tokens per verify step on average", "r1")
    assert role.startswith("fleet-2: gate acceptance failed, measured 1.0.")
