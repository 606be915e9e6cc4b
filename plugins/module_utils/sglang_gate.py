# -*- coding: utf-8 -*-
# Copyright: ct200-deploy developers
# SPDX-License-Identifier: Apache-2.0
"""Rollout gates of a switched SGLang instance (PRIVATE to the collection; module ct200.deploy.sglang_gate).

A release that serves is not yet a good release: a drafter that no longer matches its target
drops acceptance to 1.0 while the outputs stay the same, an upgrade can cut decode throughput
to a third. After the switch, in this order, each gate one decision here:

1. ``health_generate`` -- ``GET /health_generate`` answers 200 (polled up to ``health_timeout``).
2. ``smoke`` -- one chat completion; its content (or reasoning_content) is not empty and matches
   ``smoke_expect`` (a regular expression).
3. ``server_info`` -- ``/server_info`` reports the release's ``speculative_algorithm`` and
   ``speculative_draft_model_path`` (what sglang_service's ``expected_server_info`` says).
4. ``throughput`` -- a short fixed benchmark: ``bench_requests`` sequential chat completions of
   ``bench_tokens`` tokens (``ignore_eos``), decode tok/s = completion tokens / seconds, at or
   above ``min_ratio`` x the previous release's recorded figure on this host (no figure yet: the
   gate passes and records the first).
5. ``acceptance`` -- after those requests (the warm-up), ``internal_states[0].avg_spec_accept_length``
   at or above ``min_accept_length``.

``evaluate`` returns ``{"ok", "gate", "measured", "cause", "fix", "msg", "figures"}``: the first
failing gate with its measured value, or ok with every figure (decode_tok_s, accept_length).

Every word of the instance that is quoted (an error body, the smoke answer) goes through the one redaction
with the API key the client sent (``Client.secrets``) before it is cut, and the verdict is scrubbed again on
its way out: a hostile or broken server may echo the request's ``Authorization`` header or its environment.
"""

from __future__ import annotations

import json
import math
import re
import time
import urllib.error
import urllib.request
from typing import Any, Callable, Dict, List, Optional, Tuple

from ansible_collections.ct200.deploy.plugins.module_utils import sglang_verdict as verdict
from ansible_collections.ct200.deploy.plugins.module_utils.redact import scrub, shorten

GATES = ("health_generate", "smoke", "server_info", "throughput", "acceptance")
ANSWER_LIMIT = 4 * 1024 * 1024
SMOKE_PROMPT = "Reply with the single word OK."
BENCH_PROMPT = "Count upwards from 1, one number per line, and do not stop."


class GateFailed(Exception):
    def __init__(self, gate: str, measured: Any, cause: str, fix: str):
        Exception.__init__(self, cause)
        self.gate, self.measured, self.cause, self.fix = gate, measured, cause, fix


# ---------------------------------------------------------------------------
# Decisions (pure)
def judge_health(status: Optional[int], waited: float, detail: str = "") -> None:
    if status != 200:
        raise GateFailed("health_generate", status if status is not None else "no answer",
                         "/health_generate answered %s after %.0f s%s: the new release does not generate"
                         % (status if status is not None else "nothing", waited, (" (%s)" % detail) if detail else ""),
                         "read the unit's journal on the host (journalctl -u sglang@NAME) for the load error of the "
                         "new release's weights or SGLang version; fix the release (revision, version, flags) and "
                         "run the rollout again")


def judge_smoke(status: Optional[int], completion: Any, expect: str, secrets=()) -> str:
    if status != 200:
        raise GateFailed("smoke", "HTTP %s" % status, "the smoke completion answered HTTP %s: %s"
                         % (status, _short(completion, secrets)),
                         "read the unit's journal for the request's error; a release that fails requests is not "
                         "served: fix it and run the rollout again")
    try:
        field, text = verdict.smoke_answer(completion)
    except verdict.VerdictError as exc:
        raise GateFailed("smoke", "empty answer", str(exc), "check the chat template and reasoning parser of the "
                         "new release")
    if expect and not re.search(expect, text):
        raise GateFailed("smoke", _short(text, secrets), "the smoke completion's %s %r does not match %r: the "
                         "release answers, but not what this model answers" % (field, _short(text, secrets, 120), expect),
                         "check that the target weights are the model you meant (revision) and its chat template; "
                         "or set ct200_rollout_smoke_expect to what this model answers")
    return text


