#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: ct200-deploy developers
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

DOCUMENTATION = r"""
---
module: traffic_rotation
short_description: Take one serving instance out of client traffic before a stop, or put it back after readiness
version_added: "0.3.0"
description:
  - The drain step of C(ct200.deploy.sglang_service) (tasks/instance_traffic.yml), run before every stop or restart
    of an instance (O(state=out)) and after its readiness gate passed (O(state=in)).
  - O(mode=router) talks to C(sglang-router)'s control plane (C(GET/POST /workers), C(DELETE /workers/<id>)) and
    waits until the router's worker list shows the change; a worker put back must be healthy in the router.
  - O(mode=external) runs the site's own command (O(command_out) or O(command_in)), an argv list whose elements may
    name C({host}), C({url}) and C({name}); no shell.
  - O(mode=none) does nothing (no load balancer in front).
  - In-flight requests of a removed instance finish in the stop that follows (SIGTERM, bounded by the unit's
    C(TimeoutStopSec=)); O(settle) waits a little after the removal for requests the router already dispatched.
author: ct200-deploy developers (@ct200-deploy)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details: Reads the router's worker list and reports what would change; runs no external command.
  diff_mode:
    support: none
  platform:
    platforms: posix
options:
  mode:
    description: Who routes client traffic (the inventory's C(ct200_traffic)).
    type: str
    choices: [router, external, none]
    default: router
  state:
    description: C(out) before a stop, C(in) after the readiness gate passed.
    type: str
    choices: [out, in]
    required: true
  url:
    description:
      - The instance's base URL as the router reaches it, C(http://HOST:PORT). Give it, or O(port) (and O(listen),
        O(address), O(router_is_local)) to have it derived.
    type: str
  port:
    description: The instance's port (when O(url) is not given).
    type: int
  listen:
    description: The instance's listen address; a wildcard means O(address), loopback needs O(router_is_local).
    type: str
    default: 127.0.0.1
  address:
    description: The host's address as the router reaches it (for a wildcard O(listen)).
    type: str
    default: ""
  router_is_local:
    description: Whether the router (where this step runs) is on the instance's own host.
    type: bool
    default: false
  name:
    description: The instance's name (for the external command's C({name})).
    type: str
    default: ""
  host:
    description: The instance's inventory host (for the external command's C({host})).
    type: str
    default: ""
  router_url:
    description: The router's base URL as seen from where this runs; with O(mode=router) and none, the step fails naming the fix.
    type: str
  api_key:
    description: The router's API key (control plane), also handed to the router as the worker's key when adding it.
    type: str
  command_out:
    description: With O(mode=external), the argv that takes the host out of the site's load balancer.
    type: list
    elements: str
  command_in:
    description: With O(mode=external), the argv that puts the host back.
    type: list
    elements: str
  timeout:
    description: Seconds to wait for the router to show the change (or for the external command).
    type: int
    default: 120
  settle:
    description: Seconds to wait after a removal, for requests the router dispatched just before it.
    type: float
    default: 1.0
"""

EXAMPLES = r"""
- name: Out of rotation before the restart
  ct200.deploy.traffic_rotation:
    state: out
    url: http://10.0.0.5:30001
    router_url: http://127.0.0.1:30000
    api_key: "{{ sglang_service_api_key }}"
  no_log: true

- name: Site load balancer
  ct200.deploy.traffic_rotation:
    mode: external
    state: in
    url: http://10.0.0.5:30001
    host: ct200-01
    command_in: [/usr/local/bin/lbctl, enable, "{host}"]
"""

RETURN = r"""
action:
  description: What was done, C(remove), C(add), C(command) or C(none); C(unknown) in check mode without a router.
  returned: always
  type: str
reason:
  description: Why, in words.
  returned: always
  type: str
url:
  description: The instance URL as the router stores it.
  returned: always
  type: str
workers_in_rotation:
  description: Healthy workers in the router after the step (mode router, not in check mode).
  returned: when mode is router
  type: int
argv:
  description: The external command that ran (mode external).
  returned: when mode is external
  type: list
  elements: str
"""

import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.ct200.deploy.plugins.module_utils import traffic
from ansible_collections.ct200.deploy.plugins.module_utils.redact import redact, scrub


def main():
    module = AnsibleModule(
        argument_spec={
            "mode": {"type": "str", "choices": list(traffic.MODES), "default": "router"},
            "state": {"type": "str", "choices": list(traffic.STATES), "required": True},
            "url": {"type": "str"},
            "port": {"type": "int"},
            "listen": {"type": "str", "default": "127.0.0.1"},
            "address": {"type": "str", "default": ""},
            "router_is_local": {"type": "bool", "default": False},
            "name": {"type": "str", "default": ""},
            "host": {"type": "str", "default": ""},
            "router_url": {"type": "str"},
            "api_key": {"type": "str", "no_log": True},
            "command_out": {"type": "list", "elements": "str"},
            "command_in": {"type": "list", "elements": "str"},
            "timeout": {"type": "int", "default": 120},
            "settle": {"type": "float", "default": 1.0},
        },
        required_one_of=[("url", "port")],
        supports_check_mode=True)
    p = module.params
    secrets = [p["api_key"]] if p["api_key"] else []  # masked in every encoding in what this module returns
    try:
        if not p["url"]:
            p["url"] = traffic.worker_url(p["listen"], p["address"], p["port"], p["router_is_local"])
        if p["mode"] == "external":
            template = p["command_out"] if p["state"] == "out" else p["command_in"]
            if not template:
                module.fail_json(msg="ct200_traffic is external but no %s command is set: set ct200_traffic_external_%s "
                                     "(an argv list) or use ct200_traffic: router / none" % (p["state"], p["state"]))
            argv = traffic.external_argv(template, p["host"], traffic.normalize_url(p["url"]), p["name"])
            result = traffic.step("external", p["state"], p["url"])
            result["argv"] = argv
            if module.check_mode:
                module.exit_json(**result)
            rc, out, err = module.run_command(argv)
            if rc != 0:
                said = redact((err or out).strip(), secrets)[-400:]  # redacted before the cut
                module.fail_json(msg="the site's traffic command %s failed (rc %d): %s; fix it or the load balancer, then "
                                     "re-run" % (argv[0], rc, said), **result)
            module.exit_json(**result)
        router = None
        if p["mode"] == "router" and p["router_url"]:
            router = traffic.RouterClient(p["router_url"], p["api_key"], timeout=min(30, max(p["timeout"], 1)))
        result = traffic.step(p["mode"], p["state"], p["url"], router=router, api_key=p["api_key"],
                              check_mode=module.check_mode, timeout=p["timeout"])
        if result["action"] == "remove" and not module.check_mode and p["settle"] > 0:
            time.sleep(p["settle"])
    except traffic.TrafficError as exc:
        if module.check_mode:  # a dry run on a site whose router is not installed yet
            module.exit_json(changed=False, action="unknown", url=p["url"], reason=redact("check mode: %s" % exc, secrets))
        module.fail_json(msg=redact(str(exc), secrets))
    module.exit_json(**scrub(result, secrets))


if __name__ == "__main__":
    main()
