# -*- coding: utf-8 -*-
# Copyright: ct200-deploy developers
# SPDX-License-Identifier: Apache-2.0
"""Filters of the sglang_service role; the verdicts live in module_utils/sglang_verdict.py, an instance's
options and run facts in module_utils/sglang_instance.py."""

from __future__ import annotations

from ansible_collections.ct200.deploy.plugins.module_utils import sglang_instance
from ansible_collections.ct200.deploy.plugins.module_utils.sglang_verdict import readiness


def sglang_readiness(completion, internal_states=None, algorithm="none", floor=1.0, warmups=0, secrets=None):
    """Verdict on the smoke completion and, for DFLASH/DDTree, the drafter's accept length (redacted:
    ``secrets`` are masked in the answer and the message in every encoding)."""
    return readiness(completion, internal_states, algorithm, floor, warmups,
                     [s for s in (secrets or []) if isinstance(s, str)])


def sglang_instance_options(item, defaults=None, base=None, optional=None):
    """An instance's options: BASE < OPTIONAL (set entries only) < DEFAULTS < ITEM, top-level keys."""
    return sglang_instance.options(item, defaults, base, optional)


def sglang_other_instances(instances, defaults, name):
    """The host's other instances as the module's other_instances (name, port, nccl_port, gpus)."""
    return sglang_instance.others(instances, defaults, name)


def sglang_run_facts(instance, state_dir, health_timeout=None):
    """The run path's facts of one merged instance (unit, URL, health budget, speculative or not)."""
    return sglang_instance.run_facts(instance, state_dir, health_timeout)


class FilterModule(object):
    def filters(self):
        return {"sglang_readiness": sglang_readiness, "sglang_instance_options": sglang_instance_options,
                "sglang_run_facts": sglang_run_facts, "sglang_other_instances": sglang_other_instances}