def judge_server_info(info: Any, expected: Dict[str, Any]) -> None:
    info = info if isinstance(info, dict) else {}
    want_algo = str(expected.get("speculative_algorithm") or "").upper()
    got_algo = str(info.get("speculative_algorithm") or "").upper()
    if want_algo and want_algo not in ("NONE",) and got_algo != want_algo:
        raise GateFailed("server_info", got_algo or None, "/server_info reports speculative_algorithm %r, the release "
                         "renders %r: the instance does not run the new release's speculation" % (got_algo, want_algo),
                         "check the unit's ExecStart (--speculative-algorithm) and that this SGLang build supports "
                         "it (the journal says why it fell back)")
    want_draft = expected.get("speculative_draft_model_path")
    got_draft = info.get("speculative_draft_model_path")
    if want_draft and got_draft != want_draft:
        raise GateFailed("server_info", got_draft, "/server_info reports speculative_draft_model_path %r, the release "
                         "renders %r: the instance runs another drafter" % (got_draft, want_draft),
                         "the unit on the host is not the one rendered for this release: run the rollout again "
                         "(the switch rewrites it) and check nothing else manages sglang@NAME")


def judge_throughput(tok_s: Optional[float], baseline: Optional[float], min_ratio: float) -> None:
    if tok_s is None or not math.isfinite(tok_s) or tok_s <= 0:
        raise GateFailed("throughput", tok_s, "the benchmark measured no decode throughput (no completion tokens)",
                         "read the journal; the release generates nothing")
    if baseline and tok_s < min_ratio * baseline:
        raise GateFailed("throughput", round(tok_s, 2), "decode throughput %.1f tok/s is %.0f %% of the previous "
                         "release's %.1f tok/s on this host, below the floor of %.0f %% "
                         "(ct200_rollout_min_throughput_ratio)"
                         % (tok_s, 100.0 * tok_s / baseline, baseline, 100.0 * min_ratio),
                         "compare the two releases' SGLang versions and flags (attention backend, cuda graphs, "
                         "speculative settings) and the drafter; roll out a release that is not slower, or lower "
                         "ct200_rollout_min_throughput_ratio if the slowdown is intended")


def judge_acceptance(internal_states: Any, floor: Optional[float], algorithm: str) -> Optional[float]:
    if str(algorithm or "none").lower() not in verdict.SPECULATIVE:
        return None
    state = internal_states[0] if isinstance(internal_states, list) and internal_states else {}
    value = state.get("avg_spec_accept_length") if isinstance(state, dict) else None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise GateFailed("acceptance", value, "/server_info internal_states[0].avg_spec_accept_length is %r after "
                         "the warm-up requests: the drafter never verified a step" % (value,),
                         "check speculative_algorithm and the drafter in /server_info and the journal's accept "
                         "lines")
    if floor is not None and value < floor:
        raise GateFailed("acceptance", round(float(value), 3), "the drafter accepts %.2f tokens per verify step "
                         "after the warm-up, below the floor %s (ct200_rollout_min_accept_length): speculation gains "
                         "nothing, the drafter does not match the target" % (value, floor),
                         "roll out a drafter revision trained for this target revision (or the previous drafter), "
                         "check the draft attention backend; lower ct200_rollout_min_accept_length only if this "
                         "rate is expected")
    return float(value)


def decode_rate(samples) -> Optional[float]:
    """tokens / seconds over (completion_tokens, seconds) samples."""
    tokens = sum(sample[0] for sample in samples)
    seconds = sum(sample[1] for sample in samples)
    return tokens / seconds if seconds > 0 and tokens > 0 else None


