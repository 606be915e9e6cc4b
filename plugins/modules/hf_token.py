#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: ct200-deploy developers
# Apache-2.0

from __future__ import annotations

DOCUMENTATION = r"""
---
module: hf_token
short_description: Install or remove a Hugging Face access token file, born 0600 and validated first
version_added: "0.1.0"
description:
  - Writes the token to the file huggingface_hub reads for O(owner) (by default
    C(~owner/.cache/huggingface/token), or C($HF_TOKEN_PATH) / C($HF_HOME/token) when the module
    runs as that user), so that the user that will download weights is the user that has the token.
  - The token is normalised first; an empty, whitespace-only, multi-line or control-character token is
    refused with a message naming the problem and nothing is written.
  - With O(validate=true) the token is checked with C(whoami-v2) before anything is written; a token the
    Hub rejects writes nothing and leaves the previous file intact.
  - The file is created with mode 0600 from its first byte, fsynced and renamed into place atomically.
    Idempotence uses a constant-time comparison of the contents; diffs and results carry fingerprints
    (C(sha256:) + 12 hex digits), never the token.
author: ct200-deploy developers (@ct200-deploy)
requirements:
  - huggingface_hub >= 2.4, < 2.5 on the managed host (only when O(validate=true))
options:
  token:
    description:
      - The access token (C(hf_...)). Required with O(state=present). Never logged.
    type: str
  state:
    description: Whether the token file should exist.
    type: str
    choices: [present, absent]
    default: present
  path:
    description:
      - Token file path. Defaults to where huggingface_hub reads the token for O(owner).
    type: path
  owner:
    description: Owner of the file (and of parent directories it creates). Defaults to the user the module runs as.
    type: str
  group:
    description: Group of the file. Defaults to the primary group of O(owner).
    type: str
  mode:
    description:
      - File mode as an octal string. Modes that let other users read the token are refused.
    type: str
    default: "0600"
  validate:
    description: Call C(whoami-v2) with the token before writing it; a rejected token writes nothing.
    type: bool
    default: true
  endpoint:
    description: Hub endpoint. Defaults to C($HF_ENDPOINT), else U(https://huggingface.co).
    type: str
  backup:
    description: Keep a timestamped copy (mode preserved) of the file it replaces or removes.
    type: bool
    default: false
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details: Validation (a read-only C(whoami) call) still runs in check mode; nothing is written.
  diff_mode:
    support: full
    details: The diff shows state, fingerprint, mode, owner and group, never the token.
  platform:
    support: full
    platforms: posix
seealso:
  - module: ct200.deploy.hf_gated_access
"""

EXAMPLES = r"""
- name: Install the deployment token for the service user
  ct200.deploy.hf_token:
    token: "{{ vault_hf_token }}"
    owner: sglang
    backup: true
  no_log: true

- name: Write to an explicit HF_TOKEN_PATH without validating (offline host)
  ct200.deploy.hf_token:
    token: "{{ vault_hf_token }}"
    path: /etc/ct200/hf_token
    validate: false
  no_log: true

- name: Remove the token
  ct200.deploy.hf_token:
    state: absent
    owner: sglang
"""

RETURN = r"""
path:
  description: The token file managed.
  returned: always
  type: str
  sample: /home/sglang/.cache/huggingface/token
fingerprint:
  description: C(sha256:) and the first 12 hex digits of the SHA-256 of the token now in place.
  returned: when state=present
  type: str
  sample: "sha256:3f1c0a9be2d4"
previous_fingerprint:
  description: Fingerprint of the token the file held before, if any.
  returned: always
  type: str
user:
  description: Hub user the token belongs to (from whoami).
  returned: when validate=true and state=present
  type: str
  sample: alice
token_role:
  description: Token role reported by the Hub (read, write or fineGrained).
  returned: when validate=true and state=present
  type: str
  sample: read
can_read_gated_repos:
  description: For fine-grained tokens, whether the gated-repos read permission is ticked.
  returned: when validate=true and state=present and the token is fine-grained
  type: bool
backup_file:
  description: Path of the backup made.
  returned: when backup=true and a file was replaced or removed
  type: str
"""

import os  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402

from ansible_collections.ct200.deploy.plugins.module_utils import hf_errors, token_file  # noqa: E402
from ansible_collections.ct200.deploy.plugins.module_utils.hf_auth import (  # noqa: E402
    TokenError, fingerprint, hf_token_path)


def _validate(module, token, result):
    from ansible_collections.ct200.deploy.plugins.module_utils import hf_hub
    endpoint = hf_hub.configure(module.params["endpoint"])
    try:
        info = hf_hub.whoami(hf_hub.api(endpoint), token)
    except Exception as exc:
        verdict = hf_errors.classify(exc, hf_errors.Context(endpoint=endpoint, token_sent=True,
                                                            token_source="the token option",
                                                            token_fingerprint=fingerprint(token)))
        module.fail_json(msg="token not installed, %s: %s. Fix: %s" % (verdict.code, verdict.message, verdict.fix),
                         error_code=verdict.code, **result)
    result.update(user=info["user"], token_role=info["token_role"])
    if info.get("can_read_gated_repos") is not None:
        result["can_read_gated_repos"] = info["can_read_gated_repos"]


def run(module):
    p = module.params
    result = dict(changed=False, path=None, previous_fingerprint=None)
    try:
        path = p["path"] or hf_token_path(p["owner"])
        result["path"] = path
        mode = token_file.parse_mode(p["mode"])
        token = token_file.validated_token(p["token"]) if p["state"] == "present" else None
        current, desired, needs_write, needs_attrs = token_file.plan(
            path, token, p["state"], p["owner"], p["group"], mode)
    except TokenError as exc:
        module.fail_json(msg="token not installed: %s; nothing was written" % exc, **result)

    result["previous_fingerprint"] = current.fingerprint
    if p["state"] == "present":
        result["fingerprint"] = desired.fingerprint
        if p["validate"]:
            _validate(module, token, result)
        changed = needs_write or needs_attrs
    else:
        changed = current.exists
    result["changed"] = changed
    if module._diff:
        result["diff"] = {"before": current.as_diff(), "after": desired.as_diff() if changed else current.as_diff(),
                          "before_header": path, "after_header": path}
    if not changed or module.check_mode:
        return result

    if p["backup"] and current.exists:
        result["backup_file"] = module.backup_local(path)
    if p["state"] == "absent":
        os.unlink(path)
    elif needs_write:
        token_file.write_atomically(path, token, p["owner"], p["group"], mode)
    else:
        token_file.fix_attributes(path, p["owner"], p["group"], mode)
    return result


def main():
    module = AnsibleModule(
        argument_spec=dict(
            token=dict(type="str", no_log=True),
            state=dict(type="str", choices=["present", "absent"], default="present"),
            path=dict(type="path"),
            owner=dict(type="str"),
            group=dict(type="str"),
            mode=dict(type="str", default="0600"),
            validate=dict(type="bool", default=True),
            endpoint=dict(type="str"),
            backup=dict(type="bool", default=False),
        ),
        supports_check_mode=True,
    )
    module.exit_json(**run(module))


if __name__ == "__main__":
    main()
