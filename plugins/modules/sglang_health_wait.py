#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: ct200-deploy developers
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_health_wait
short_description: Wait for a started SGLang unit to answer its health probe, and stop waiting when it exits
version_added: "0.3.0"
description:
  - Probes O(url) every O(delay) seconds until it answers HTTP 200 or O(timeout) seconds pass, like
    C(ansible.builtin.uri) with C(until).
  - Between probes it reads the unit with C(systemctl show). When the main process has exited since the wait began
    (C(ActiveState=failed), C(SubState=auto-restart), a higher C(NRestarts), or C(inactive)), it fails at once with
    systemd's C(Result=) and exit status, instead of waiting out a budget sized for a 595 GB model's load.
  - A unit that still runs but never answers fails after O(timeout), as before.
  - The role C(ct200.deploy.sglang_service) runs it after every start; its rescue prints the journal tail.
  - The decisions live in module_utils sglang_health (unit-tested).
author: ct200-deploy developers (@ct200-deploy)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details: Reads only; in check mode nothing was started, so it probes nothing and returns RV(healthy) null.
  diff_mode:
    support: none
  platform:
    platforms: posix
options:
  url:
    description: The health URL from the host, e.g. C(http://127.0.0.1:30000/health_generate).
    type: str
    required: true
  unit:
    description: The systemd unit that serves O(url), e.g. C(sglang@kimi.service).
    type: str
    required: true
  timeout:
    description: Seconds to wait for HTTP 200 while the unit runs.
    type: int
    default: 2400
  delay:
    description: Seconds between probes.
    type: int
    default: 2
  probe_timeout:
    description: Seconds one probe may take (C(/health_generate) runs one decode step).
    type: int
    default: 30
"""

EXAMPLES = r"""
- name: Start the instance
  ansible.builtin.systemd_service:
    name: sglang@kimi.service
    state: started

- name: Wait until it is healthy (or stop waiting when it exits)
  ct200.deploy.sglang_health_wait:
    url: http://127.0.0.1:30000/health_generate
    unit: sglang@kimi.service
    timeout: 2400
"""

RETURN = r"""
healthy:
  description: Whether O(url) answered 200 (null in check mode).
  returned: always
  type: bool
waited:
  description: Seconds from the first probe to the verdict.
  returned: always
  type: float
probes:
  description: How many probes were sent.
  returned: always
  type: int
exited:
  description: Why the unit can no longer become healthy (systemd's Result= and exit status), when it exited.
  returned: always
  type: str
  sample: "the main process exited (Result=exit-code, status 2) and systemd is restarting it (1 restart(s) so far)"
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.ct200.deploy.plugins.module_utils import sglang_health as health


def main():
    module = AnsibleModule(argument_spec={"url": {"type": "str", "required": True},
                                          "unit": {"type": "str", "required": True},
                                          "timeout": {"type": "int", "default": 2400},
                                          "delay": {"type": "int", "default": 2},
                                          "probe_timeout": {"type": "int", "default": 30}},
                           supports_check_mode=True)
    params = module.params
    if module.check_mode:
        module.exit_json(changed=False, healthy=None, waited=0.0, probes=0, exited=None)
    systemctl = module.get_bin_path("systemctl", required=True)
    argv = [systemctl, "show", params["unit"]] + ["--property=%s" % p for p in health.PROPERTIES]

    def show():
        rc, out, _err = module.run_command(argv)
        return health.parse_show(out) if rc == 0 else {}

    result = health.wait_healthy(lambda: health.probe(params["url"], max(params["probe_timeout"], 1)), show,
                                 max(params["timeout"], 0), max(params["delay"], 1))
    if not result["healthy"]:
        module.fail_json(msg=health.failure_message(params["unit"], params["url"], params["timeout"], result), **result)
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