# ---------------------------------------------------------------------------
# The instance, over HTTP (on the host: loopback)
class Client(object):
    def __init__(self, base_url: str, api_key: Optional[str] = None, timeout: float = 300.0):
        self.base = base_url.rstrip("/")
        self.headers = {"Content-Type": "application/json"}
        self.secrets = (api_key,) if api_key else ()  # what the instance may echo back: masked in every verdict
        if api_key:
            self.headers["Authorization"] = "Bearer %s" % api_key
        self.timeout = timeout

    def call(self, path: str, body: Any = None, timeout: Optional[float] = None) -> Tuple[Optional[int], Any]:
        data = json.dumps(body).encode("utf-8") if body is not None else None
        request = urllib.request.Request(self.base + path, data=data, headers=self.headers)
        try:
            with urllib.request.build_opener().open(request, timeout=timeout or self.timeout) as answer:  # nosec: loopback
                return answer.status, _json(answer.read(ANSWER_LIMIT))
        except urllib.error.HTTPError as exc:
            return exc.code, _json(exc.read(ANSWER_LIMIT))
        except (OSError, ValueError) as exc:
            return None, str(exc)


def _json(raw: bytes) -> Any:
    try:
        return json.loads(raw or b"null")
    except ValueError:
        return raw[:4096].decode("utf-8", "replace")  # cut by _short, after the redaction


def _short(value: Any, secrets=(), limit: int = 200) -> str:
    """The instance's words as a message may quote them: redacted first, then cut (a cut first could keep the
    head of a key that no rule recognises then)."""
    text = value if isinstance(value, str) else json.dumps(value)[:1 << 16]
    return shorten(text, limit, secrets)


def bench(client: Client, model: str, bench_requests: int, bench_tokens: int,
          clock: Callable[[], float]) -> Tuple[List[Tuple[int, float]], Optional[Tuple[Any, Any]]]:
    """The throughput benchmark, one request after the other: ``(samples, refused)``, samples the (completion
    tokens, seconds) of each answered request, refused ``(status, answer)`` of the first request not answered
    200 (the benchmark stops there), else None.  The gate and ``measure`` judge the same requests."""
    samples = []
    for _request in range(max(1, int(bench_requests))):
        t1 = clock()
        status, answer = client.call("/v1/chat/completions", {
            "model": model, "messages": [{"role": "user", "content": BENCH_PROMPT}],
            "max_tokens": int(bench_tokens), "temperature": 0, "ignore_eos": True})
        elapsed = clock() - t1
        if status != 200:
            return samples, (status, answer)
        usage = answer.get("usage") if isinstance(answer, dict) and isinstance(answer.get("usage"), dict) else {}
        samples.append((int(usage.get("completion_tokens") or 0), elapsed))
    return samples, None


def evaluate(client: Client, model: str, expected: Dict[str, Any], algorithm: str, smoke_expect: str = "",
             min_accept_length: Optional[float] = None, baseline_tok_s: Optional[float] = None,
             min_ratio: float = 0.8, bench_requests: int = 3, bench_tokens: int = 128, health_timeout: float = 60,
             clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep) -> Dict[str, Any]:
    """Run the gates in order against a switched instance; the verdict dict (see the module docstring)."""
    figures: Dict[str, Any] = {"decode_tok_s": None, "accept_length": None, "baseline_tok_s": baseline_tok_s}
    passed = []
    secrets = getattr(client, "secrets", ())
    try:
        t0, status, detail = clock(), None, ""
        while True:
            status, answer = client.call("/health_generate", timeout=30)
            if status == 200:
                break
            detail = _short(answer, secrets) if status is None else ""
            if clock() - t0 >= health_timeout:
                break
            sleep(2)
        judge_health(status, clock() - t0, detail)
        passed.append("health_generate")

        status, answer = client.call("/v1/chat/completions", {
            "model": model, "messages": [{"role": "user", "content": SMOKE_PROMPT}], "max_tokens": 16})
        judge_smoke(status, answer, smoke_expect, secrets)
        passed.append("smoke")

        status, info = client.call("/server_info")
        judge_server_info(info if status == 200 else {}, expected)
        passed.append("server_info")

        samples, refused = bench(client, model, bench_requests, bench_tokens, clock)
        if refused:
            status, answer = refused
            raise GateFailed("throughput", "HTTP %s" % status, "a benchmark request answered HTTP %s: %s"
                             % (status, _short(answer, secrets)), "read the unit's journal for the request's error")
        rate = decode_rate(samples)
        figures["decode_tok_s"] = round(rate, 3) if rate else rate
        judge_throughput(rate, baseline_tok_s, float(min_ratio))
        passed.append("throughput")

        status, info = client.call("/server_info")
        states = info.get("internal_states") if status == 200 and isinstance(info, dict) else None
        figures["accept_length"] = judge_acceptance(states, min_accept_length, algorithm)
        passed.append("acceptance")
    except GateFailed as exc:
        return scrub({"ok": False, "gate": exc.gate, "measured": exc.measured, "cause": exc.cause, "fix": exc.fix,
                      "msg": "gate %s failed: measured %s; cause: %s; fix: %s" % (exc.gate, exc.measured, exc.cause,
                                                                                  exc.fix),
                      "figures": figures, "passed": passed}, secrets)
    return {"ok": True, "gate": None, "measured": None, "cause": None, "fix": None, "figures": figures,
            "passed": passed,
            "msg": "every gate passed: %s tok/s decode%s%s" % (
                figures["decode_tok_s"], "" if baseline_tok_s is None else " (previous %s)" % baseline_tok_s,
                "" if figures["accept_length"] is None else ", accept length %.2f" % figures["accept_length"])}


