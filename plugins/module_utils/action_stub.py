# -*- coding: utf-8 -*-
# Copyright: ct200-deploy developers
# SPDX-License-Identifier: Apache-2.0
"""The module side of the collection's action plugins (hf_download_wait, hf_token_promote, site_plan).

PRIVATE to the ct200.deploy collection.

Such an action runs on the controller and never sends its module to a host; the module file is there for
ansible-doc and for ansible-test (its argument spec against its documentation). Run on a host anyway, it
refuses with the one message below. The argument spec itself lives beside the action's logic in
module_utils, so the action's accepted options and the stub's cannot drift apart.
"""

from __future__ import annotations

from ansible.module_utils.basic import AnsibleModule


def fail_on_host(name, argument_spec, supports_check_mode=False):
    """Parse the options of action ``ct200.deploy.<name>`` like its module would, then fail: it is no module."""
    module = AnsibleModule(argument_spec=argument_spec, supports_check_mode=supports_check_mode)
    module.fail_json(msg="ct200.deploy.%s is an action plugin: it runs on the controller, call it as a task, "
                         "not as a module on a host" % name)
