#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: ct200-deploy developers
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

DOCUMENTATION = r"""
---
module: hf_token_promote
short_description: Make a rotated Hugging Face token the inventory's current token (controller file or vault file)
version_added: "0.1.0"
description:
  - "Action plugin (runs on the controller): writes the pending token into the file the inventory reads its
    current token from, the previous token kept for rollback. One implementation for both kinds of inventory."
  - "O(target=token_file): a controller token file (C(ct200_hf_token: lookup('file', ...))), rewritten born 0600
    and atomically, the previous content kept next to it as a 0600 backup (RV(backup_file))."
  - "O(target=vars_file): a variable file such as C(group_vars/ct200/vault.yml). Only O(var) and C(<var>_previous)
    change; every other line stays as written. An ansible-vault encrypted file stays encrypted, with the vault
    secret of this run (C(--vault-password-file) or C(--ask-vault-pass)). A plain-text file that its group or
    others can read is refused, nothing written, with the fix (C(ansible-vault encrypt FILE)); a missing file is
    created 0600; a plain-text result is reported with a warning saying how to encrypt it."
  - Never follows a symlink; the token is never returned, only fingerprints.
  - Playbook C(playbooks/promote_hf_token.yml) runs it after proving every host already holds the pending token.
author: ct200-deploy developers (@ct200-deploy)
options:
  token:
    description: The pending token (from a file lookup; never on the command line).
    type: str
    required: true
  path:
    description: The controller file the inventory reads its current token from.
    type: path
    required: true
  target:
    description: What O(path) holds.
    type: str
    choices: [token_file, vars_file]
    default: token_file
  var:
    description: The variable of the current token in a O(target=vars_file) file.
    type: str
    default: vault_hf_token
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - ansible.builtin.action_common_attributes.flow
attributes:
  action:
    support: full
  async:
    support: none
  check_mode:
    support: full
  diff_mode:
    support: none
  platform:
    support: full
    platforms: posix
  bypass_host_loop:
    support: none
notes:
  - Run it with C(run_once) and C(no_log) (its input is the token); it acts on the controller whatever the host.
"""

EXAMPLES = r"""
- name: Promote into the inventory's vault file (encrypted stays encrypted)
  ct200.deploy.hf_token_promote:
    token: "{{ lookup('ansible.builtin.file', hf_token_new_file) }}"
    path: "{{ inventory_dir }}/group_vars/ct200/vault.yml"
    target: vars_file
  run_once: true
  no_log: true
  register: promote_result
"""

RETURN = r"""
path:
  description: The file promoted into.
  type: str
  returned: always
target:
  description: O(target).
  type: str
  returned: always
fingerprint:
  description: Fingerprint of the new current token.
  type: str
  returned: always
previous_fingerprint:
  description: Fingerprint of the token it replaced, null when there was none.
  type: str
  returned: always
created:
  description: Whether the file did not exist before.
  type: bool
  returned: always
encrypted:
  description: Whether the variable file is ansible-vault encrypted.
  type: bool
  returned: always
backup_file:
  description: The 0600 copy of the previous token file (O(target=token_file)).
  type: str
  returned: when a token file was replaced
"""

from ansible_collections.ct200.deploy.plugins.module_utils.action_stub import fail_on_host  # noqa: E402
from ansible_collections.ct200.deploy.plugins.module_utils.token_promotion import ARGUMENT_SPEC  # noqa: E402


def main():
    fail_on_host("hf_token_promote", ARGUMENT_SPEC, supports_check_mode=True)


if __name__ == "__main__":
    main()