def measure(client: Client, model: str, bench_requests: int = 3, bench_tokens: int = 128,
            clock: Callable[[], float] = time.monotonic) -> Dict[str, Any]:
    """Only the throughput benchmark and the acceptance read (the serving release's figures, before a rollout)."""
    secrets = getattr(client, "secrets", ())
    samples, refused = bench(client, model, bench_requests, bench_tokens, clock)
    if refused:
        status, answer = refused
        return {"decode_tok_s": None, "accept_length": None,
                "error": "HTTP %s: %s" % (status, _short(answer, secrets))}
    rate = decode_rate(samples)
    status, info = client.call("/server_info")
    states = info.get("internal_states") if status == 200 and isinstance(info, dict) else None
    state = states[0] if isinstance(states, list) and states and isinstance(states[0], dict) else {}
    accept = state.get("avg_spec_accept_length")
    return {"decode_tok_s": round(rate, 3) if rate else None,
            "accept_length": float(accept) if isinstance(accept, (int, float)) and not isinstance(accept, bool)
            else None, "error": None}


def failure_message(host: str, verdict_: Dict[str, Any], restored: Optional[str], secrets=()) -> str:
    """The rollout's one message for a failed gate on host (restored: the release it is back on), redacted."""
    text = ("%s: gate %s failed, measured %s. Cause: %s. %s Fix: %s; then run ct200 rollout again (hosts already on "
            "the new release are skipped)." % (
                host, verdict_.get("gate"), verdict_.get("measured"), verdict_.get("cause"),
                ("The host is back on its previous release %s and serves." % restored) if restored
                else "The host could not be moved back (no previous release recorded).", verdict_.get("fix")))
    return scrub(text, secrets)


def _exit_words(exited: str) -> str:
    """'Result=exit-code, status 1' out of the health wait's sentence (or the sentence itself)."""
    found = re.search(r"\((Result=[^)]*)\)", exited)
    return found.group(1) if found else exited


def switch_failure(task_name: str, msg: str, secrets=(), exited: Optional[str] = None) -> Dict[str, Any]:
    """A verdict for a switch that failed inside the role's run path (the instance never came up): the gate is the
    role's task that failed (TASK_NAME and MSG as the role's rescue keeps them in ``sglang_service_failure``), EXITED
    the health wait's structured answer when the process exited (systemd's Result= and status)."""
    text = "%s %s" % (task_name or "", msg or "")
    if "wait until healthy" in text:
        gate, measured = "health_generate", ("the process exited (%s) before it answered" % _exit_words(exited)
                                             if exited else "not 200 before the start timeout")
    elif "serves what was rendered" in text:
        gate, measured = "server_info", "mismatch"
    elif "drafter accepts" in text or "the answer is not empty" in text:
        found = re.search(r"accepts ([0-9]+(?:\.[0-9]+)?) tokens", text)
        gate = "acceptance" if found or "drafter accepts" in text else "smoke"
        measured = float(found.group(1)) if found else "below the role's min_accept_length"
    elif "start " in text:
        gate, measured = "health_generate", "the unit did not start"
    else:
        gate, measured = "switch", "failed"
    return {"ok": False, "gate": gate, "measured": measured,
            "cause": "the new release did not come up in the role's run path: %s" % _short(msg or task_name, secrets),
            "fix": "read the journal tail printed above for the new release's error, fix the release (revision, "
                   "SGLang version, flags)"}
