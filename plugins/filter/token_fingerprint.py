# -*- coding: utf-8 -*-
# Copyright: ct200-deploy developers
# SPDX-License-Identifier: Apache-2.0
"""The token fingerprint on the controller, for playbooks: the one implementation is
``hf_auth.fingerprint`` (the modules, ``ct200_fleet`` and this filter all call it), so a
fingerprint a host reports (``hf_token state=query``) and one the controller computes compare."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.ct200.deploy.plugins.module_utils.hf_auth import fingerprint


def token_fingerprint(token):
    if not isinstance(token, str) or not token.strip():
        raise AnsibleFilterError("token_fingerprint needs a non-empty token string")
    return fingerprint(token.strip())


class FilterModule:
    def filters(self):
        return {"token_fingerprint": token_fingerprint}
