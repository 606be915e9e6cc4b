# -*- coding: utf-8 -*-
# Copyright: ct200-deploy developers
# SPDX-License-Identifier: Apache-2.0
"""Filter of playbooks/rollout.yml; the decisions live in module_utils/sglang_gate.py."""

from __future__ import annotations

from ansible_collections.ct200.deploy.plugins.module_utils.sglang_gate import failure_message, switch_failure


def rollout_failure(gate_result, host, failed_task=None, failed_msg=None, restored=None, secrets=None, failure=None):
    """The rollout's one message for a host whose switch or gate failed; ``secrets`` (the API key) are masked in
    it in every encoding, as are token-shaped strings (the failed task's message may quote the instance).
    ``failure``: what the role's run path kept when it failed (``sglang_service_failure``: task, msg, exited);
    it names the gate better than the outer failed task, which is the role's closing ``did not come up``."""
    secrets = [s for s in (secrets or []) if isinstance(s, str)]
    verdict = gate_result if isinstance(gate_result, dict) and gate_result.get("gate") else None
    if verdict is None and isinstance(failure, dict) and failure.get("task"):
        verdict = switch_failure(str(failure["task"]), str(failure.get("msg") or ""), secrets,
                                 exited=failure.get("exited") or None)
    if verdict is None:
        verdict = switch_failure(str(failed_task or ""), str(failed_msg or ""), secrets)
    return failure_message(str(host), verdict, restored or None, secrets)


class FilterModule(object):
    def filters(self):
        return {"rollout_failure": rollout_failure}
