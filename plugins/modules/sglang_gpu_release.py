#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: ct200-deploy developers
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_gpu_release
short_description: Check that no process of a stopped SGLang unit still holds a GPU
version_added: "0.1.0"
description:
  - Asks C(nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits) which processes hold GPU
    memory and fails, naming each PID and its memory and the fix, when one of them belongs to O(unit) (its cgroup is
    the unit's). A stop that runs out of C(TimeoutStopSec=) SIGKILLs SGLang mid-drain, which can leave this.
  - Polls for up to O(wait) seconds first, since the driver frees memory shortly after a process exits.
  - Processes of other units or of no unit are returned in RV(apps) but do not fail the check.
  - The role C(ct200.deploy.sglang_service) runs it after every stop and before every restart.
author: ct200-deploy developers (@ct200-deploy)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details: The module only reads.
  diff_mode:
    support: none
  platform:
    platforms: posix
options:
  unit:
    description: The unit that was stopped, e.g. C(sglang@kimi.service).
    type: str
    required: true
  nvidia_smi:
    description: Path of nvidia-smi; found in PATH when not given. Without it nothing is checked (RV(checked) false).
    type: path
  wait:
    description: Seconds to wait for the unit's processes to let go of the GPUs before failing.
    type: int
    default: 10
"""

EXAMPLES = r"""
- name: Stop the instance
  ansible.builtin.systemd_service:
    name: sglang@kimi.service
    state: stopped

- name: No process of it still holds a GPU
  ct200.deploy.sglang_gpu_release:
    unit: sglang@kimi.service
"""

RETURN = r"""
checked:
  description: Whether nvidia-smi was there to ask (false on a host without the NVIDIA driver).
  returned: always
  type: bool
holders:
  description: Compute processes of O(unit) that still hold GPU memory (empty when the check passes).
  returned: always
  type: list
  elements: dict
  sample: [{"pid": 4242, "used_memory_mib": 81234, "cgroup": "/system.slice/system-sglang.slice/sglang@kimi.service"}]
apps:
  description: Every compute process nvidia-smi listed (PID and used memory in MiB, null when it printed C([N/A])).
  returned: always
  type: list
  elements: dict
"""

import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.ct200.deploy.plugins.module_utils import sglang_verdict as verdict


def query(module, smi):
    rc, out, err = module.run_command([smi] + verdict.COMPUTE_APPS_QUERY)
    if rc != 0:
        module.fail_json(msg="nvidia-smi failed (rc %s): %s; the GPU release of %s cannot be checked: fix the "
                             "driver (nvidia-smi must answer)" % (rc, (err or out).strip()[:300], module.params["unit"]))
    try:
        return verdict.parse_compute_apps(out)
    except verdict.VerdictError as exc:
        module.fail_json(msg=str(exc))
    return []


def main():
    module = AnsibleModule(argument_spec={"unit": {"type": "str", "required": True},
                                          "nvidia_smi": {"type": "path"},
                                          "wait": {"type": "int", "default": 10}},
                           supports_check_mode=True)
    unit = module.params["unit"]
    smi = module.params["nvidia_smi"] or module.get_bin_path("nvidia-smi")
    if not smi:
        module.exit_json(changed=False, checked=False, holders=[], apps=[],
                         msg="nvidia-smi not found: the GPU release of %s was not checked" % unit)
    deadline = time.monotonic() + max(module.params["wait"], 0)
    while True:
        apps = query(module, smi)
        holders = verdict.gpu_holders(apps, unit)
        if not holders or time.monotonic() >= deadline:
            break
        time.sleep(1)
    if holders:
        module.fail_json(msg=verdict.release_message(unit, holders), checked=True, holders=holders, apps=apps)
    module.exit_json(changed=False, checked=True, holders=[], apps=apps)


if __name__ == "__main__":
    main()
