#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: ct200-deploy developers
# SPDX-License-Identifier: Apache-2.0

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
  - Every parent directory of the path is checked first; a symlink, or a directory that a user other than
    root and O(owner) can write to, is refused and nothing is written. The write never follows a symlink.
  - When the file already holds a different token, O(on_drift) decides. A token the Hub rejects is always
    replaced; a valid one is token drift (typically a rotation that was not promoted) and, unless
    O(on_drift=replace), is left in place and reported with both fingerprints and the promotion step as fix.
author: ct200-deploy developers (@ct200-deploy)
requirements:
  - huggingface_hub >= 2.4, < 2.5 on the managed host (only when O(validate=true))
options:
  token:
    description:
      - The access token (C(hf_...)). Required with O(state=present) unless O(restore_from) is given. Never logged.
    type: str
  state:
    description:
      - Whether the token file should exist. C(query) changes nothing and returns the fingerprint of the
        file's token (for drift checks; the token never travels to the host).
    type: str
    choices: [present, absent, query]
    default: present
  path:
    description:
      - Absolute token file path (a relative path is refused). Defaults to where huggingface_hub reads the
        token for O(owner).
    type: path
  on_drift:
    description:
      - What to do when the file holds a different token that the Hub accepts (or whose validity cannot be
        checked). C(replace) installs O(token) anyway; C(report) leaves the file and returns RV(drift)=true
        with RV(drift_message); C(fail) leaves the file and fails naming the promotion step.
      - Checking the existing token costs one C(whoami) call, made only when the tokens differ.
    type: str
    choices: [replace, report, fail]
    default: replace
  restore_from:
    description:
      - Path of a backup made by this module (RV(backup_file)); its token is installed instead of O(token).
        Used to roll a rotation back. Implies O(on_drift=replace).
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
    description:
      - Keep a timestamped copy of the file it replaces or removes, next to it, always born 0600
        (never a copy of a looser mode).
    type: bool
    default: false
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details: Validation and the drift check (read-only C(whoami) calls) still run in check mode; nothing is written.
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

- name: Deploy, but never silently undo an unpromoted rotation
  ct200.deploy.hf_token:
    token: "{{ vault_hf_token }}"
    owner: sglang
    on_drift: fail
    validate: false
  no_log: true

