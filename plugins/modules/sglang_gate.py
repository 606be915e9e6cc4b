#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: ct200-deploy developers
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_gate
short_description: Gate a switched SGLang instance on health, content, speculation, throughput and acceptance
version_added: "0.3.0"
description:
  - Runs on the host, against the instance on loopback, the rollout's gates in order and stops at the first that fails
    - C(health_generate) (200 within O(health_timeout)), C(smoke) (a chat completion whose answer matches
    O(smoke_expect)), C(server_info) (the release's C(speculative_algorithm) and C(speculative_draft_model_path),
    O(expected)), C(throughput) (O(bench_requests) sequential completions of O(bench_tokens) tokens; decode tok/s at or
    above O(min_ratio) x O(baseline_tok_s)) and C(acceptance) (C(internal_states[0].avg_spec_accept_length) after those
    requests at or above O(min_accept_length)).
  - Never fails the task itself - RV(ok) false with RV(gate), RV(measured), RV(cause) and RV(fix) let the rollout move
    the host back to its previous release first.
  - O(mode=measure) only benchmarks (the serving release's figures, recorded before a rollout as its baseline).
  - The decisions live in module_utils sglang_gate (unit-tested).
author: ct200-deploy developers (@ct200-deploy)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details: Sends only read-only requests; in check mode it sends none and returns RV(ok) true with no figures.
  diff_mode:
    support: none
  platform:
    platforms: posix
options:
  mode:
    description: C(gate) runs every gate; C(measure) only the benchmark and the acceptance read.
    type: str
    choices: [gate, measure]
    default: gate
  base_url:
    description: The instance's URL from the host, e.g. C(http://127.0.0.1:30000).
    type: str
    required: true
  api_key:
    description: The instance's API key when it requires one.
    type: str
  model:
    description: The served model name the requests name.
    type: str
    required: true
  algorithm:
    description: The release's speculative algorithm (C(none), C(dflash), C(ddtree)); the acceptance gate only applies to
      speculative ones.
    type: str
    default: none
  expected:
    description: What C(/server_info) must report (the C(expected_server_info) sglang_service returns).
    type: dict
    default: {}
  smoke_expect:
    description: Regular expression the smoke completion's answer must match (empty - any non-empty answer).
    type: str
    default: ""
  min_accept_length:
    description: Acceptance floor (inclusive).
    type: float
  baseline_tok_s:
    description: The previous release's decode tok/s on this host (null - the gate records the first figure).
    type: float
  min_ratio:
    description: Fraction of O(baseline_tok_s) the new release must reach.
    type: float
    default: 0.8
  bench_requests:
    description: Sequential benchmark requests.
    type: int
    default: 3
  bench_tokens:
    description: Tokens per benchmark request (C(max_tokens) with C(ignore_eos)).
    type: int
    default: 128
  health_timeout:
    description: Seconds to wait for C(/health_generate) to answer 200.
    type: int
    default: 60
"""

EXAMPLES = r"""
- name: Gates of the new release
  ct200.deploy.sglang_gate:
    base_url: http://127.0.0.1:30000
    model: kimi-k2.6
    algorithm: dflash
    expected: "{{ sglang_service_plan.expected_server_info }}"
    smoke_expect: "(?i)\\bok\\b"
    min_accept_length: 2.0
    baseline_tok_s: "{{ release.current.measured.decode_tok_s }}"
  register: gate
"""

RETURN = r"""
ok:
  description: Whether every gate passed.
  returned: always
  type: bool
gate:
  description: The gate that failed (C(health_generate), C(smoke), C(server_info), C(throughput), C(acceptance)).
  returned: always
  type: str
measured:
  description: What the failed gate measured.
  returned: always
  type: raw
cause:
  description: Why the gate failed.
  returned: always
  type: str
fix:
  description: What to do about it.
  returned: always
  type: str
msg:
  description: One line - the gate, measured value, cause and fix, or the figures of a pass.
  returned: always
  type: str
figures:
  description: C(decode_tok_s), C(accept_length) measured, and C(baseline_tok_s).
  returned: always
  type: dict
passed:
  description: The gates that passed, in order.
  returned: always
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.ct200.deploy.plugins.module_utils import sglang_gate as gate
from ansible_collections.ct200.deploy.plugins.module_utils.redact import scrub


def main():
    module = AnsibleModule(
        argument_spec=dict(
            mode=dict(type="str", choices=["gate", "measure"], default="gate"),
            base_url=dict(type="str", required=True),
            api_key=dict(type="str", no_log=True),
            model=dict(type="str", required=True),
            algorithm=dict(type="str", default="none"),
            expected=dict(type="dict", default={}),
            smoke_expect=dict(type="str", default=""),
            min_accept_length=dict(type="float"),
            baseline_tok_s=dict(type="float"),
            min_ratio=dict(type="float", default=0.8),
            bench_requests=dict(type="int", default=3),
            bench_tokens=dict(type="int", default=128, no_log=False),
            health_timeout=dict(type="int", default=60),
        ),
        supports_check_mode=True,
    )
    p = module.params
    empty = {"decode_tok_s": None, "accept_length": None, "baseline_tok_s": p["baseline_tok_s"]}
    if module.check_mode:
        module.exit_json(changed=False, ok=True, gate=None, measured=None, cause=None, fix=None, figures=empty,
                         passed=[], msg="check mode: no request sent")
    if not 0 < p["min_ratio"] <= 10 or p["bench_requests"] < 1 or p["bench_tokens"] < 1:
        module.fail_json(msg="min_ratio must be above 0, bench_requests and bench_tokens at least 1 (got %s, %s, %s)"
                             % (p["min_ratio"], p["bench_requests"], p["bench_tokens"]))
    client = gate.Client(p["base_url"], p["api_key"])
    if p["mode"] == "measure":
        figures = scrub(gate.measure(client, p["model"], p["bench_requests"], p["bench_tokens"]), client.secrets)
        module.exit_json(changed=False, ok=figures["error"] is None, gate=None, measured=None, cause=figures["error"],
                         fix=None, figures=dict(empty, **{k: figures[k] for k in ("decode_tok_s", "accept_length")}),
                         passed=[], msg="measured %s tok/s decode" % figures["decode_tok_s"])
    result = gate.evaluate(client, p["model"], p["expected"], p["algorithm"], p["smoke_expect"],
                           p["min_accept_length"], p["baseline_tok_s"], p["min_ratio"], p["bench_requests"],
                           p["bench_tokens"], p["health_timeout"])
    # the instance's words, redacted on the way out (every encoding of the key the client sent)
    module.exit_json(changed=False, **scrub(result, client.secrets))


if __name__ == "__main__":
    main()
