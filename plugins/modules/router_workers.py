#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: ct200-deploy developers
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

DOCUMENTATION = r"""
---
module: router_workers
short_description: Which serving instances sglang-router sends traffic to now
version_added: "0.3.0"
description:
  - Reads sglang-router's C(GET /workers) and reports, for each of O(urls), whether it is registered and healthy
    (in rotation). Read-only. Used by C(ct200.deploy.router) to prove the entry point; C(ct200 status) can call the
    same Python (module_utils traffic.rotation).
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
  router_url:
    description: The router's base URL.
    type: str
    required: true
  api_key:
    description: The router's API key, when it has one.
    type: str
  urls:
    description: The instances' base URLs as the router reaches them.
    type: list
    elements: str
    default: []
  timeout:
    description: Seconds for the router's answer.
    type: int
    default: 10
"""

EXAMPLES = r"""
- name: Router's view
  ct200.deploy.router_workers:
    router_url: http://127.0.0.1:30000
    urls: [http://10.0.0.5:30001, http://10.0.0.6:30002]
  register: rotation
"""

RETURN = r"""
instances:
  description: Per URL, C(in_rotation), C(registered), C(healthy) and the router's C(load).
  returned: always
  type: dict
in_rotation:
  description: The URLs the router sends traffic to.
  returned: always
  type: list
  elements: str
out_of_rotation:
  description: The URLs it does not.
  returned: always
  type: list
  elements: str
workers:
  description: Every worker the router lists, C(url) (as the router stores it) and C(healthy) (it sends it traffic).
  returned: success
  type: list
  elements: dict
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.ct200.deploy.plugins.module_utils import traffic
from ansible_collections.ct200.deploy.plugins.module_utils.redact import scrub


def main():
    module = AnsibleModule(argument_spec={"router_url": {"type": "str", "required": True},
                                          "api_key": {"type": "str", "no_log": True},
                                          "urls": {"type": "list", "elements": "str", "default": []},
                                          "timeout": {"type": "int", "default": 10}},
                           supports_check_mode=True)
    p = module.params
    # the one redaction at the way out too: the router's words may quote the key in any encoding
    got = scrub(traffic.rotation(p["router_url"], p["urls"], p["api_key"], timeout=p["timeout"]), [p["api_key"]])
    if not got["reachable"]:
        if module.check_mode:
            module.exit_json(changed=False, instances=got["instances"], in_rotation=[], out_of_rotation=list(p["urls"]),
                             msg="check mode: %s" % got["error"])
        module.fail_json(msg=got["error"], instances=got["instances"])
    inside = [u for u, v in got["instances"].items() if v["in_rotation"]]
    module.exit_json(changed=False, instances=got["instances"], in_rotation=inside,
                     out_of_rotation=[u for u in p["urls"] if u not in inside], workers=got["workers"])


if __name__ == "__main__":
    main()