- name: Fingerprint of the token a host holds (nothing changes, no token sent)
  ct200.deploy.hf_token:
    state: query
    owner: sglang
  register: host_token

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
  description:
    - C(sha256:) and the first 12 hex digits of the SHA-256 of the token now in place (with RV(drift), the
      host's token, left in place).
  returned: when state=present or state=query
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
drift:
  description: Whether the file holds a different valid token that was left in place.
  returned: always
  type: bool
drift_fingerprint:
  description: Fingerprint of the token the host holds, when RV(drift) is true.
  returned: when drift is true
  type: str
expected_fingerprint:
  description: Fingerprint of the token that was not installed, when RV(drift) is true.
  returned: when drift is true
  type: str
drift_message:
  description: The drift, both fingerprints and the fix (promotion, or force), when O(on_drift=report).
  returned: when drift is true and on_drift=report
  type: str
replaced_invalid:
  description: The file held a different token that the Hub rejects; it was replaced.
  returned: when that happened
  type: bool
exists:
  description: Whether the file exists.
  returned: when state=query
  type: bool
"""

from ansible.module_utils.basic import AnsibleModule  # noqa: E402

from ansible_collections.ct200.deploy.plugins.module_utils import hf_errors, token_file  # noqa: E402
from ansible_collections.ct200.deploy.plugins.module_utils._io import UnsafePathError  # noqa: E402
from ansible_collections.ct200.deploy.plugins.module_utils.hf_auth import (  # noqa: E402
    TokenError, fingerprint, hf_token_path)

PROMOTE_FIX = ("if the host holds the newly rotated token, promote it so the inventory holds it too "
               "(playbooks/promote_hf_token.yml, or the promotion step of 'ct200 rotate-token'); to put the "
               "inventory's token back anyway, run with force (role var hf_token_force: true, module option "
               "on_drift: replace)")


def _hub():
    from ansible_collections.ct200.deploy.plugins.module_utils import hf_hub
    return hf_hub


def _whoami(module, token):
    """(info, verdict): whoami of ``token``; exactly one of them is None."""
    hf_hub = _hub()
    endpoint = hf_hub.configure(module.params["endpoint"])
    try:
        return hf_hub.whoami(hf_hub.api(endpoint), token), None
    except Exception as exc:  # the Hub's answer decides, through the one classifier
        return None, hf_errors.classify(exc, hf_errors.Context(endpoint=endpoint, token_sent=True,
                                                               token_source="the token option",
                                                               token_fingerprint=fingerprint(token),
                                                               secrets=(token,)))


def _validate(module, token, result):
    info, verdict = _whoami(module, token)
    if verdict:
        module.fail_json(msg="token not installed, %s: %s. Fix: %s" % (verdict.code, verdict.message, verdict.fix),
                         error_code=verdict.code, **result)
    result.update(user=info["user"], token_role=info["token_role"])
    if info.get("can_read_gated_repos") is not None:
        result["can_read_gated_repos"] = info["can_read_gated_repos"]


def _check_drift(module, current_token, current, desired, result):
    """The host holds a different token: is it a valid one someone put there on purpose (drift)?

    A token the Hub rejects is stale and simply replaced; a valid one, or one whose validity
    cannot be established, is left alone unless on_drift=replace."""
    info, verdict = _whoami(module, current_token)
    if verdict and verdict.code == "invalid_token":
        result["replaced_invalid"] = True
        return
    validity = "valid, token of %s" % info["user"] if info else "validity unknown: %s" % verdict.message
    result.update(drift=True, drift_fingerprint=current.fingerprint, expected_fingerprint=desired.fingerprint)
    message = ("token drift on this host: %s holds %s (%s) but the token to install is %s; the host's token was "
               "not overwritten. Fix: %s" % (result["path"], current.fingerprint, validity, desired.fingerprint,
                                             PROMOTE_FIX))
    if module.params["on_drift"] == "fail":
        module.fail_json(msg=message, error_code="token_drift", **result)
    result["drift_message"] = message


def _prepare(module, result):
    """Everything that can be refused, before any Hub call or byte written."""
    p = module.params
    path = token_file.check_path(p["path"] or hf_token_path(p["owner"]))
    result["path"] = path
    mode = token_file.parse_mode(p["mode"])
    if p["state"] == "query":
        current, _unused = token_file.read_state(path)
        return path, mode, None, current, None, current, False, False
    uid, gid = token_file.resolve_ids(p["owner"], p["group"])
    token_file.check_parents(path, uid, gid)
    token = None
    if p["state"] == "present":
        if p["restore_from"]:
            token = token_file.read_backup(p["restore_from"], path)
        else:
            token = token_file.validated_token(p["token"])
    current, current_token, desired, needs_write, needs_attrs = token_file.plan(
        path, token, p["state"], p["owner"], p["group"], mode)
    return path, mode, token, current, current_token, desired, needs_write, needs_attrs


def run(module):
    p = module.params
    result = dict(changed=False, path=None, previous_fingerprint=None, drift=False)
    try:
        path, mode, token, current, current_token, desired, needs_write, needs_attrs = _prepare(module, result)
    except (TokenError, UnsafePathError) as exc:
        module.fail_json(msg="token not installed: %s; nothing was written" % exc, **result)

    result["previous_fingerprint"] = current.fingerprint
    if p["state"] == "query":
        result.update(exists=current.exists, fingerprint=current.fingerprint, mode=current.mode, owner=current.owner)
        return result
    if p["state"] == "present":
        result["fingerprint"] = desired.fingerprint
        drift_policy = "replace" if p["restore_from"] else p["on_drift"]
        if needs_write and current_token is not None and drift_policy != "replace":
            _check_drift(module, current_token, current, desired, result)
            if result["drift"]:
                result["fingerprint"] = current.fingerprint
                return result
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
    try:
        if p["backup"] and current.exists:
            result["backup_file"] = token_file.backup(path, p["owner"], p["group"])
        if p["state"] == "absent":
            token_file.remove(path, p["owner"], p["group"])
        elif needs_write:
            token_file.write_token(path, token, p["owner"], p["group"], mode)
        else:
            token_file.fix_attributes(path, p["owner"], p["group"], mode)
    except (TokenError, UnsafePathError, OSError) as exc:
        module.fail_json(msg="token not installed at %s: %s; the previous token file is unchanged" % (path, exc),
                         **result)
    return result


def main():
    module = AnsibleModule(
        argument_spec=dict(
            token=dict(type="str", no_log=True),
            state=dict(type="str", choices=["present", "absent", "query"], default="present"),
            path=dict(type="path"),
            owner=dict(type="str"),
            group=dict(type="str"),
            mode=dict(type="str", default="0600"),
            validate=dict(type="bool", default=True),
            endpoint=dict(type="str"),
            backup=dict(type="bool", default=False),
            on_drift=dict(type="str", choices=["replace", "report", "fail"], default="replace"),
            restore_from=dict(type="path"),
        ),
        mutually_exclusive=[("token", "restore_from")],
        supports_check_mode=True,
    )
    module.exit_json(**run(module))


if __name__ == "__main__":
    main()
